"""The MobileBERT family (Hugging Face's `model_type` "mobilebert"): a deep,
thin BERT for phones.

Embeddings: word vectors of width E (128); with `trigram_input` each
position sees [next, itself, previous] (3E), projected to H (512), plus
position and type embeddings of width H, normalised. Each block works at
the bottleneck width T (`intra_bottleneck_size`, 128): its input is
projected to T (the attention's residual), queries and keys come from a
second projection (`key_query_shared_bottleneck`) and values from the
block input (or all three from the first projection with
`use_bottleneck_attention`); attention is followed by
`num_feedforward_networks` - 1 extra feed-forward networks and the last
one, whose output is projected back to H and added to the block input.
`normalization_type` "no_norm" (the released models) is an element-wise
scale and shift instead of LayerNorm. The pooler is Dense(H) + tanh of
[CLS]'s row with `classifier_activation`, else that row itself.
WordPiece tokenization, as BERT.

Shape legend: B batch, S sequence length, Q queries (S, or 1 for the [CLS]
row only), E embedding width, H hidden size, T bottleneck width, N heads,
D = T / N, I intermediate size.
"""
import dataclasses
import math

import numpy as np
import tensorflow as tf
import tf_keras

from bertexp.data import tokenization
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.model.encoders import reference
from bertexp.model.encoders.bert import linear_assignments
from bertexp.model.encoders.bert import norm_assignments

NORMALIZATIONS = ("no_norm", "layer_norm")
# transformers builds these LayerNorms without the config's epsilon
# (PyTorch's default) when normalization_type is "layer_norm".
TORCH_DEFAULT_EPS = 1e-5


@dataclasses.dataclass
class MobileBertConfig(modeling.BertConfig):
  """BertConfig's fields and MobileBERT's, defaulting as transformers'
  MobileBertConfig does.

  embedding_size: E, the word vectors' width.
  trigram_input: each position's input is [next, itself, previous] (3E).
  use_bottleneck: blocks work at intra_bottleneck_size (T), else at H.
  intra_bottleneck_size: T.
  use_bottleneck_attention: queries, keys and values from the input's
    bottleneck projection.
  key_query_shared_bottleneck: queries and keys from a second bottleneck
    projection (values from the block input).
  num_feedforward_networks: feed-forward networks per block.
  normalization_type: "no_norm" (scale and shift) or "layer_norm".
  classifier_activation: the pooler is Dense(H) + tanh (else [CLS]'s row).
  """
  FAMILY_NAME = "mobilebert"
  hidden_size: int = 512
  num_hidden_layers: int = 24
  num_attention_heads: int = 4
  intermediate_size: int = 512
  hidden_act: str = "relu"
  hidden_dropout_prob: float = 0.0
  embedding_size: int = 128
  trigram_input: bool = True
  use_bottleneck: bool = True
  intra_bottleneck_size: int = 128
  use_bottleneck_attention: bool = False
  key_query_shared_bottleneck: bool = True
  num_feedforward_networks: int = 4
  normalization_type: str = "no_norm"
  classifier_activation: bool = True
  family: str = "mobilebert"

  def __post_init__(self):
    super().__post_init__()
    if self.normalization_type not in NORMALIZATIONS:
      raise ValueError(f"normalization_type {self.normalization_type!r} is "
                       f"not one of {list(NORMALIZATIONS)}")
    for name in ("trigram_input", "use_bottleneck", "use_bottleneck_attention",
                 "key_query_shared_bottleneck", "classifier_activation"):
      if not isinstance(getattr(self, name), bool):
        raise ValueError(f"{name} must be true or false, got "
                         f"{getattr(self, name)!r}")
    if self.true_hidden_size % self.num_attention_heads:
      raise ValueError(f"the block width {self.true_hidden_size} is not a "
                       f"multiple of num_attention_heads "
                       f"{self.num_attention_heads}")

  @property
  def true_hidden_size(self):
    """T: the width blocks work at."""
    return self.intra_bottleneck_size if self.use_bottleneck else self.hidden_size

  @property
  def projects_embeddings(self):
    return self.trigram_input or self.embedding_size != self.hidden_size

  @property
  def separate_query_key_bottleneck(self):
    """Queries and keys from a bottleneck projection of their own."""
    return (self.use_bottleneck and self.key_query_shared_bottleneck and
            not self.use_bottleneck_attention)

  def block_activation_elements(self, seq_length, queries):
    """What a MobileBERT block keeps per example: its input [S, H], the
    input bottleneck(s) and keys, queries, values at T, the attention
    probabilities, then per query the attention output at T, each
    feed-forward network's input, its activation's output (and input,
    except for relu, whose gradient reads only its output) and the residual
    sum its NoNorm scales, and the output bottleneck back at H."""
    s, q, h, t = seq_length, queries, self.hidden_size, self.true_hidden_size
    bottlenecks = 2 * s * t * (2 if self.separate_query_key_bottleneck else 1)
    attention = 3 * s * t + ((3 if self.attention_probs_dropout_prob > 0
                              else 1) * self.num_attention_heads * q * s)
    activations = 1 if self.hidden_act == "relu" else 2
    feed_forward = self.num_feedforward_networks * (
        2 * q * t + activations * q * self.intermediate_size)
    output = (4 if self.hidden_dropout_prob > 0 else 3) * q * h
    return (s * h + bottlenecks + attention + 3 * q * t + feed_forward +
            output)

  def block_fixed_bytes(self, recompute):
    """Measured per block on the CPU (tools/bench_memory.py, 6 to 24 blocks
    at batch 1 and 16, seq 128): ~61 MiB more than the plan's weights,
    slots and overhead account for, ~9 MiB more with recompute. A MobileBERT
    block is some 60 small operations (bottlenecks, four feed-forward
    networks, element-wise NoNorms) against BERT's ~20 large ones; what
    each one's kernels and buffers hold does not shrink with the batch."""
    return (70 if recompute else 61) * 2 ** 20

  def parameter_count(self):
    """Embeddings, blocks (bottlenecks, attention, every feed-forward
    network, the output bottleneck) and the pooler."""
    h, t, i, e = (self.hidden_size, self.true_hidden_size,
                  self.intermediate_size, self.embedding_size)
    linear = lambda n_in, n_out: n_in * n_out + n_out
    embeddings = (self.vocab_size * e + (self.max_position_embeddings +
                                         self.type_vocab_size) * h + 2 * h)
    if self.projects_embeddings:
      embeddings += linear(e * (3 if self.trigram_input else 1), h)
    values_in = t if self.use_bottleneck and self.use_bottleneck_attention else h
    block = 2 * linear(t, t) + linear(values_in, t)          # q, k, v
    block += linear(t, t) + 2 * t                            # attention output
    block += self.num_feedforward_networks * (linear(t, i) + linear(i, t) +
                                              2 * t)
    if self.use_bottleneck:
      block += linear(h, t) + 2 * t + linear(t, h) + 2 * h   # in and out
    if self.separate_query_key_bottleneck:
      block += linear(h, t) + 2 * t
    pooler = linear(h, h) if self.classifier_activation else 0
    return embeddings + self.num_hidden_layers * block + pooler


