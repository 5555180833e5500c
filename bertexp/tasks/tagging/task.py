"""Token tagging: named entities (BIO / BIOES) and plain tags (POS).

Reads `bertexp prepare tagging` output (see bertexp.tasks.tagging.data): windows of
word pieces, the word's label at its first piece. The loss is the mean
cross-entropy over the labelled pieces of the global batch (the trainer
divides by their count over all replicas). Evaluation merges the windows
back per sentence, so every word is scored once, and scores entities with
seqeval (bertexp.tasks.tagging.metrics).

Shape legend: B windows in a batch, S max_seq_length, L labels.
"""
import json
import logging

import gin
import tensorflow as tf
import tf_keras

from bertexp import capabilities
from bertexp.checkpoints import run_files
from bertexp.checkpoints import to_huggingface
from bertexp.data import meta as meta_data
from bertexp.data import pipeline
from bertexp.model import encoders
from bertexp.model import memory_plan
from bertexp.model import modeling
from bertexp.tasks import base
from bertexp.tasks.tagging import data as tagging_data
from bertexp.tasks.tagging import metrics as tagging_metrics
from bertexp.tasks.tagging import serving as tagging_serving
from bertexp.util import fileio

_PER_TOKEN = ("label_ids", "piece_label_ids", "word_index")


def serving_outputs(outputs):
  """The export's outputs of tag logits [B, S, L]: tag ids and their
  probabilities [B, S]."""
  probabilities = tf.nn.softmax(outputs, -1)                        # [B, S, L]
  return {"tag_ids": tf.argmax(outputs, -1, output_type=tf.int32),
          "scores": tf.reduce_max(probabilities, -1)}               # [B, S]


# TaggingModel's `tagger` -> BertForTokenClassification (id2label: tags).
HUGGINGFACE_HEADS = (to_huggingface.HeadMapping(
    task="bertexp.TaggingTask", layer="tagger", hf_module="classifier",
    architecture="ForTokenClassification", labels="names"),)


class TaggingModel(modeling.HeadModel):
  """Encoder + dropout + dense on every position -> logits [B, S, L]."""
  config_fields = ("num_labels",)

  def __init__(self, encoder, num_labels, dropout_rate=0.1, seed=None,
               **kwargs):
    super().__init__(**kwargs)
    self.encoder = encoder
    self.num_labels = num_labels
    self.dropout = modeling.Dropout(dropout_rate)
    self.tagger = tf_keras.layers.Dense(
        num_labels, kernel_initializer=tf_keras.initializers.TruncatedNormal(
            stddev=encoder.config.initializer_range, seed=seed),
        dtype="float32", name="tagger")

  def call(self, inputs, training=None, dropout_seed=None):
    encoded = self.encoder(inputs, training=training,
                           dropout_seed=modeling.fold_seed(dropout_seed, 0))
    return self.tagger(self.dropout(
        encoded["sequence_output"], training=training,
        seed=modeling.fold_seed(dropout_seed, 1)))                   # [B, S, L]



def _read_meta(path):
  meta = meta_data.read_meta_data(
      path, positive=("max_seq_length", "num_labels", "doc_stride"),
      counts=("train_data_size", "vocab_size"), strings=("scheme",))
  if meta.get("task_type") != "tagging":
    raise ValueError(f"{path}: task_type {meta.get('task_type')!r}, expected "
                     "'tagging' (bertexp prepare tagging's meta data)")
  names = meta.get("label_names")
  if not isinstance(names, list) or len(names) != meta["num_labels"]:
    raise ValueError(f"{path}: label_names must list num_labels names")
  meta_data.split_sizes(meta, path)
  return meta


