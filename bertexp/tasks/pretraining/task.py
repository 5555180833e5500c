"""Masked-LM + next-sentence pretraining on `bertexp prepare pretraining`
records, with the same encoder and trainer as fine-tuning.

The MLM head is google-research/bert's: dense(E, hidden_act) + LayerNorm,
then logits against the word-embedding table (tied output embedding) + a
bias. The NSP head is dense(2) on the pooled output. Loss = MLM cross-entropy
averaged over all masked tokens of the global batch (as google-research/bert
and Model Garden: an example with more predictions weighs more) + NSP
cross-entropy averaged over the global batch's examples. After training, the
encoder is written to MODEL_DIR/encoder/ (bert_config.json, the tokenizer,
bert_model.ckpt): INIT_CHECKPOINT for any fine-tuning task.

Shape legend: B batch, S max_seq_length, P max_predictions_per_seq,
H hidden size, E word-embedding width (H for BERT), V vocab size.
"""
import json
import logging
import os

import gin
import numpy as np
import tensorflow as tf
import tf_keras

from bertexp import capabilities
from bertexp.checkpoints import converters
from bertexp.checkpoints import run_files
from bertexp.data import meta as meta_data
from bertexp.data import pipeline
from bertexp.model.encoders import tokenizers
from bertexp.model import encoders
from bertexp.model import memory_plan
from bertexp.model import modeling
from bertexp.tasks import base
from bertexp.util import fileio


def embedding_width(config):
  """E, the word embeddings' width: H for BERT; less where the family
  factorises them (ALBERT, ELECTRA, MobileBERT: config.embedding_size)."""
  return getattr(config, "embedding_size", None) or config.hidden_size


class PretrainingModel(modeling.HeadModel):
  """Encoder + the MLM head (tied to the word embeddings) + the NSP head."""

  def __init__(self, encoder, seed=None, **kwargs):
    super().__init__(**kwargs)
    config = encoder.config
    self.encoder = encoder
    init = lambda: tf_keras.initializers.TruncatedNormal(
        stddev=config.initializer_range, seed=seed)
    # To the word embeddings' width, whose table gives the logits.
    self.mlm_transform = tf_keras.layers.Dense(
        embedding_width(config),
        activation=modeling.get_activation(config.hidden_act),
        kernel_initializer=init(), name="mlm_transform")
    self.mlm_layer_norm = tf_keras.layers.LayerNormalization(
        epsilon=config.layer_norm_eps, dtype="float32", name="mlm_layer_norm")
    self.mlm_bias = self.add_weight("mlm_output_bias", shape=[config.vocab_size],
                                    initializer="zeros", dtype="float32")
    self.nsp_head = tf_keras.layers.Dense(2, kernel_initializer=init(),
                                          dtype="float32", name="nsp_head")

  def call(self, inputs, training=None, dropout_seed=None):
    encoded = self.encoder({k: inputs[k] for k in pipeline.MODEL_INPUTS},
                           training=training, dropout_seed=dropout_seed)
    masked = tf.gather(encoded["sequence_output"], inputs["masked_lm_positions"],
                       batch_dims=1)                                   # [B, P, H]
    hidden = self.mlm_layer_norm(self.mlm_transform(masked))          # [B, P, E]
    table = tf.cast(self.encoder.embeddings.word_embeddings, tf.float32)  # [V, E]
    mlm_logits = tf.matmul(tf.cast(hidden, tf.float32), table,
                           transpose_b=True) + tf.cast(self.mlm_bias, tf.float32)  # [B, P, V]
    nsp_logits = self.nsp_head(encoded["pooled_output"])              # [B, 2]
    return {"mlm_logits": mlm_logits, "nsp_logits": nsp_logits}

  def build_variables(self, max_predictions):
    """Creates every variable, the MLM head's for `max_predictions`
    positions; returns self."""
    self._max_predictions = max_predictions
    return super().build_variables()

  def dummy_inputs(self):
    return dict(self.encoder.dummy_inputs(), masked_lm_positions=tf.zeros(
        [1, self._max_predictions], tf.int32))