class NoNorm(tf_keras.layers.Layer):
  """MobileBERT's normalisation: x * weight + bias, element-wise (float32)."""

  def __init__(self, **kwargs):
    super().__init__(dtype="float32", **kwargs)

  def build(self, input_shape):
    width = int(input_shape[-1])
    self.gamma = self.add_weight("gamma", [width], initializer="ones")
    self.beta = self.add_weight("beta", [width], initializer="zeros")
    super().build(input_shape)

  def call(self, x):
    return x * self.gamma + self.beta


def normalization(config, name, eps=None):
  """The config's normalisation layer (float32): NoNorm or a LayerNorm of
  epsilon `eps` (the config's when None)."""
  if config.normalization_type == "no_norm":
    return NoNorm(name=name)
  return tf_keras.layers.LayerNormalization(
      axis=-1, epsilon=config.layer_norm_eps if eps is None else eps,
      dtype="float32", name=name)


class MobileBertEmbeddings(tf_keras.layers.Layer):
  """Word vectors (trigrams) projected to H, + position + type, normalised."""

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.transformation = None
    if config.projects_embeddings:
      self.transformation = modeling.Dense(
          config.hidden_size, kernel_initializer=modeling.initializer(config),
          name="transformation")
    self.norm = normalization(config, "norm", eps=TORCH_DEFAULT_EPS)
    self.dropout = modeling.Dropout(config.hidden_dropout_prob)

  def build(self, input_shape):
    c = self.config
    table = lambda name, rows, width: self.add_weight(
        name, [rows, width], initializer=modeling.initializer(c))
    self.word_embeddings = table("word_embeddings", c.vocab_size,
                                 c.embedding_size)
    self.position_embeddings = table("position_embeddings",
                                     c.max_position_embeddings, c.hidden_size)
    self.type_embeddings = table("type_embeddings", c.type_vocab_size,
                                 c.hidden_size)
    super().build(input_shape)

  def call(self, word_ids, type_ids, training=None, dropout_seed=None,
           position_ids=None):
    """int32 [B, S] ids -> float32 [B, S, H] (positions 0..S-1)."""
    del position_ids
    x = tf.gather(self.word_embeddings, word_ids)                    # [B, S, E]
    if self.config.trigram_input:
      following = tf.pad(x[:, 1:], [[0, 0], [0, 1], [0, 0]])
      preceding = tf.pad(x[:, :-1], [[0, 0], [1, 0], [0, 0]])
      x = tf.concat([following, x, preceding], axis=2)               # [B, S, 3E]
    if self.transformation is not None:
      x = self.transformation(x)                                     # [B, S, H]
    x += self.position_embeddings[tf.newaxis, :tf.shape(word_ids)[1]]
    x += tf.gather(self.type_embeddings, type_ids)
    x = self.norm(x)
    return self.dropout(x, training=training, seed=dropout_seed)


