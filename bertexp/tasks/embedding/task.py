"""Sentence embeddings: one encoder (a bi-encoder, shared by queries and
documents) pooled into one vector per text, trained on `bertexp prepare
pairs` data and judged by retrieval over a whole corpus or by Spearman.

Losses: pairs train with in-batch negatives over the global batch (every
replica's documents gathered, duplicates of a positive left out, hard
negatives when the data has them); scored pairs with CoSENT (see
`losses`). Evaluation: retrieval data gives MRR@10, recall@1/10/100 and
nDCG@10 of exact search over the corpus (`retrieval`), scored pairs
Spearman's rank correlation of the cosines; the first selects the best
checkpoint. Out: `serve_text` (text [B] -> embeddings [B, D]),
`bertexp.Predictor(path).embed(texts)`, export-onnx (encoder + pooling),
and --to=huggingface as a sentence-transformers folder.

Everything about the task is in this folder; `gin/tasks/embedding.gin`
brings it in with its own `import` line.

Shape legend: B rows, K texts per row (1: an evaluation text; query +
documents for pairs), S tokens, D embedding width.
"""
import gin
import numpy as np
import tensorflow as tf

from bertexp import capabilities
from bertexp.checkpoints import sentence_transformers
from bertexp.checkpoints import to_huggingface
from bertexp.data import meta as meta_data
from bertexp.data import pipeline
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.model import onnx_graph
from bertexp.tasks import base
from bertexp.tasks import text_serving
from bertexp.tasks.embedding import losses
from bertexp.tasks.embedding import pooling
from bertexp.tasks.embedding import retrieval
from bertexp.util import fileio

_INPUTS = pipeline.MODEL_INPUTS
# The retrieval evaluation's rows: label 0 query, 1 corpus document.
_QUERY, _DOCUMENT = 0, 1


class EmbeddingModel(modeling.HeadModel):
  """{input: [B, W]} -> embeddings [B, K, D] (float32).

  A row of width W holds its texts end to end: one text of
  `document_length` tokens (K = 1), or a query of `query_length` tokens
  followed by K - 1 documents of `document_length`. Every text goes through
  the same encoder and pooling. `sentence_pooling` records the pooling in
  the checkpoint (mode index, normalize, document_length), so an export
  knows how its vectors were made.
  """
  config_fields = ("query_length", "document_length", "pooling",
                   "normalize")

  def __init__(self, encoder, *, query_length, document_length, pooling_mode,
               normalize, **kwargs):
    super().__init__(**kwargs)
    self.encoder = encoder
    self.query_length, self.document_length = query_length, document_length
    self.pooling, self.normalize = pooling_mode, normalize
    self.sentence_pooling = tf.Variable(
        [pooling.MODES.index(pooling_mode), int(normalize), document_length],
        trainable=False, dtype=tf.int32, name="sentence_pooling")

  def _embed(self, inputs, length, training, dropout_seed):
    """[B, n * length] ids -> [B, n, D] embeddings of n texts (length None:
    one text of any length)."""
    texts = {name: inputs[name] if length is None else
             tf.reshape(inputs[name], [-1, length]) for name in _INPUTS}
    sequence = self.encoder(texts, training=training,
                            dropout_seed=dropout_seed)["sequence_output"]
    vectors = pooling.pool(sequence, texts["input_mask"], self.pooling,
                           self.normalize)                           # [B*n, D]
    count = 1 if length is None else inputs[_INPUTS[0]].shape[1] // length
    return tf.reshape(vectors, [-1, count, vectors.shape[-1]])       # [B, n, D]

  def call(self, inputs, training=None, dropout_seed=None):
    """Embeddings [B, K, D]; ids of an unknown width (serving_default) are
    one text a row."""
    width = inputs[_INPUTS[0]].shape[1]
    if width is None or width == self.document_length:
      return self._embed(inputs, None, training,
                         modeling.fold_seed(dropout_seed, 0))        # [B, 1, D]
    if (width - self.query_length) % self.document_length:
      raise ValueError(f"rows of {width} tokens are neither one text of "
                       f"{self.document_length} nor a query of "
                       f"{self.query_length} and documents of "
                       f"{self.document_length}")
    query = {name: inputs[name][:, :self.query_length] for name in _INPUTS}
    documents = {name: inputs[name][:, self.query_length:] for name in _INPUTS}
    return tf.concat([
        self._embed(query, self.query_length, training,
                    modeling.fold_seed(dropout_seed, 0)),
        self._embed(documents, self.document_length, training,
                    modeling.fold_seed(dropout_seed, 1))], axis=1)   # [B, K, D]

  def dummy_inputs(self):
    return {name: tf.ones([1, self.document_length], tf.int32)
            for name in _INPUTS}