def _decoder(seq_length, label_name):
  """serialized [B] -> (features, labels [B, S]); labels are `label_name`."""
  spec = {name: tf.io.FixedLenFeature([seq_length], tf.int64)
          for name in (*pipeline.MODEL_INPUTS, *_PER_TOKEN)}
  spec["sentence_id"] = tf.io.FixedLenFeature([], tf.int64)

  @tf.autograph.experimental.do_not_convert
  def decode(serialized):
    parsed = {k: tf.cast(v, tf.int32) for k, v in
              tf.io.parse_example(serialized, spec).items()}
    labels = parsed.pop(label_name)                                  # [B, S]
    parsed.pop("label_ids", None)
    parsed.pop("piece_label_ids", None)
    parsed["example_weight"] = tf.ones_like(parsed["sentence_id"], tf.float32)
    return parsed, labels
  return decode


def _padding(seq_length):
  features = {name: tf.zeros([seq_length], tf.int32)
              for name in (*pipeline.MODEL_INPUTS, "word_index")}
  features.update(sentence_id=tf.constant(-1), position=tf.constant(-1),
                  example_weight=tf.constant(0.0))
  return features, tf.fill([seq_length], tagging_data.IGNORED)


@gin.configurable(module="bertexp")
class TaggingTask(base.RecordTask):
  """Per-token labels (NER, POS) on the sequence output.

  Args:
    bert_config_file: the encoder's config.
    meta_data_path: `bertexp prepare tagging`'s `{task}_meta_data`.
    train_data_path, eval_data_path, test_data_path: its record files.
    label_all_pieces: train on every piece of a word (its later pieces
      continue the entity: B-X -> I-X), as Hugging Face's `label_all_tokens`;
      default: only the first piece (evaluation always reads first pieces).
    dropout_rate: the head's dropout (default: the config's hidden dropout).
    seed: the head's initialiser and the data order.
    shuffle_buffer_size: the training shuffle window (0: file order).
  """

  def __init__(self, *, bert_config_file=gin.REQUIRED,
               meta_data_path=gin.REQUIRED, train_data_path=None,
               eval_data_path=None, test_data_path=None,
               label_all_pieces=False, dropout_rate=None, seed=None,
               shuffle_buffer_size=10000):
    super().__init__(
        bert_config_file=bert_config_file, meta_data_path=meta_data_path,
        meta=_read_meta(meta_data_path),
        paths={"train": train_data_path, "eval": eval_data_path,
               "test": test_data_path},
        seed=seed, shuffle_buffer_size=shuffle_buffer_size,
        dropout_rate=dropout_rate)
    self.label_all_pieces = label_all_pieces
    self.label_names = list(self.meta["label_names"])
    self.scheme = self.meta["scheme"]
    self._sentences = {}

  # -- model ---------------------------------------------------------------
  def build_model(self):
    config = self.encoder_config()
    return TaggingModel(encoders.build_encoder(config), len(self.label_names),
                        self.head_dropout(config), seed=self.seed,
                        name="tagging_model").build_variables()

  def model_shape(self):
    config = encoders.read_config(self.bert_config_file)
    seq = self.meta["max_seq_length"]
    return config, seq, memory_plan.Head.token_dense(
        config, seq, len(self.label_names))

  # -- data ----------------------------------------------------------------
  def _path(self, split):
    path = self.paths.get(split)
    if not path:
      raise ValueError(f"no data path bound for split {split!r} (bind "
                       "TRAIN_DATA_PATH / EVAL_DATA_PATH / TEST_DATA_PATH)")
    return path

  def split_size(self, split):
    size = self.meta.get("split_sizes", {}).get(split)
    if size is None:
      raise ValueError(f"{self.meta_data_path}: no size for split {split!r}: "
                       "was it prepared?")
    return size

  def build_inputs(self, split, input_context=None, batch_size=0,
                   train_order=None):
    seq = self.meta["max_seq_length"]
    if split == "train":
      label = "piece_label_ids" if self.label_all_pieces else "label_ids"
      return pipeline.training_batches(
          self._path(split), _decoder(seq, label), batch_size=batch_size,
          input_context=input_context,
          train_order=pipeline.train_order_or_default(train_order, self.seed),
          shuffle_window=self.shuffle_buffer_size)
    dataset = tf.data.TFRecordDataset(
        pipeline.list_files(self._path(split))).enumerate()
    if input_context and input_context.num_input_pipelines > 1:
      dataset = dataset.shard(input_context.num_input_pipelines,
                              input_context.input_pipeline_id)
    dataset = dataset.batch(max(batch_size, 1)).map(
        pipeline.with_positions(_decoder(seq, "label_ids"))).unbatch()
    return pipeline.pad_and_batch_eval(
        dataset, num_examples=self.split_size(split), batch_size=batch_size,
        input_context=input_context, padding=_padding(seq))

  def check_training_data(self):
    if not self.paths["train"]:
      return
    pipeline.check_training_files(
        self.paths["train"], _decoder(self.meta["max_seq_length"], "label_ids"),
        config=encoders.read_config(self.bert_config_file),
        label_ranges={"label": (tagging_data.IGNORED, len(self.label_names))},
        source=self.meta_data_path)

  def eval_splits(self):
    return {"eval": self.split_size("eval")} if self.paths["eval"] else {}

  def capabilities(self):
    return capabilities.merged(
        super().capabilities(),
        capabilities.MemoryPlan(model_shape=self.model_shape),
        capabilities.SavedModelServing(outputs=serving_outputs,
                                       text=self.text_serving),
        capabilities.PredictorApi(decoder=tagging_serving.predictor_row),
        capabilities.Predictions(splits=["test"] if self.paths["test"] else [],
                                 write=self.write_predictions))

  def sentences(self, split):
    """The split's sentences (tokens, gold tags, text, offsets), read once."""
    if split not in self._sentences:
      path = tagging_data.sentences_path(self._path(split))
      self._sentences[split] = [
          json.loads(line) for line in fileio.read_text(path).splitlines()
          if line]
    return self._sentences[split]

  # -- loss and metrics ----------------------------------------------------
  def _labels_like(self, labels, outputs):
    """labels [B, S] cut to the outputs' length (dynamic padding cuts only
    padding, whose labels are ignored)."""
    return labels[:, :tf.shape(outputs)[1]]

  def loss_weights(self, labels):
    return {"loss": tf.reduce_sum(tf.cast(labels >= 0, tf.float32), 1)}  # [B]

  def loss_numerators(self, labels, outputs):
    labels = self._labels_like(labels, outputs)
    labelled = labels >= 0                                           # [B, S]
    losses = tf_keras.losses.sparse_categorical_crossentropy(
        tf.maximum(labels, 0), outputs, from_logits=True)            # [B, S]
    return {"loss": tf.reduce_sum(tf.where(labelled, losses, 0.0), 1)}  # [B]

  def per_example_loss(self, labels, outputs):
    count = self.loss_weights(labels)["loss"]
    return self.loss_numerators(labels, outputs)["loss"] / tf.maximum(count, 1.0)

  def build_train_metrics(self):
    return [tf_keras.metrics.Mean("piece_accuracy")]

  def update_train_metrics(self, train_metrics, labels, outputs):
    labels = self._labels_like(labels, outputs)
    right = tf.cast(tf.equal(tf.argmax(outputs, -1, output_type=tf.int32),
                             labels), tf.float32)
    train_metrics[0].update_state(right, sample_weight=tf.cast(labels >= 0,
                                                               tf.float32))

  def eval_outputs(self, features, labels, outputs):
    probabilities = tf.nn.softmax(outputs, -1)                      # [B, S, L]
    labels = self._labels_like(labels, outputs)
    return {"predictions": tf.argmax(outputs, -1, output_type=tf.int32),
            "scores": tf.reduce_max(probabilities, -1),              # [B, S]
            "word_index": features["word_index"][:, :tf.shape(outputs)[1]],
            "sentence_id": features["sentence_id"],
            "weights": features["example_weight"],
            "loss_sum": self.loss_numerators(labels, outputs)["loss"],
            "loss_count": self.loss_weights(labels)["loss"]}

  def predicted_tags(self, gathered, split):
    """(sentences, per-sentence predicted tags, per-sentence word scores)."""
    sentences = self.sentences(split)
    label_ids, scores = tagging_metrics.merge_windows(
        gathered, len(sentences), [len(s["tokens"]) for s in sentences])
    tags = [[self.label_names[i] for i in ids] for ids in label_ids]
    return sentences, tags, scores

  def finalize_eval(self, gathered):
    sentences, predicted, _ = self.predicted_tags(gathered, "eval")
    gold = [s["tags"] for s in sentences]
    if any(g is None for g in gold):
      raise ValueError(f"{self.paths['eval']}: the eval split has no tags")
    real = gathered["weights"] > 0
    result = {"loss": float(gathered["loss_sum"][real].sum() / max(
        gathered["loss_count"][real].sum(), 1.0)),
              "num_examples": len(sentences)}
    result.update(self._scores(gold, predicted))
    return result

  def _scores(self, gold, predicted):
    if self.scheme == "NONE":
      return tagging_metrics.token_accuracy(gold, predicted)
    return tagging_metrics.entity_scores(gold, predicted,
                                         self.meta.get("entity_types", []))

  def selection_metric(self):
    return "accuracy" if self.scheme == "NONE" else "f1"

  # -- predictions and serving -----------------------------------------------
  def write_predictions(self, gathered, output_dir, split="test"):
    """`predictions_<split>.conll` (token, gold tag when known, predicted
    tag), `entities_<split>.jsonl` (per sentence: its text and entities
    with character offsets) and, when the split has tags,
    `metrics_<split>.json` (the scores of finalize_eval)."""
    sentences, predicted, scores = self.predicted_tags(gathered, split)
    conll, entity_lines = [], []
    for sentence, tags, word_scores in zip(sentences, predicted, scores):
      gold = sentence["tags"] or [None] * len(tags)
      conll.append("".join(
          f"{token}\t{g}\t{p}\n" if g is not None else f"{token}\t{p}\n"
          for token, g, p in zip(sentence["tokens"], gold, tags)) + "\n")
      found = ([] if self.scheme == "NONE" else tagging_metrics.entities(
          tags, word_scores, sentence["text"], sentence["offsets"]))
      entity_lines.append(json.dumps(
          {"source": sentence["source"], "text": sentence["text"],
           "entities": found}, ensure_ascii=False) + "\n")
    paths = (run_files.output_file(output_dir, f"predictions_{split}.conll"),
             run_files.output_file(output_dir, f"entities_{split}.jsonl"))
    fileio.write_text(paths[0], "".join(conll))
    fileio.write_text(paths[1], "".join(entity_lines))
    logging.info("wrote tags of %d sentences to %s and %s", len(sentences),
                 *paths)
    gold = [s["tags"] for s in sentences]
    if all(g is not None for g in gold):      # a labelled split: its scores
      paths += (run_files.output_file(output_dir, f"metrics_{split}.json"),)
      fileio.write_json(paths[2], self._scores(gold, predicted))
      logging.info("%s: %s", split, fileio.read_text(paths[2]))
    return paths

  def text_serving(self, model):
    """`serve_text`: raw text -> words with tags and offsets, and entities
    (see bertexp.tasks.tagging.serving); None when the vocab is missing."""
    vocab = base.serving_vocab(self.meta, self.meta_data_path)
    if vocab is None:
      return None
    return tagging_serving.TaggingServing(
        model, vocab_file=vocab, do_lower_case=self.meta.get(
            "do_lower_case", True), max_seq_length=self.meta["max_seq_length"],
        doc_stride=self.meta["doc_stride"], label_names=self.label_names,
        scheme=self.scheme, tokenizer_family=self.meta.get("tokenizer_family"),
        keep_accents=self.meta.get("keep_accents", False))