class MobileBertBlock(tf_keras.layers.Layer):
  """One MobileBERT layer: bottlenecks, attention at width T, the
  feed-forward stack, the output bottleneck back to H. Takes and returns
  float32 [B, S, H] (the call contract of modeling.TransformerBlock)."""

  def __init__(self, config, **kwargs):
    super().__init__(autocast=False, **kwargs)
    self.config = config
    t = config.true_hidden_size
    self.num_heads = config.num_attention_heads
    self.head_size = t // self.num_heads
    activation = modeling.get_activation(config.hidden_act)

    def dense(units, name, act=None):
      return modeling.Dense(units, activation=act, name=name,
                            kernel_initializer=modeling.initializer(config))
    self.input_bottleneck = self.attention_bottleneck = None
    if config.use_bottleneck:
      self.input_bottleneck = dense(t, "input_bottleneck")
      self.input_bottleneck_norm = normalization(config, "input_bottleneck_norm")
      if config.separate_query_key_bottleneck:
        self.attention_bottleneck = dense(t, "attention_bottleneck")
        self.attention_bottleneck_norm = normalization(
            config, "attention_bottleneck_norm")
    self.query, self.key, self.value = (dense(t, n)
                                        for n in ("query", "key", "value"))
    self.attention_output = dense(t, "attention_output")
    self.attention_norm = normalization(config, "attention_norm")
    self.ffn = [(dense(config.intermediate_size, f"ffn_{j}_intermediate",
                       activation),
                 dense(t, f"ffn_{j}_output"),
                 normalization(config, f"ffn_{j}_norm"))
                for j in range(config.num_feedforward_networks - 1)]
    self.intermediate = dense(config.intermediate_size, "intermediate",
                              activation)
    self.output_dense = dense(t, "output")
    self.output_norm = normalization(config, "output_norm",
                                     eps=TORCH_DEFAULT_EPS)
    if config.use_bottleneck:
      self.output_bottleneck = dense(config.hidden_size, "output_bottleneck")
      self.output_bottleneck_norm = normalization(config,
                                                  "output_bottleneck_norm")
    self.attention_dropout = modeling.Dropout(
        config.attention_probs_dropout_prob)
    self.hidden_dropout = modeling.Dropout(config.hidden_dropout_prob)

  def _split_heads(self, x):
    b, s = tf.shape(x)[0], tf.shape(x)[1]
    x = tf.reshape(x, [b, s, self.num_heads, self.head_size])        # [B, S, N, D]
    return tf.transpose(x, [0, 2, 1, 3])                              # [B, N, S, D]

  def _attention_inputs(self, x):
    """(queries' and keys' input, values' input, the attention's residual)."""
    if self.input_bottleneck is None:
      return x, x, x
    residual = tf.cast(self.input_bottleneck_norm(self.input_bottleneck(x)),
                       x.dtype)                                      # [B, S, T]
    if self.config.use_bottleneck_attention:
      return residual, residual, residual
    if self.attention_bottleneck is not None:
      shared = tf.cast(self.attention_bottleneck_norm(
          self.attention_bottleneck(x)), x.dtype)
      return shared, x, residual
    return x, x, residual

  def call(self, x32, attention_bias, training=None, dropout_seed=None,
           first_token_only=False, return_scores=False):
    # x32: float32 [B, S, H]; attention_bias [B, 1, 1, S]: 0 or -10000.
    x = tf.cast(x32, self.compute_dtype)
    query_key, values, residual = self._attention_inputs(x)
    queries = query_key
    if first_token_only:                     # [CLS]'s row only: Q = 1
      x32, queries, residual = x32[:, :1], queries[:, :1], residual[:, :1]
    seed = lambda salt: modeling.fold_seed(dropout_seed, salt)
    q = self._split_heads(self.query(queries))                       # [B, N, Q, D]
    k = self._split_heads(self.key(query_key))                       # [B, N, S, D]
    v = self._split_heads(self.value(values))
    scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(
        self.head_size))                                             # [B, N, Q, S]
    dtype = modeling.softmax_dtype(scores)
    probs = tf.nn.softmax(tf.cast(scores, dtype) + tf.cast(attention_bias,
                                                           dtype))
    probs = self.attention_dropout(tf.cast(probs, x.dtype), training=training,
                                   seed=seed(0))
    context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])        # [B, Q, N, D]
    context = tf.reshape(context, tf.shape(residual))                # [B, Q, T]
    attended = self.attention_output(context)
    if self.input_bottleneck is None:
      attended = self.hidden_dropout(attended, training=training, seed=seed(1))
    h = self.attention_norm(tf.cast(attended, tf.float32) +
                            tf.cast(residual, tf.float32))           # [B, Q, T]
    for inner, outer, norm in self.ffn:
      out = outer(inner(tf.cast(h, self.compute_dtype)))
      h = norm(tf.cast(out, tf.float32) + h)
    out = self.output_dense(self.intermediate(tf.cast(h, self.compute_dtype)))
    if self.input_bottleneck is None:
      out = self.hidden_dropout(out, training=training, seed=seed(2))
      output = self.output_norm(tf.cast(out, tf.float32) + h)
    else:
      h = self.output_norm(tf.cast(out, tf.float32) + h)
      out = self.hidden_dropout(self.output_bottleneck(
          tf.cast(h, self.compute_dtype)), training=training, seed=seed(2))
      output = self.output_bottleneck_norm(tf.cast(out, tf.float32) + x32)
    if return_scores:
      return output, tf.cast(scores, tf.float32)
    return output


