"""The DeBERTa-v2 family (DeBERTa-v3 is the same network; Hugging Face's
`model_type` "deberta-v2"): disentangled attention.

Each block's attention scores are content-to-content plus, with
`relative_attention`, content-to-position (c2p: the query against the
relative-position embedding of the key's offset) and position-to-content
(p2c: the key against the query's offset), all over sqrt(D * (1 + the
number of position terms)). Offsets i - j go into log buckets
(`position_buckets`) beyond half the bucket count; the relative-position
table (2 x span rows) is shared by the layers, LayerNormed
(`norm_rel_ebd`), and projected by each layer's own query and key
projections (`share_att_key`, DeBERTa-v3) or by separate ones. Embeddings
are word (+ absolute positions with `position_biased_input`, + token types
when `type_vocab_size` > 0), projected to H without bias when their width
differs, LayerNormed and zeroed at padding. Padding queries attend to
nothing: their row of the softmax is uniform, as in transformers.
The pooled output is the [CLS] row through Hugging Face's ContextPooler
(`pooler.dense` of DebertaV2ForSequenceClassification, `pooler_hidden_act`),
newly initialised when the checkpoint has none.
DeBERTa-v2 xlarge/xxlarge's convolution layer (`conv_kernel_size` > 0) is
refused. SentencePiece tokenization (spm.model).

Shape legend: B batch, S keys (sequence length), Q queries (S, or 1 for
the [CLS] row only), N heads, D = H / N, R = 2 x span relative rows.
"""
import dataclasses
import math
from typing import Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from bertexp.data import tokenization
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.model.encoders import reference
from bertexp.model.encoders.bert import linear_assignments
from bertexp.model.encoders.bert import norm_assignments

POOLER = "pooler.dense"
POSITION_TERMS = ("c2p", "p2c")
REFUSED = {"conv_kernel_size": "DeBERTa-v2 xlarge/xxlarge's convolution layer"}