def embed(predictor, texts):
  """`bertexp.Predictor(path).embed(texts)`: float32 [n, D], one row per
  text (a single string gives [D])."""
  single = isinstance(texts, str)
  rows = [texts] if single else list(texts)
  for i, text in enumerate(rows):
    if not isinstance(text, str):
      raise ValueError(f"text {i}: expected a string, got {text!r}")
  if not rows:
    return np.zeros([0, 0], np.float32)
  vectors = np.stack(predictor.run({"text": rows})["embeddings"]).astype(
      np.float32)
  return vectors[0] if single else vectors


def serving_outputs(outputs):
  """The export's outputs of the model's [B, 1 + K, D]: embeddings [B, D]."""
  return {"embeddings": outputs[:, 0]}                               # [B, D]


def onnx_pooling_head(mode, normalize):
  """The ONNX writer of an EmbeddingModel's embeddings [B, D]."""
  def write(graph, model):
    sequence = onnx_graph.encoder_output(graph, model.encoder)       # [B, S, H]
    return ({"embeddings": onnx_graph.pooled_sentence(
        graph, sequence, mode, normalize)},
            {"embeddings": ("float", ["batch", model.encoder.config.hidden_size])})
  return write


def _huggingface_files(reader, config):
  """The sentence-transformers files of an embedding model's checkpoint
  (its `sentence_pooling` record), else {}."""
  name = "model/sentence_pooling/.ATTRIBUTES/VARIABLE_VALUE"
  if name not in reader.get_variable_to_shape_map():
    return {}
  mode, normalize, length = (int(v) for v in reader.get_tensor(name))
  return sentence_transformers.folder_files(
      mode=pooling.MODES[mode], normalize=bool(normalize),
      max_seq_length=length, width=config.hidden_size)


# What convert-checkpoint --to=huggingface adds for this task's checkpoints.
HUGGINGFACE_FILES = (to_huggingface.ExtraFiles(task="bertexp.EmbeddingTask",
                                              files=_huggingface_files),)