def _mlm_terms(labels, outputs):
  """Per example: weighted sum of MLM cross-entropy, of correct predictions,
  and the weight (number of real predictions). [B] each."""
  weights = labels["masked_lm_weights"]                               # [B, P]
  cross_entropy = tf_keras.losses.sparse_categorical_crossentropy(
      labels["masked_lm_ids"], outputs["mlm_logits"], from_logits=True)
  correct = tf.cast(tf.equal(tf.argmax(outputs["mlm_logits"], -1, output_type=tf.int32),
                             labels["masked_lm_ids"]), tf.float32)
  return (tf.reduce_sum(weights * cross_entropy, -1),
          tf.reduce_sum(weights * correct, -1), tf.reduce_sum(weights, -1))


def _nsp_terms(labels, outputs):
  nsp_labels = labels["next_sentence_labels"]                          # [B]
  cross_entropy = tf_keras.losses.sparse_categorical_crossentropy(
      nsp_labels, outputs["nsp_logits"], from_logits=True)
  correct = tf.cast(tf.equal(tf.argmax(outputs["nsp_logits"], -1, output_type=tf.int32),
                             nsp_labels), tf.float32)
  return cross_entropy, correct


def masked_lm_head(config, max_predictions):
  """The memory plan's head of PretrainingModel: the transform, its
  LayerNorm, the output bias and the next-sentence head; per prediction the
  logits over the vocabulary, their softmax and its gradient."""
  h, v, e = config.hidden_size, config.vocab_size, embedding_width(config)
  return memory_plan.Head(h * e + e + 2 * e + v + 2 * h + 2,
                          max_predictions * (3 * v + 4 * e))