@dataclasses.dataclass
class DebertaV2Config(modeling.BertConfig):
  """BertConfig's fields and DeBERTa-v2's, defaulting as transformers'
  DebertaV2Config does when config.json leaves them out.

  relative_attention: add the c2p / p2c terms of pos_att_type.
  max_relative_positions: the largest offset (< 1: max_position_embeddings).
  position_buckets: log buckets of the offsets (0 or less: none).
  position_biased_input: add absolute position embeddings to the input.
  pos_att_type: the position terms, a subset of ("c2p", "p2c") ("p2c|c2p"
    in older files).
  share_att_key: the relative table goes through each layer's query and
    key projections (else through separate pos_query / pos_key ones).
  norm_rel_ebd: "layer_norm" to LayerNorm the relative table, or "none".
  embedding_size: E, the embeddings' width (absent or 0: H).
  pooler_hidden_act: the pooler's activation.
  conv_kernel_size: must be 0 (the convolution layer is not supported).
  """
  FAMILY_NAME = "deberta-v2"
  MAY_BE_ZERO = ("type_vocab_size", "position_buckets", "embedding_size",
                 "conv_kernel_size")
  type_vocab_size: int = 0
  layer_norm_eps: float = 1e-7
  relative_attention: bool = False
  max_relative_positions: int = -1
  position_buckets: int = -1
  position_biased_input: bool = True
  pos_att_type: Tuple[str, ...] = ()
  share_att_key: bool = False
  norm_rel_ebd: str = "none"
  embedding_size: int = 0
  pooler_hidden_act: str = "gelu"
  conv_kernel_size: int = 0
  family: str = "deberta-v2"

  def __post_init__(self):
    if self.max_relative_positions is None or self.max_relative_positions < 1:
      self.max_relative_positions = self.max_position_embeddings
    if self.position_buckets is None or self.position_buckets < 0:
      self.position_buckets = 0
    if not self.embedding_size:           # absent or 0: as wide as H
      self.embedding_size = self.hidden_size
    terms = self.pos_att_type or ()
    if isinstance(terms, str):
      terms = terms.lower().split("|")
    self.pos_att_type = tuple(t.strip() for t in terms if t.strip())
    super().__post_init__()
    for name, why in REFUSED.items():
      if getattr(self, name):
        raise ValueError(f"{name} {getattr(self, name)} is not supported "
                         f"({why})")
    unknown = set(self.pos_att_type) - set(POSITION_TERMS)
    if unknown:
      raise ValueError(f"pos_att_type {sorted(unknown)} is not supported "
                       f"(expected a subset of {list(POSITION_TERMS)})")
    norms = {n.strip() for n in self.norm_rel_ebd.lower().split("|")}
    if not norms <= {"none", "layer_norm"}:
      raise ValueError(f"norm_rel_ebd {self.norm_rel_ebd!r} is not supported "
                       "(expected 'layer_norm' or 'none')")
    for name in ("relative_attention", "position_biased_input",
                 "share_att_key"):
      if not isinstance(getattr(self, name), bool):
        raise ValueError(f"{name} must be true or false, got "
                         f"{getattr(self, name)!r}")
    modeling.get_activation(self.pooler_hidden_act)

  @classmethod
  def from_dict(cls, values, source="config"):
    """As BertConfig.from_dict; a pooler or head width other than H is
    refused."""
    if isinstance(values, dict):
      width = values.get("hidden_size", 768)
      for name in ("pooler_hidden_size", "attention_head_size"):
        expected = width // values.get("num_attention_heads", 12) if (
            name == "attention_head_size") else width
        if values.get(name, expected) != expected:
          raise ValueError(f"{source}: {name} {values[name]} is not "
                           f"supported (expected {expected})")
    return super().from_dict(values, source)

  def parameter_count(self):
    """Embeddings (word, positions and types as configured, the bias-free
    projection, LayerNorm on H), the blocks (with separate position
    projections when keys are not shared), the relative table and its
    LayerNorm, the pooler."""
    h = self.hidden_size
    e = self.embedding_size
    rows = self.vocab_size + self.type_vocab_size + (
        self.max_position_embeddings if self.position_biased_input else 0)
    embeddings = rows * e + (e * h if e != h else 0) + 2 * h
    separate = 0 if self.share_att_key or not self.relative_attention else len(
        self.pos_att_type)
    blocks = self.num_hidden_layers * (self.block_parameters() +
                                       separate * (h * h + h))
    relative = 0
    if self.relative_attention:
      relative = 2 * self.span * h + (2 * h if self.layer_norm_relative else 0)
    return embeddings + blocks + relative + h * h + h

  def block_activation_elements(self, seq_length, queries):
    """BERT's block, and the relative terms' scores against every table
    row, [N, Q, 2 x span] (measured: one such tensor a block for c2p and
    p2c together, tools/memory_probe.py)."""
    extra = (self.num_attention_heads * queries * 2 * self.span
             if self.relative_attention and self.pos_att_type else 0)
    return super().block_activation_elements(seq_length, queries) + extra

  @property
  def reads_type_ids(self):
    """Only with a token-type table (DeBERTa-v3 has none)."""
    return self.type_vocab_size > 0

  @property
  def span(self):
    """How many offsets each side the relative table covers."""
    return self.position_buckets or self.max_relative_positions

  @property
  def layer_norm_relative(self):
    return "layer_norm" in self.norm_rel_ebd.lower()


def _take_rows(values, index):
  """values [B, N, P, R], index int [P, T] -> values[b, n, p, index[p, t]]
  as [B, N, P, T]: one gather over the flattened (P, R) axis with indices
  shared by every example and head (batch-broadcast indices would be kept
  for the gradient, 8 bytes per score)."""
  shape = tf.shape(values)                                           # B, N, P, R
  rows = shape[3]
  flat = tf.reshape(values, [shape[0], shape[1], -1])                # [B, N, P*R]
  position = tf.range(tf.shape(index)[0], dtype=index.dtype)[:, None]
  return tf.gather(flat, position * tf.cast(rows, index.dtype) + index,
                   axis=2)                                           # [B, N, P, T]