class FirstRow(tf_keras.layers.Layer):
  """A pooler without weights: [CLS]'s row as it is."""

  def call(self, first):
    return first


class MobileBertEncoder(modeling.BertEncoder):
  """BertEncoder with MobileBERT's embeddings, blocks and pooler."""

  def make_embeddings(self, config):
    return MobileBertEmbeddings(config, name="embeddings"), None

  def make_blocks(self, config):
    return [MobileBertBlock(config, name=f"layer_{i}")
            for i in range(config.num_hidden_layers)]

  def make_pooler(self, config):
    if config.classifier_activation:
      return super().make_pooler(config)
    return FirstRow(name="pooler")


def build(config, recompute=False):
  """A MobileBertEncoder named "encoder" (variables created on first call)."""
  return MobileBertEncoder(config, recompute=recompute, name="encoder")


def _block_names(config, i):
  """{block attribute: HF module} of block i (norms end in "norm")."""
  p = f"encoder.layer.{i}."
  names = {"query": p + "attention.self.query", "key": p + "attention.self.key",
           "value": p + "attention.self.value",
           "attention_output": p + "attention.output.dense",
           "attention_norm": p + "attention.output.LayerNorm",
           "intermediate": p + "intermediate.dense",
           "output_dense": p + "output.dense",
           "output_norm": p + "output.LayerNorm"}
  if config.use_bottleneck:
    names.update(input_bottleneck=p + "bottleneck.input.dense",
                 input_bottleneck_norm=p + "bottleneck.input.LayerNorm",
                 output_bottleneck=p + "output.bottleneck.dense",
                 output_bottleneck_norm=p + "output.bottleneck.LayerNorm")
    if config.separate_query_key_bottleneck:
      names.update(attention_bottleneck=p + "bottleneck.attention.dense",
                   attention_bottleneck_norm=p + "bottleneck.attention.LayerNorm")
  return names


def hf_assignments(encoder, tensors):
  """[(variable, HF name, transform)] by transformers' MobileBert names."""
  config, emb = encoder.config, encoder.embeddings
  pairs = [(emb.word_embeddings, "embeddings.word_embeddings.weight", None),
           (emb.position_embeddings, "embeddings.position_embeddings.weight",
            None),
           (emb.type_embeddings, "embeddings.token_type_embeddings.weight",
            None)]
  if emb.transformation is not None:
    pairs += linear_assignments(emb.transformation,
                                "embeddings.embedding_transformation")
  pairs += norm_assignments(emb.norm, tensors, "embeddings.LayerNorm")
  for i, block in enumerate(encoder.blocks):
    for attr, source in _block_names(config, i).items():
      layer = getattr(block, attr)
      pairs += (norm_assignments(layer, tensors, source) if attr.endswith("norm")
                else linear_assignments(layer, source))
    for j, (inner, outer, norm) in enumerate(block.ffn):
      p = f"encoder.layer.{i}.ffn.{j}."
      pairs += (linear_assignments(inner, p + "intermediate.dense") +
                linear_assignments(outer, p + "output.dense") +
                norm_assignments(norm, tensors, p + "output.LayerNorm"))
  if config.classifier_activation:
    pairs += linear_assignments(encoder.pooler, "pooler.dense")
  return pairs