@gin.configurable(module="bertexp")
class PretrainingTask(base.RecordTask):
  """MLM + NSP. train_data_path / eval_data_path: prepared TFRecords (globs,
  comma separated); meta_data_path: the `_meta_data` written with them."""

  def __init__(self, *, bert_config_file=gin.REQUIRED, meta_data_path=gin.REQUIRED,
               train_data_path=None, eval_data_path=None, seed=None,
               shuffle_buffer_size=10000, max_eval_examples=None):
    meta = meta_data.read_meta_data(
        meta_data_path, positive=("max_seq_length", "max_predictions_per_seq"),
        counts=("train_data_size",))
    if meta.get("task") != "pretraining":
      raise ValueError(f"{meta_data_path}: not pretraining data (task "
                       f"{meta.get('task')!r})")
    super().__init__(
        bert_config_file=bert_config_file, meta_data_path=meta_data_path,
        meta=meta, paths={"train": train_data_path, "eval": eval_data_path},
        seed=seed, shuffle_buffer_size=shuffle_buffer_size)
    self.max_eval_examples = max_eval_examples
    self.seq = self.meta["max_seq_length"]
    self.predictions = self.meta["max_predictions_per_seq"]
    self._eval_size = None

  def model_shape(self):
    config = encoders.read_config(self.bert_config_file)
    return (config, self.seq,
            masked_lm_head(config, self.predictions))

  def build_model(self):
    config = encoders.read_config(self.bert_config_file)
    if not isinstance(self.meta.get("vocab_file"), str):
      raise ValueError(f"{self.meta_data_path}: needs the 'vocab_file' the "
                       "data was made with (bertexp prepare pretraining "
                       "writes it)")
    # (Data prepared before the meta data had vocab_size: WordPiece.)
    vocab = self.meta.get("vocab_size") or len(
        fileio.read_text(self.meta["vocab_file"]).split())
    if vocab > config.vocab_size or self.seq > config.max_seq_length:
      raise ValueError(
          f"{self.meta_data_path}: data needs vocab {vocab} and {self.seq} "
          f"positions; {self.bert_config_file} has {config.vocab_size} and "
          f"{config.max_seq_length}")
    return PretrainingModel(encoders.build_encoder(config), seed=self.seed,
                            name="pretraining_model").build_variables(self.predictions)

  def _decode(self, serialized):
    ints = lambda n: tf.io.FixedLenFeature([n], tf.int64)
    spec = {"input_ids": ints(self.seq), "input_mask": ints(self.seq),
            "segment_ids": ints(self.seq),
            "masked_lm_positions": ints(self.predictions),
            "masked_lm_ids": ints(self.predictions),
            "masked_lm_weights": tf.io.FixedLenFeature([self.predictions], tf.float32),
            "next_sentence_labels": ints(1)}
    r = tf.io.parse_example(serialized, spec)
    i32 = lambda t: tf.cast(t, tf.int32)
    features = {"input_word_ids": i32(r["input_ids"]), "input_mask": i32(r["input_mask"]),
                "input_type_ids": i32(r["segment_ids"]),
                "masked_lm_positions": i32(r["masked_lm_positions"]),
                "example_weight": tf.ones_like(r["masked_lm_weights"][:, 0])}
    labels = {"masked_lm_ids": i32(r["masked_lm_ids"]),
              "masked_lm_weights": r["masked_lm_weights"],
              "next_sentence_labels": i32(r["next_sentence_labels"][:, 0])}
    return features, labels

  def build_inputs(self, split, input_context=None, batch_size=0,
                   train_order=None):
    path = self.paths.get(split)
    if not path:
      raise ValueError(f"pretraining {split} needs "
                       f"{'TRAIN' if split == 'train' else 'EVAL'}_DATA_PATH")
    if split == "train":
      # Files shuffled per epoch, then examples within a window
      # (bertexp.data.order); shuffle_buffer_size 0 keeps the file order.
      return pipeline.training_batches(
          path, self._decode, batch_size=batch_size,
          input_context=input_context,
          train_order=pipeline.train_order_or_default(train_order, self.seed),
          shuffle_window=self.shuffle_buffer_size)
    # Every example once on any replica count: take, then shard, then pad.
    dataset = tf.data.TFRecordDataset(pipeline.list_files(path)).take(
        self._eval_examples()).enumerate()
    if input_context and input_context.num_input_pipelines > 1:
      dataset = dataset.shard(input_context.num_input_pipelines,
                              input_context.input_pipeline_id)
    dataset = dataset.batch(batch_size).map(
        pipeline.with_positions(self._decode)).unbatch()
    return pipeline.pad_and_batch_eval(
        dataset, num_examples=self._eval_examples(), batch_size=batch_size,
        input_context=input_context, padding=self._padding())

  def _padding(self):
    z = lambda n, dtype=tf.int32: tf.zeros([n], dtype)
    features = {"input_word_ids": z(self.seq), "input_mask": z(self.seq),
                "input_type_ids": z(self.seq),
                "masked_lm_positions": z(self.predictions),
                "position": tf.constant(-1), "example_weight": tf.constant(0.0)}
    labels = {"masked_lm_ids": z(self.predictions),
              "masked_lm_weights": z(self.predictions, tf.float32),
              "next_sentence_labels": tf.constant(0)}
    return features, labels

  def _eval_examples(self):
    if self._eval_size is None:
      count = sum(1 for _ in tf.data.TFRecordDataset(
          pipeline.list_files(self.paths["eval"])))
      self._eval_size = min(count, self.max_eval_examples or count)
    return self._eval_size

  def eval_splits(self):
    return {"eval": self._eval_examples()} if self.paths["eval"] else {}

  def check_training_data(self):
    if not self.train_data_path:
      return
    config = encoders.read_config(self.bert_config_file)
    pipeline.check_training_files(
        self.train_data_path, self._decode, config=config,
        label_ranges={"masked_lm_ids": (0, config.vocab_size),
                      "next_sentence_labels": (0, 2)},
        source=self.meta_data_path)

  def input_files(self):
    return {"vocab_file": self.meta.get("vocab_file"),
            "data_files": [self.meta_data_path, *pipeline.list_files(
                self.train_data_path or "")] if self.train_data_path else
            [self.meta_data_path]}

  def per_example_loss(self, labels, outputs):
    """Each example's own mean MLM loss + NSP loss (for inspection; training
    normalises over the global batch: `loss_weights` / `loss_numerators`)."""
    mlm_loss, _, weight = _mlm_terms(labels, outputs)
    nsp_loss, _ = _nsp_terms(labels, outputs)
    return mlm_loss / tf.maximum(weight, 1.0) + nsp_loss               # [B]

  def loss_weights(self, labels):
    return {"mlm": tf.reduce_sum(labels["masked_lm_weights"], -1),     # [B]
            "nsp": tf.ones_like(labels["masked_lm_weights"][:, 0])}    # [B]

  def loss_numerators(self, labels, outputs):
    mlm_loss, _, _ = _mlm_terms(labels, outputs)
    return {"mlm": mlm_loss, "nsp": _nsp_terms(labels, outputs)[0]}    # [B] each

  def build_train_metrics(self):
    return [tf_keras.metrics.Mean("mlm_accuracy"),
            tf_keras.metrics.Mean("nsp_accuracy")]

  def update_train_metrics(self, metrics, labels, outputs):
    _, correct, weight = _mlm_terms(labels, outputs)
    metrics[0].update_state(tf.reduce_sum(correct) / tf.maximum(
        tf.reduce_sum(weight), 1.0))
    metrics[1].update_state(_nsp_terms(labels, outputs)[1])

  def eval_outputs(self, features, labels, outputs):
    mlm_loss, mlm_correct, weight = _mlm_terms(labels, outputs)
    nsp_loss, nsp_correct = _nsp_terms(labels, outputs)
    return {"mlm_loss": mlm_loss, "mlm_correct": mlm_correct,
            "mlm_weight": weight, "nsp_loss": nsp_loss,
            "nsp_correct": nsp_correct, "weights": features["example_weight"]}

  def finalize_eval(self, gathered):
    real = gathered["weights"] > 0
    g = {k: v[real].astype(np.float64) for k, v in gathered.items()}
    tokens = max(g["mlm_weight"].sum(), 1.0)
    return {"mlm_accuracy": g["mlm_correct"].sum() / tokens,
            "mlm_loss": g["mlm_loss"].sum() / tokens,
            "nsp_accuracy": float(g["nsp_correct"].mean()),
            "nsp_loss": float(g["nsp_loss"].mean()),
            "num_examples": float(real.sum())}

  def selection_metric(self):
    return "mlm_accuracy"

  def capabilities(self):
    return capabilities.merged(
        super().capabilities(),
        capabilities.MemoryPlan(model_shape=self.model_shape),
        capabilities.RunHooks(after_training=self.write_encoder))

  def write_encoder(self, model, model_dir):
    """After training: the encoder as a checkpoint folder for fine-tuning
    (MODEL_DIR's encoder folder), with its tokenizer files."""
    folder = run_files.encoder(model_dir)
    vocab_file, tokenizer_files, extra_files = self._tokenizer_files()
    converters.write_checkpoint_folder(
        model.encoder, vocab_file, folder, tokenizer_files=tokenizer_files,
        extra_files=extra_files)
    logging.info("pretrained encoder for fine-tuning: INIT_CHECKPOINT=%s",
                 fileio.join(folder, "bert_model.ckpt"))
    print(f"Pretrained encoder: {folder}/bert_model.ckpt", flush=True)

  def _tokenizer_files(self):
    """write_checkpoint_folder's vocab_file, tokenizer_files and
    extra_files: vocab.txt for WordPiece data; else the family's tokenizer
    files and a tokenizer_config.json of the casing the data was made with,
    so that the encoder folder is a --tokenizer folder that tokenizes as
    the data did."""
    family = self.meta.get("tokenizer_family")
    if not family:
      return self.meta["vocab_file"], (), None
    folder = os.path.dirname(self.meta["vocab_file"]) or "."
    # The family's tokenizer files: the recorded one, and any beside it
    # (byte-level BPE's merges.txt).
    files = [self.meta["vocab_file"]] + [
        fileio.join(folder, name)
        for name in tokenizers.spec_for(family).files[1:]]
    casing = {"do_lower_case": self.meta.get("do_lower_case", False)}
    if self.meta.get("keep_accents"):                  # ALBERT's option
      casing["keep_accents"] = True
    return None, files, {"tokenizer_config.json": json.dumps(casing) + "\n"}