def relative_positions(queries, keys, config):
  """Bucketed offsets i - j of query i and key j, int32 [Q, S] (queries
  0..Q-1, keys 0..S-1), as transformers' build_relative_position: offsets
  within half the bucket count stay, longer ones go to log-spaced buckets
  up to max_relative_positions, sign kept."""
  offsets = (tf.range(queries)[:, tf.newaxis] -
             tf.range(keys)[tf.newaxis, :])                          # [Q, S]
  buckets = config.position_buckets
  if buckets <= 0:
    return offsets
  mid = buckets // 2
  far = tf.abs(offsets)
  distance = tf.cast(tf.where(far < mid, mid - 1, far), tf.float32)
  scale = tf.math.log(tf.constant((config.max_relative_positions - 1) / mid,
                                  tf.float32))
  log_position = tf.math.ceil(
      tf.math.log(distance / mid) / scale * (mid - 1)) + mid
  bucket = tf.cast(log_position, tf.int32) * tf.sign(offsets)
  return tf.where(far <= mid, offsets, bucket)


class DebertaEmbeddings(tf_keras.layers.Layer):
  """Word (+ position, + type) embeddings of width E, projected to H without
  bias when E != H, LayerNorm, zeroed at padding, dropout."""

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.width = config.embedding_size
    self.project = None
    if self.width != config.hidden_size:
      self.project = tf_keras.layers.Dense(
          config.hidden_size, use_bias=False, name="project",
          kernel_initializer=modeling.initializer(config))
    self.layer_norm = modeling.layer_norm(config, "layer_norm")
    self.dropout = modeling.Dropout(config.hidden_dropout_prob)

  def build(self, input_shape):
    c = self.config
    table = lambda name, rows: self.add_weight(
        name, [rows, self.width], initializer=modeling.initializer(c))
    self.word_embeddings = table("word_embeddings", c.vocab_size)
    self.position_embeddings = (table("position_embeddings",
                                      c.max_position_embeddings)
                                if c.position_biased_input else None)
    self.type_embeddings = (table("type_embeddings", c.type_vocab_size)
                            if c.type_vocab_size else None)
    super().build(input_shape)

  def call(self, word_ids, type_ids, input_mask, training=None,
           dropout_seed=None):
    """int32 [B, S] ids and mask -> float32 [B, S, H]."""
    x = tf.gather(self.word_embeddings, word_ids)                    # [B, S, E]
    if self.position_embeddings is not None:
      x += self.position_embeddings[tf.newaxis, :tf.shape(word_ids)[1]]
    if self.type_embeddings is not None:
      x += tf.gather(self.type_embeddings, type_ids)
    if self.project is not None:
      x = self.project(x)                                            # [B, S, H]
    x = self.layer_norm(x) * tf.cast(input_mask, tf.float32)[..., tf.newaxis]
    return self.dropout(x, training=training, seed=dropout_seed)


class RelativeEmbeddings(tf_keras.layers.Layer):
  """The relative-position table [R, H] every layer shares, LayerNormed
  when the config says so. The encoder calls it once, so its variables are
  named under the encoder (`encoder/relative_embeddings/...`, what layer-wise
  decay and layer summaries read), not under the first block that reads it;
  blocks read it through `normalized()` inside their own call (so
  recomputed blocks differentiate it too)."""

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.layer_norm = (modeling.layer_norm(config, "layer_norm")
                       if config.layer_norm_relative else None)

  def build(self, input_shape):
    self.table = self.add_weight(
        "table", [2 * self.config.span, self.config.hidden_size],
        initializer=modeling.initializer(self.config))
    super().build(input_shape)

  def call(self, unused_inputs):
    return self.normalized()

  def normalized(self):
    """The table, LayerNormed where configured: float32 [R, H]."""
    table = tf.convert_to_tensor(self.table)
    return self.layer_norm(table) if self.layer_norm is not None else table