@gin.configurable(module="bertexp")
class EmbeddingTask(base.RecordTask):
  """A sentence-embedding model (see the module docstring).

  Args:
    bert_config_file: the encoder's config.
    meta_data_path: `bertexp prepare pairs`' meta data.
    train_data_path, eval_data_path: its records.
    pooling_mode: "mean", "cls" or "max"; None: as the initial checkpoint's
      sentence-transformers folder said (its sentence_pooling.json), else
      "mean".
    normalize: L2-normalise the embeddings; None: as the initial checkpoint
      said, else True.
    init_checkpoint: the initial checkpoint (INIT_CHECKPOINT), read for its
      pooling only.
    scale: multiplies the scores of the in-batch negatives loss and the
      cosine differences of CoSENT (20: sentence-transformers' default).
    symmetric: in-batch negatives both ways (queries -> documents and
      documents -> queries).
    seed: the data order.
    shuffle_buffer_size: training shuffle window (0: file order).
  Raises:
    ValueError: an unknown pooling mode, or meta data that is not `bertexp
      prepare pairs`' (naming the file).
  """

  # Rows hold several texts end to end: never cut to the longest real one.
  dynamic_padding = False
  # In-batch negatives and CoSENT gather every replica's outputs.
  gathers_across_replicas = True

  def __init__(self, *, bert_config_file=gin.REQUIRED,
               meta_data_path=gin.REQUIRED, train_data_path=None,
               eval_data_path=None, pooling_mode=None, normalize=None,
               init_checkpoint=None, scale=20.0, symmetric=False, seed=None,
               shuffle_buffer_size=10000):
    super().__init__(
        bert_config_file=bert_config_file, meta_data_path=meta_data_path,
        meta=meta_data.read_meta_data(
            meta_data_path, positive=("max_seq_length", "max_query_length")),
        paths={"train": train_data_path, "eval": eval_data_path},
        seed=seed, shuffle_buffer_size=shuffle_buffer_size)
    if not isinstance(self.meta.get("splits"), dict):
      raise ValueError(f"{meta_data_path}: no 'splits' (expected `bertexp "
                       "prepare pairs` meta data)")
    found = _checkpoint_pooling(init_checkpoint) or {}
    self.pooling = pooling_mode or found.get("mode", "mean")
    if self.pooling not in pooling.MODES:
      raise ValueError(f"pooling {self.pooling!r}: expected one of "
                       f"{list(pooling.MODES)}")
    self.normalize = bool(found.get("normalize", True) if normalize is None
                          else normalize)
    self.scale, self.symmetric = scale, symmetric

  # -- model ---------------------------------------------------------------
  def build_model(self):
    return EmbeddingModel(
        encoders.build_encoder(self.encoder_config()),
        query_length=self.meta["max_query_length"],
        document_length=self.meta["max_seq_length"],
        pooling_mode=self.pooling, normalize=self.normalize,
        name="embedding_model").build_variables()

  # -- data ----------------------------------------------------------------
  def _layout(self, split):
    layout = self.meta["splits"].get(split)
    if layout is None or not self.paths.get(split):
      raise ValueError(f"no data for split {split!r} (bind TRAIN_DATA_PATH / "
                       f"EVAL_DATA_PATH; {self.meta_data_path} has "
                       f"{sorted(self.meta['splits'])})")
    return layout

  @property
  def eval_dynamic_padding(self):
    """Retrieval evaluation rows hold one text each: cut to the longest in
    the batch (short queries cost little); scored pairs hold two."""
    return self.meta["splits"].get("eval", {}).get("layout") == "retrieval"

  def _width(self, layout):
    if layout["layout"] == "retrieval":
      return self.meta["max_seq_length"]
    return (self.meta["max_query_length"] +
            layout["documents"] * self.meta["max_seq_length"])

  def build_inputs(self, split, input_context=None, batch_size=0,
                   train_order=None):
    layout = self._layout(split)
    return pipeline.make_dataset(
        self.paths[split], seq_length=self._width(layout),
        label_type=layout["label_type"], batch_size=batch_size,
        is_training=split == "train", input_context=input_context,
        train_order=pipeline.train_order_or_default(train_order, self.seed),
        shuffle_buffer=self.shuffle_buffer_size,
        num_examples=(None if split == "train" else
                      self.meta["split_sizes"][split]))

  def num_train_examples(self):
    return int(self.meta["split_sizes"].get("train", 0))

  def check_training_data(self):
    if self.paths["train"]:
      layout = self._layout("train")
      pipeline.check_training_files(
          self.paths["train"], pipeline.record_decoder(
              self._width(layout), layout["label_type"]),
          config=encoders.read_config(self.bert_config_file),
          source=self.meta_data_path)

  def eval_splits(self):
    return ({"eval": self.meta["split_sizes"]["eval"]}
            if self.paths.get("eval") and "eval" in self.meta["splits"] else {})

  # -- loss and metrics ----------------------------------------------------
  def per_example_loss(self, labels, outputs):
    if self.meta["splits"]["train"]["layout"] == "scored":
      return losses.cosent_loss(outputs[:, 0], outputs[:, 1], labels,
                                scale=self.scale)                    # [B]
    return losses.in_batch_negatives_loss(
        outputs[:, 0], outputs[:, 1], tf.cast(labels, tf.int64),
        scale=self.scale, symmetric=self.symmetric,
        hard_negatives=outputs[:, 2:] if outputs.shape[1] > 2 else None)

  def eval_outputs(self, features, labels, outputs):
    result = {"labels": labels, "weights": features["example_weight"],
              "example_id": features["example_id"]}
    if outputs.shape[1] == 1:                       # retrieval: one text a row
      result["embedding"] = outputs[:, 0]                            # [B, D]
    else:                                           # scored pairs: cosines
      a = tf.math.l2_normalize(outputs[:, 0], -1)
      b = tf.math.l2_normalize(outputs[:, 1], -1)
      result["cosine"] = tf.reduce_sum(a * b, -1)                    # [B]
    return result

  def finalize_eval(self, gathered):
    real = gathered["weights"] > 0
    order = np.argsort(gathered["example_id"][real], kind="stable")
    labels = gathered["labels"][real][order]
    if "cosine" in gathered:
      from scipy import stats
      cosines = gathered["cosine"][real][order]
      return {"spearman": float(stats.spearmanr(cosines, labels)[0]),
              "num_examples": int(real.sum())}
    return self._retrieval_metrics(gathered["embedding"][real][order], labels)

  def _retrieval_metrics(self, embeddings, labels):
    ids = self._eval_ids()
    queries = embeddings[labels == _QUERY]
    corpus = embeddings[labels == _DOCUMENT]
    k = min(100, len(corpus))
    _, best = retrieval.top_k(queries, corpus, k)
    rankings = {query: [ids["corpus"][j] for j in best[i]]
                for i, query in enumerate(ids["queries"])}
    metrics = retrieval.ranking_metrics(rankings, ids["qrels"])
    metrics["num_queries"] = len(ids["queries"])
    return metrics

  def _eval_ids(self):
    path = self.paths["eval"].replace(".tf_record", "_ids.json")
    return fileio.read_json(path)

  def selection_metric(self):
    layout = self.meta["splits"].get("eval", {}).get("layout")
    return {"retrieval": "mrr@10", "scored": "spearman"}.get(layout, "loss")

  # -- out -----------------------------------------------------------------
  def capabilities(self):
    """Exports (SavedModel, ONNX) and the Predictor's `embed`; no memory
    plan (several texts per example) and no distillation."""
    return capabilities.merged(
        super().capabilities(),
        capabilities.SavedModelServing(
            outputs=serving_outputs, text=self.text_serving,
            packer=self.text_packer),
        capabilities.PredictorApi(methods={"embed": embed}),
        capabilities.OnnxGraph(
            head=onnx_pooling_head(self.pooling, self.normalize)))

  def text_serving(self, model):
    """`serve_text`: text [B] -> embeddings [B, D], each text packed alone
    to max_seq_length as `bertexp prepare pairs` packs documents."""
    return text_serving.from_meta(model, serving_outputs, self.meta,
                                  self.meta_data_path, 1)

  def text_packer(self, model):
    """`text_serving`'s tokenizer and packing alone (or None)."""
    serving = self.text_serving(model)
    return serving and serving.packer()


def _checkpoint_pooling(init_checkpoint):
  """The sentence_pooling.json beside `init_checkpoint` (a converted
  sentence-transformers folder's), or None."""
  if not init_checkpoint:
    return None
  folder = (init_checkpoint if tf.io.gfile.isdir(init_checkpoint)
            else init_checkpoint.rsplit("/", 1)[0])
  path = fileio.join(folder, sentence_transformers.POOLING_FILE)
  return fileio.read_json(path) if tf.io.gfile.exists(path) else None