def _numpy_bottleneck(x, p, config, linear, norm):
  """(query/key input, value input, the layer's residual input) of layer
  prefix `p` for x [B, S, H], through the bottlenecks the config has."""
  if not config.use_bottleneck:
    return x, x, x
  layer_input = norm(linear(x, p + "bottleneck.input.dense"),
                     p + "bottleneck.input.LayerNorm")
  if config.use_bottleneck_attention:
    return layer_input, layer_input, layer_input
  if config.key_query_shared_bottleneck:
    return (norm(linear(x, p + "bottleneck.attention.dense"),
                 p + "bottleneck.attention.LayerNorm"), x, layer_input)
  return x, x, layer_input


def numpy_reference(tensors, config, word_ids, mask, type_ids):
  """MobileBERT in float64 numpy from HF-named tensors, layer by layer as
  transformers' modules are nested."""
  t = {k: v.astype(np.float64) for k, v in tensors.items()}

  def linear(x, name):
    return x @ t[name + ".weight"].T + t[name + ".bias"]

  def norm(x, prefix, eps=None):
    gamma, beta = reference.layer_norm_params(tensors, prefix)
    if config.normalization_type == "no_norm":
      return x * t[gamma] + t[beta]
    return reference.layer_norm(x, t[gamma], t[beta],
                                config.layer_norm_eps if eps is None else eps)

  b, s = word_ids.shape
  x = t["embeddings.word_embeddings.weight"][word_ids]                # [B, S, E]
  if config.trigram_input:
    pad = np.zeros_like(x[:, :1])
    x = np.concatenate([np.concatenate([x[:, 1:], pad], 1), x,
                        np.concatenate([pad, x[:, :-1]], 1)], axis=2)
  if config.projects_embeddings:
    x = linear(x, "embeddings.embedding_transformation")              # [B, S, H]
  x = x + t["embeddings.position_embeddings.weight"][:s][None] + t[
      "embeddings.token_type_embeddings.weight"][type_ids]
  x = norm(x, "embeddings.LayerNorm", eps=TORCH_DEFAULT_EPS)
  n = config.num_attention_heads
  d = config.true_hidden_size // n
  bias = (1.0 - mask[:, None, None, :]) * -1e9                        # [B,1,1,S]
  for i in range(config.num_hidden_layers):
    p = f"encoder.layer.{i}."
    qk, v_in, layer_input = _numpy_bottleneck(x, p, config, linear, norm)

    def heads(y):
      return y.reshape(b, s, n, d).transpose(0, 2, 1, 3)             # [B,N,S,D]
    q = heads(linear(qk, p + "attention.self.query"))
    k = heads(linear(qk, p + "attention.self.key"))
    v = heads(linear(v_in, p + "attention.self.value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, -1)     # [B, S, T]
    h = norm(linear(context, p + "attention.output.dense") + layer_input,
             p + "attention.output.LayerNorm")
    for j in range(config.num_feedforward_networks - 1):
      f = p + f"ffn.{j}."
      inner = reference.activation(config.hidden_act,
                                   linear(h, f + "intermediate.dense"))
      h = norm(linear(inner, f + "output.dense") + h, f + "output.LayerNorm")
    inner = reference.activation(config.hidden_act,
                                 linear(h, p + "intermediate.dense"))
    out = norm(linear(inner, p + "output.dense") + h, p + "output.LayerNorm",
               eps=TORCH_DEFAULT_EPS)
    if config.use_bottleneck:
      out = norm(linear(out, p + "output.bottleneck.dense") + x,
                 p + "output.bottleneck.LayerNorm")
    x = out
  outputs = {"sequence_output": x}
  outputs["pooled_output"] = (np.tanh(linear(x[:, 0], "pooler.dense"))
                              if config.classifier_activation else x[:, 0])
  return outputs


FAMILY = encoders.EncoderFamily(
    name="mobilebert", config_class=MobileBertConfig, build=build,
    hf_model_types=("mobilebert",), hf_assignments=hf_assignments,
    tokenizers={"mobilebert": tokenization.WORDPIECE}, hf_prefix="mobilebert",
    numpy_reference=numpy_reference, hf_classes=("MobileBert",))