class DisentangledBlock(modeling.TransformerBlock):
  """TransformerBlock whose scores add DeBERTa's c2p and p2c terms and
  whose padding rows attend uniformly. Its attention "bias" is a dict:
  "mask" bool [B, 1, S, S] (query and key both real), "relative" int32
  [S, S] (relative_positions)."""

  def __init__(self, config, relative_embeddings, **kwargs):
    super().__init__(config, **kwargs)
    self.relative_embeddings = relative_embeddings
    self.terms = config.pos_att_type if config.relative_attention else ()
    self.scale = 1.0 / math.sqrt(self.head_size *
                                 (1 + len(config.pos_att_type)))
    self.position_dropout = modeling.Dropout(config.hidden_dropout_prob)
    dense = lambda name: modeling.Dense(
        config.hidden_size, name=name,
        kernel_initializer=modeling.initializer(config))
    self.pos_key = self.pos_query = None
    if self.terms and not config.share_att_key:
      self.pos_key = dense("pos_key") if "c2p" in self.terms else None
      self.pos_query = dense("pos_query") if "p2c" in self.terms else None

  def _table_heads(self, projection, table):
    """[R, H] through a projection -> [N, R, D]."""
    rows = tf.reshape(projection(table), [-1, self.num_heads, self.head_size])
    return tf.transpose(rows, [1, 0, 2])

  def attention_scores(self, q, k, attention, training, dropout_seed):
    scores = tf.matmul(q, k, transpose_b=True)                       # [B, N, Q, S]
    if self.terms:
      scores += self._position_scores(q, k, attention["relative"], training,
                                      dropout_seed)
    return scores * self.scale

  def _position_scores(self, q, k, relative, training, dropout_seed):
    """c2p + p2c [B, N, Q, S] (unscaled)."""
    span = self.config.span
    table = self.position_dropout(
        self.relative_embeddings.normalized(), training=training,
        seed=modeling.fold_seed(dropout_seed, 3))                    # [R, H]
    table = tf.cast(table, q.dtype)
    queries = tf.shape(q)[2]
    # Row of the table for query i, key j: its bucketed offset + span. The
    # offset is odd in i - j, so p2c's row for key j seen from query i is
    # the same index.
    index = tf.clip_by_value(relative[:queries] + span, 0, 2 * span - 1)  # [Q, S]
    score = 0.0
    if "c2p" in self.terms:
      keys = self._table_heads(self.pos_key if self.pos_key is not None
                               else self.key, table)                 # [N, R, D]
      c2p = tf.einsum("bnqd,nrd->bnqr", q, keys)                     # [B, N, Q, R]
      score += _take_rows(c2p, index)                                # [B, N, Q, S]
    if "p2c" in self.terms:
      query_rows = self._table_heads(self.pos_query if self.pos_query is not None
                                     else self.query, table)         # [N, R, D]
      p2c = tf.einsum("bnsd,nrd->bnsr", k, query_rows)               # [B, N, S, R]
      gathered = _take_rows(p2c, tf.transpose(index))                # [B, N, S, Q]
      score += tf.transpose(gathered, [0, 1, 3, 2])                  # [B, N, Q, S]
    return score

  def attention_probs(self, scores, attention):
    dtype = modeling.softmax_dtype(scores)
    queries = tf.shape(scores)[2]
    allowed = attention["mask"][:, :, :queries]                      # [B, 1, Q, S]
    scores = tf.where(allowed, tf.cast(scores, dtype), dtype.min)
    return tf.nn.softmax(scores)


class DebertaV2Encoder(modeling.BertEncoder):
  """BertEncoder with DeBERTa's embeddings, disentangled blocks and
  ContextPooler."""

  @property
  def POOLER_ACTIVATION(self):  # pylint: disable=invalid-name
    return modeling.get_activation(self.config.pooler_hidden_act)

  def make_embeddings(self, config):
    return DebertaEmbeddings(config, name="embeddings"), None

  def shared_tables(self):
    """The relative-position table (and its norm) every block reads."""
    return ([("relative_embeddings", self.relative_embeddings)]
            if self.relative_embeddings is not None else [])

  def make_blocks(self, config):
    self.relative_embeddings = (RelativeEmbeddings(
        config, name="relative_embeddings") if config.relative_attention
                                else None)
    return [DisentangledBlock(config, self.relative_embeddings,
                              name=f"layer_{i}")
            for i in range(config.num_hidden_layers)]

  def _embed(self, inputs, training, dropout_seed):
    """(embeddings' output float32 [B, S, H], {"mask", "relative"})."""
    mask = tf.cast(inputs["input_mask"], tf.bool)                    # [B, S]
    both = tf.logical_and(mask[:, tf.newaxis, :, tf.newaxis],
                          mask[:, tf.newaxis, tf.newaxis, :])        # [B, 1, S, S]
    length = tf.shape(mask)[1]
    x = self.embeddings(
        tf.cast(inputs["input_word_ids"], tf.int32),
        tf.cast(inputs["input_type_ids"], tf.int32), inputs["input_mask"],
        training=training, dropout_seed=modeling.fold_seed(dropout_seed, 0))
    if self.relative_embeddings is not None and not self.relative_embeddings.built:
      self.relative_embeddings(x)                  # its variables, named here
    return x, {"mask": both,
               "relative": relative_positions(length, length, self.config)}


def build(config, recompute=False):
  """A DebertaV2Encoder named "encoder" (variables created on first call)."""
  return DebertaV2Encoder(config, recompute=recompute, name="encoder")


def _layer_names(i):
  p = f"encoder.layer.{i}.attention."
  return {"query": p + "self.query_proj", "key": p + "self.key_proj",
          "value": p + "self.value_proj", "pos_key": p + "self.pos_key_proj",
          "pos_query": p + "self.pos_query_proj",
          "attention_output": p + "output.dense",
          "attention_layer_norm": p + "output.LayerNorm",
          "intermediate": f"encoder.layer.{i}.intermediate.dense",
          "output_dense": f"encoder.layer.{i}.output.dense",
          "output_layer_norm": f"encoder.layer.{i}.output.LayerNorm"}


def hf_assignments(encoder, tensors):
  """[(variable, HF name, transform)] by transformers' DebertaV2 names."""
  emb = encoder.embeddings
  pairs = [(emb.word_embeddings, "embeddings.word_embeddings.weight", None)]
  if emb.position_embeddings is not None:
    pairs.append((emb.position_embeddings,
                  "embeddings.position_embeddings.weight", None))
  if emb.type_embeddings is not None:
    pairs.append((emb.type_embeddings,
                  "embeddings.token_type_embeddings.weight", None))
  if emb.project is not None:
    pairs.append((emb.project.kernel, "embeddings.embed_proj.weight",
                  np.transpose))
  pairs += norm_assignments(emb.layer_norm, tensors, "embeddings.LayerNorm")
  relative = encoder.relative_embeddings
  if relative is not None:
    pairs.append((relative.table, "encoder.rel_embeddings.weight", None))
    if relative.layer_norm is not None:
      pairs += norm_assignments(relative.layer_norm, tensors,
                                "encoder.LayerNorm")
  for i, block in enumerate(encoder.blocks):
    for attr, source in _layer_names(i).items():
      layer = getattr(block, attr)
      if layer is None:
        continue
      pairs += (norm_assignments(layer, tensors, source)
                if attr.endswith("layer_norm")
                else linear_assignments(layer, source))
  return pairs + linear_assignments(encoder.pooler, POOLER)


def numpy_bucket(offsets, config):
  """relative_positions' buckets of int offsets in float64 numpy."""
  buckets = config.position_buckets
  if buckets <= 0:
    return offsets
  mid = buckets // 2
  far = np.where(np.abs(offsets) < mid, mid - 1, np.abs(offsets))
  log_position = np.ceil(np.log(far / mid) / np.log(
      (config.max_relative_positions - 1) / mid) * (mid - 1)) + mid
  return np.where(far <= mid, offsets, log_position * np.sign(offsets)).astype(
      np.int64)


def _numpy_embeddings(t, config, word_ids, type_ids):
  """[B, S, H] summed embeddings (before their norm) from float64 tensors."""
  x = t["embeddings.word_embeddings.weight"][word_ids]                # [B, S, E]
  if config.position_biased_input:
    x = x + t["embeddings.position_embeddings.weight"][:word_ids.shape[1]][None]
  if config.type_vocab_size:
    x = x + t["embeddings.token_type_embeddings.weight"][type_ids]
  if "embeddings.embed_proj.weight" in t:
    x = x @ t["embeddings.embed_proj.weight"].T                       # [B, S, H]
  return x


def _numpy_c2p(x, table, offsets, span):
  """[B, N, S, S] position scores of x [B, N, S, D] against the relative
  table [N, R, D], row i picking bucket offsets[i, j] + span for column j
  (content-to-position; position-to-content is the same on the keys with
  offsets negated, then transposed)."""
  scores = x @ table.transpose(0, 2, 1)[None]                         # [B,N,S,R]
  rows = np.clip(offsets + span, 0, 2 * span - 1)
  return np.take_along_axis(
      scores, np.broadcast_to(rows, scores.shape[:2] + rows.shape), -1)


def numpy_reference(tensors, config, word_ids, mask, type_ids):
  """DeBERTa-v2 in float64 numpy from HF-named tensors: {"sequence_output"
  [B, S, H], and "pooled_output" [B, H] when the tensors have the
  ContextPooler}. p2c is gathered as transformers does (by the key's
  offset to the query, then transposed), not by the encoder's shortcut."""
  t = {k: v.astype(np.float64) for k, v in tensors.items()}

  def linear(x, name):
    return x @ t[name + ".weight"].T + t.get(name + ".bias", 0.0)

  def norm(x, prefix):
    gamma, beta = reference.layer_norm_params(tensors, prefix)
    return reference.layer_norm(x, t[gamma], t[beta], config.layer_norm_eps)

  b, s = word_ids.shape
  n = config.num_attention_heads
  d = config.hidden_size // n
  x = norm(_numpy_embeddings(t, config, word_ids, type_ids),
           "embeddings.LayerNorm") * mask[..., None]                  # [B, S, H]
  span = config.span
  terms = config.pos_att_type if config.relative_attention else ()
  if terms:
    table = t["encoder.rel_embeddings.weight"][:2 * span]             # [R, H]
    if config.layer_norm_relative:
      table = norm(table, "encoder.LayerNorm")
  offsets = numpy_bucket(np.arange(s)[:, None] - np.arange(s)[None], config)
  allowed = (mask[:, None, :, None] * mask[:, None, None, :]) > 0     # [B,1,S,S]
  scale = math.sqrt(d * (1 + len(config.pos_att_type)))

  def heads(y):
    return y.reshape(b, s, n, d).transpose(0, 2, 1, 3)                # [B,N,S,D]

  def table_heads(name):
    return linear(table, name).reshape(-1, n, d).transpose(1, 0, 2)   # [N, R, D]

  for i in range(config.num_hidden_layers):
    p = f"encoder.layer.{i}.attention.self."
    own = lambda kind: p + (f"pos_{kind}_proj" if not config.share_att_key
                            else f"{kind}_proj")
    q, k, v = (heads(linear(x, p + f"{kind}_proj"))
               for kind in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2)                              # [B,N,S,S]
    if "c2p" in terms:
      scores = scores + _numpy_c2p(q, table_heads(own("key")), offsets, span)
    if "p2c" in terms:
      scores = scores + _numpy_c2p(
          k, table_heads(own("query")), -offsets, span).transpose(0, 1, 3, 2)
    scores = np.where(allowed, scores / scale, np.finfo(np.float64).min)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, -1)     # [B, S, H]
    a = f"encoder.layer.{i}.attention.output."
    x = norm(x + linear(context, a + "dense"), a + "LayerNorm")
    inner = reference.activation(
        config.hidden_act, linear(x, f"encoder.layer.{i}.intermediate.dense"))
    o = f"encoder.layer.{i}.output."
    x = norm(x + linear(inner, o + "dense"), o + "LayerNorm")
  outputs = {"sequence_output": x}
  if POOLER + ".weight" in t:
    outputs["pooled_output"] = reference.activation(
        config.pooler_hidden_act, linear(x[:, 0], POOLER))            # [B, H]
  return outputs


FAMILY = encoders.EncoderFamily(
    name="deberta-v2", config_class=DebertaV2Config, build=build,
    hf_model_types=("deberta-v2",), hf_assignments=hf_assignments,
    tokenizers={"deberta-v2": tokenization.sentencepiece_spec(
        "spm.model", {"do_lower_case": False}, "DebertaV2Tokenizer",
        id_offset=0, unk_id=3, cls="[CLS]", sep="[SEP]", pad="[PAD]",
        mask="[MASK]", pair_separators=1, segment_ids=True,
        albert_text=False)},
    hf_prefix="deberta",
    numpy_reference=numpy_reference,
    hf_optional_sources=(POOLER + ".weight", POOLER + ".bias"),
    hf_classes=("DebertaV2",))
