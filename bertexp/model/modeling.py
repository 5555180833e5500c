"""The BERT encoder and its heads, in tf_keras.

Shape legend: B batch, S sequence length, H hidden size, N attention heads,
D = H / N head size, I intermediate size, L number of labels.
"""
import contextlib
import dataclasses
import json
import math
from typing import ClassVar

import tensorflow as tf
import tf_keras

from bertexp.util import fileio


@dataclasses.dataclass
class BertConfig:
  """The fields of google-research/bert's `bert_config.json`.

  vocab_size: rows of the word-embedding table.
  hidden_size: H, width of every layer.
  num_hidden_layers: number of Transformer blocks.
  num_attention_heads: N; must divide hidden_size.
  intermediate_size: I, width of the feed-forward inner layer.
  hidden_act: "gelu" (exact, erf; what Hugging Face and Model Garden use),
    "gelu_tanh" (the tanh approximation google-research's TF1 code computes
    under the name "gelu"; also accepted as "gelu_new", "gelu_fast",
    "gelu_pytorch_tanh"), "relu", "tanh", "swish"/"silu".
  hidden_dropout_prob: dropout on embeddings, attention output and FFN output.
  attention_probs_dropout_prob: dropout on the attention probabilities.
  max_position_embeddings: longest sequence the position table covers.
  type_vocab_size: number of segment ids (2 for sentence pairs).
  initializer_range: stddev of the truncated-normal initializer.
  layer_norm_eps: epsilon of every LayerNorm (1e-12 in BERT).
  family: the encoder family (bertexp.model.encoders), always FAMILY_NAME
    ("bert" here; a family's subclass sets its own); a file without it is
    BERT.
  """
  FAMILY_NAME: ClassVar[str] = "bert"
  # Integer fields that may be 0 (the others must be positive).
  MAY_BE_ZERO: ClassVar[tuple] = ()
  vocab_size: int
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12
  family: str = "bert"

  def __post_init__(self):
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      lowest = 0 if field.name in self.MAY_BE_ZERO else 1
      if field.type in (int, "int") and (
          not isinstance(value, int) or isinstance(value, bool) or
          value < lowest):
        raise ValueError(f"{field.name} must be an integer >= {lowest}, got "
                         f"{value!r}")
      if field.type in (float, "float") and (
          not isinstance(value, (int, float)) or isinstance(value, bool) or
          not 0 <= value < 1):
        raise ValueError(f"{field.name} must be a number in [0, 1), got "
                         f"{value!r}")
    if self.family != self.FAMILY_NAME:
      raise ValueError(f"family {self.family!r}: a {type(self).__name__} is "
                       f"family {self.FAMILY_NAME!r}")
    if not isinstance(self.hidden_act, str):
      raise ValueError(f"hidden_act must be a name, got {self.hidden_act!r}")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(
          f"hidden_size {self.hidden_size} is not a multiple of "
          f"num_attention_heads {self.num_attention_heads}")
    get_activation(self.hidden_act)  # fails early on an unknown name

  @classmethod
  def from_dict(cls, values, source="config"):
    known = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(values, dict):
      raise ValueError(f"{source}: expected a JSON object of "
                       f"{cls.FAMILY_NAME} config fields, found "
                       f"{type(values).__name__}")
    if "vocab_size" not in values:
      raise ValueError(f"{source}: missing required field 'vocab_size'")
    # Extra keys (HF's model_type, pad_token_id...) are not BERT config fields.
    try:
      return cls(**{k: v for k, v in values.items() if k in known})
    except ValueError as e:
      raise ValueError(f"{source}: {e}") from None

  def parameter_count(self):
    """Parameters of the BERT-shaped encoder this describes: embeddings of
    width E, their projection to H when E differs, each block with weights
    of its own once, the pooler."""
    h, i = self.hidden_size, self.intermediate_size
    e = getattr(self, "embedding_size", None) or h
    embeddings = (self.vocab_size + self.max_position_embeddings +
                  self.type_vocab_size) * e + 2 * e
    if e != h:
      embeddings += e * h + h
    return embeddings + self.distinct_blocks * self.block_parameters() + h * h + h

  def block_parameters(self):
    """Parameters of one Transformer block: four H x H projections, the
    feed-forward pair, two LayerNorms."""
    h, i = self.hidden_size, self.intermediate_size
    return 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h

  def block_activation_elements(self, seq_length, queries):
    """Elements one block keeps for its backward pass per example, when
    `queries` of its seq_length positions are computed: the input, keys and
    values cover every position; the rest (attention output, LayerNorms,
    dropout masks, the feed-forward pre- and post-activation) only the
    queries; the attention probabilities [N, Q, S] (and their dropout)."""
    s, q, h = seq_length, queries, self.hidden_size
    hidden = 3 * s * h + (7 if self.hidden_dropout_prob > 0 else 5) * q * h
    probs = ((3 if self.attention_probs_dropout_prob > 0 else 1) *
             self.num_attention_heads * q * s)
    return hidden + 2 * q * self.intermediate_size + probs

  def block_fixed_bytes(self, recompute):
    """Bytes a training step holds per block whatever the batch, beyond its
    weights, gradients and optimizer slots: none for BERT's blocks (the
    plan's overhead term was fitted to them)."""
    del recompute
    return 0

  @property
  def reads_type_ids(self):
    """Whether the encoder reads input_type_ids (then they must be below
    type_vocab_size)."""
    return True

  @property
  def distinct_blocks(self):
    """How many Transformer blocks have weights of their own."""
    return self.num_hidden_layers

  @property
  def max_seq_length(self):
    """The longest sequence the position table covers."""
    return self.max_position_embeddings

  @classmethod
  def from_json_file(cls, path):
    return cls.from_dict(fileio.read_json(path), source=path)

  def to_json_string(self):
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


def _gelu_tanh(x):
  return tf.nn.gelu(x, approximate=True)


def _gelu_exact(x):
  # x * ((1 + erf(x / sqrt 2)) * 0.5): TensorFlow's own exact gelu goes
  # through erfc, 2-3x slower on the CPU; this form is the one oneDNN fuses
  # into the matmul before it (with the gradient below, in training too).
  # The two differ by < 1e-6.
  return x * ((1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0)))) * 0.5)


_ACTIVATIONS = {
    "gelu": _gelu_exact,
    "gelu_tanh": _gelu_tanh,
    "gelu_new": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "relu": tf.nn.relu,
    "tanh": tf.tanh,
    "swish": tf.nn.silu,
    "silu": tf.nn.silu,
}


_PORTABLE_ACTIVATIONS = []   # non-empty inside portable_activations()


@contextlib.contextmanager
def portable_activations():
  """Models built inside use TensorFlow's own exact gelu (tf.nn.gelu), which
  the TFLite converter maps to its builtin GELU; the faster erf form above
  would need TF Select ops there. Same values within 1e-6."""
  _PORTABLE_ACTIVATIONS.append(True)
  try:
    yield
  finally:
    _PORTABLE_ACTIVATIONS.pop()


def get_activation(name):
  """The activation function named in bert_config.json's `hidden_act`.

  Raises:
    ValueError: an unknown name.
  """
  if name.lower() == "gelu" and _PORTABLE_ACTIVATIONS:
    return lambda x: tf.nn.gelu(x, approximate=False)
  try:
    return _ACTIVATIONS[name.lower()]
  except KeyError:
    raise ValueError(f"hidden_act {name!r} is not one of "
                     f"{sorted(_ACTIVATIONS)}") from None


def initializer(config):
  """A truncated normal of stddev config.initializer_range; a new instance
  per weight (one unseeded instance reused gives every weight the same
  values)."""
  return tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def layer_norm(config, name):
  """A LayerNorm over the last axis with config.layer_norm_eps, float32 even
  under mixed precision (the variance needs the range)."""
  return tf_keras.layers.LayerNormalization(
      axis=-1, epsilon=config.layer_norm_eps, dtype="float32", name=name)


class Dense(tf_keras.layers.Dense):
  """tf_keras' Dense (same variables, same checkpoints) computed as one 2-D
  matmul followed by bias_add and the activation on inputs [..., in]:
  Keras' tensordot path puts a reshape between the matmul and the bias, so
  oneDNN cannot fuse them."""

  def call(self, inputs):
    inputs = tf.cast(inputs, self.compute_dtype)
    shape = tf.shape(inputs)
    x = tf.reshape(inputs, [-1, shape[-1]])                           # [M, in]
    y = tf.matmul(x, self.kernel)                                     # [M, out]
    if self.use_bias:
      y = tf.nn.bias_add(y, self.bias)
    if self.activation is not None:
      y = self.activation(y)
    outer = inputs.shape[:-1].as_list()
    y = tf.reshape(y, tf.concat([shape[:-1], [self.units]], 0))
    y.set_shape(outer + [self.units])
    return y


def fold_seed(seed, salt):
  """A [2] seed for one random draw from a [2] seed and an int salt (None
  stays None)."""
  if seed is None:
    return None
  return tf.random.experimental.stateless_fold_in(seed, salt)


def fresh_dropout_seed():
  """A new [2] int64 seed from TensorFlow's global random generator.

  For an encoder called for training outside bertexp's Trainer (a user's own
  Keras loop or `model.fit`): every layer then folds its salt into it and
  draws the same 16-bit stateless masks as under the Trainer, instead of
  tf.nn.dropout's float draw per element, and a recomputed block (recompute)
  draws the masks of its first pass. `tf.random.set_seed` makes it
  repeatable.
  """
  return tf.random.uniform([2], maxval=2 ** 62, dtype=tf.int64)


class Dropout(tf_keras.layers.Layer):
  """Dropout whose mask is a pure function of the seed it is called with.

  bertexp's trainer passes a [2] seed derived from (run seed, step, replica,
  micro-batch) and every layer folds in its own salt, so a resumed run draws
  exactly the masks an uninterrupted run would, and a recomputed forward pass
  (bertexp.build_encoder.recompute) draws the same masks as the first one.
  Nothing random is stored in the layer: checkpoints hold weights only.
  BertEncoder draws a fresh seed when called for training without one
  (fresh_dropout_seed); a Dropout layer called alone without a seed falls
  back to tf.nn.dropout.
  """

  def __init__(self, rate, **kwargs):
    # No autocast: the mask is applied in the dtype it is given.
    super().__init__(autocast=False, **kwargs)
    if not 0 <= rate < 1:
      raise ValueError(f"dropout rate must be in [0, 1), got {rate!r}")
    self.rate = float(rate)

  def call(self, x, training=None, seed=None):
    if not training or self.rate == 0:
      return x
    if seed is None:
      return tf.nn.dropout(x, self.rate)
    return x * keep_mask(tf.shape(x), self.rate, seed, x.dtype)


def keep_mask(shape, rate, seed, dtype):
  """A dropout mask of `shape`: 1 / (1 - rate) where kept, 0 where dropped.

  Each element is kept when a 16-bit random number is at least
  round(rate * 65536), so the drop probability is `rate` to within 2**-17.
  Two numbers come from each 32-bit word of the stateless Philox stream: half
  the random-number work of tf.nn.experimental.stateless_dropout (which draws
  a float per element), the most expensive part of dropout on the CPU.
  """
  size = tf.reduce_prod(shape)
  words = tf.random.stateless_uniform([(size + 1) // 2], seed, minval=None,
                                      maxval=None, dtype=tf.uint32)
  halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
  threshold = tf.constant(round(rate * 65536), tf.uint16)
  keep = tf.cast(halves >= threshold, dtype) * (1.0 / (1.0 - rate))
  return tf.reshape(keep, shape)


class Embeddings(tf_keras.layers.Layer):
  """word + position + segment embeddings, LayerNorm, dropout.

  Their width E is `config.embedding_size` where the family has one
  (ELECTRA, ALBERT: factorised embeddings, projected to H by the encoder),
  else H.
  """

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.width = getattr(config, "embedding_size", None) or config.hidden_size
    self.layer_norm = layer_norm(config, "layer_norm")
    self.dropout = Dropout(config.hidden_dropout_prob)

  def build(self, input_shape):
    c = self.config
    self.word_embeddings = self.add_weight(
        "word_embeddings", [c.vocab_size, self.width],
        initializer=initializer(c))
    self.position_embeddings = self.add_weight(
        "position_embeddings", [c.max_position_embeddings, self.width],
        initializer=initializer(c))
    self.type_embeddings = self.add_weight(
        "type_embeddings", [c.type_vocab_size, self.width],
        initializer=initializer(c))
    super().build(input_shape)

  def call(self, word_ids, type_ids, training=None, dropout_seed=None,
           position_ids=None):
    """word_ids, type_ids: int32 [B, S]; position_ids: int32 [B, S], or None
    for 0..S-1 on every row. Returns [B, S, E]."""
    seq_length = tf.shape(word_ids)[1]
    x = tf.gather(self.word_embeddings, word_ids)                    # [B, S, E]
    # A one-hot matmul, not a gather: the table has 2 rows, and a gather's
    # gradient would be B*S sparse rows for the optimizer to scatter.
    one_hot_types = tf.one_hot(type_ids, self.config.type_vocab_size,
                               dtype=self.type_embeddings.dtype)      # [B, S, T]
    x += tf.matmul(one_hot_types, self.type_embeddings)               # [B, S, E]
    if position_ids is None:
      x += self.position_embeddings[tf.newaxis, :seq_length]         # [1, S, E]
    else:
      x += tf.gather(self.position_embeddings, position_ids)         # [B, S, E]
    x = self.layer_norm(x)
    return self.dropout(x, training=training, seed=dropout_seed)


class TransformerBlock(tf_keras.layers.Layer):
  """Post-LayerNorm self-attention + feed-forward block of BERT.

  Takes and returns the hidden states in float32 (the LayerNorms' dtype):
  under mixed precision each block casts them to the compute dtype once for
  its matmuls instead of casting back and forth around every LayerNorm.
  """

  def __init__(self, config, **kwargs):
    super().__init__(autocast=False, **kwargs)
    self.config = config
    h = config.hidden_size
    self.num_heads = config.num_attention_heads
    self.head_size = h // self.num_heads

    def dense(units, name, activation=None):
      return Dense(units, activation=activation,
                                   kernel_initializer=initializer(config),
                                   name=name)
    self.query = dense(h, "query")
    self.key = dense(h, "key")
    self.value = dense(h, "value")
    self.attention_output = dense(h, "attention_output")
    self.attention_layer_norm = layer_norm(config, "attention_layer_norm")
    self.intermediate = dense(config.intermediate_size, "intermediate",
                              activation=get_activation(config.hidden_act))
    self.output_dense = dense(h, "output")
    self.output_layer_norm = layer_norm(config, "output_layer_norm")
    self.attention_dropout = Dropout(config.attention_probs_dropout_prob)
    self.hidden_dropout = Dropout(config.hidden_dropout_prob)

  def _split_heads(self, x):
    b, s = tf.shape(x)[0], tf.shape(x)[1]
    x = tf.reshape(x, [b, s, self.num_heads, self.head_size])        # [B, S, N, D]
    return tf.transpose(x, [0, 2, 1, 3])                              # [B, N, S, D]

  def call(self, x32, attention_bias, training=None, dropout_seed=None,
           first_token_only=False, return_scores=False):
    # x32: float32 [B, S, H]; attention_bias: [B, 1, 1, S], 0 to attend,
    # -10000 to not. dropout_seed: [2] or None; each of the three dropouts
    # folds in its salt. With first_token_only only position 0 queries (its
    # keys and values still cover the sequence): the output is [B, 1, H],
    # position 0's row of the full output, at about a sixth of the work.
    # With return_scores: (output, scores [B, N, Q, S] before the softmax,
    # float32, without the attention bias).
    x = tf.cast(x32, self.compute_dtype)
    queries = x                                                      # [B, Q, H]
    if first_token_only:                                             # Q = 1, else S
      x32, queries = x32[:, :1], x[:, :1]
    q = self._split_heads(self.query(queries))                       # [B, N, Q, D]
    k = self._split_heads(self.key(x))                               # [B, N, S, D]
    v = self._split_heads(self.value(x))
    scores = self.attention_scores(q, k, attention_bias, training,
                                   dropout_seed)                     # [B, N, Q, S]
    probs = self.attention_probs(scores, attention_bias)
    probs = self.attention_dropout(tf.cast(probs, x.dtype), training=training,
                                   seed=fold_seed(dropout_seed, 0))
    context = tf.matmul(probs, v)                                    # [B, N, Q, D]
    context = tf.transpose(context, [0, 2, 1, 3])                    # [B, Q, N, D]
    context = tf.reshape(context, tf.shape(queries))                 # [B, Q, H]
    attention = self.hidden_dropout(self.attention_output(context),
                                    training=training,
                                    seed=fold_seed(dropout_seed, 1))
    h32 = self.attention_layer_norm(x32 + tf.cast(attention, tf.float32))
    ffn = self.output_dense(self.intermediate(
        tf.cast(h32, self.compute_dtype)))                           # [B, Q, H]
    ffn = self.hidden_dropout(ffn, training=training,
                              seed=fold_seed(dropout_seed, 2))
    output = self.output_layer_norm(h32 + tf.cast(ffn, tf.float32))
    if return_scores:
      return output, tf.cast(scores, tf.float32)
    return output

  def attention_scores(self, q, k, attention_bias, training, dropout_seed):
    """Scaled query-key scores [B, N, Q, S] from q [B, N, Q, D] and k
    [B, N, S, D] (BERT's: q k^T / sqrt(D); the bias is added later)."""
    del attention_bias, training, dropout_seed
    scores = tf.matmul(q, k, transpose_b=True)                       # [B, N, Q, S]
    return scores * (1.0 / math.sqrt(self.head_size))

  def attention_probs(self, scores, attention_bias):
    """The softmax over keys of `scores` [B, N, Q, S] with the attention
    bias [B, 1, 1, S] added."""
    # bfloat16 has float32's range, so its softmax stays in bfloat16 (as on
    # TPUs; it saves two casts of the largest tensor). float16 goes through
    # float32: its logits can overflow.
    dtype = softmax_dtype(scores)
    return tf.nn.softmax(tf.cast(scores, dtype) +
                         tf.cast(attention_bias, dtype))


def softmax_dtype(scores):
  """bfloat16 for bfloat16 scores, else float32 (float16 logits overflow)."""
  return tf.bfloat16 if scores.dtype == tf.bfloat16 else tf.float32


class BertEncoder(tf_keras.Model):
  """BERT: dict of int32 [B, S] ids -> sequence_output [B, S, H], pooled [B, H].

  Inputs: `input_word_ids`, `input_mask` (1 = real token), `input_type_ids`.
  Outputs are float32 whatever the mixed-precision policy.
  With `recompute`, training keeps only each Transformer block's input for
  the backward pass and recomputes the block's activations there (less
  memory, about one more forward pass of time); dropout masks are seeded, so
  the recomputed pass equals the first.
  With `pooled_only=True` (what classification heads use) the output is
  {"pooled_output"} alone and the last block computes [CLS]'s row only:
  the pooled output is the same, the last block's work drops by about 5/6.
  Model Garden's BertEncoder offers this as output_range=1, off by default.
  """

  # The pooler: Dense(H) of [CLS]'s row with this activation (BERT's tanh;
  # a family without a pooler of its own, ELECTRA, uses its classification
  # head's first layer here).
  POOLER_ACTIVATION = "tanh"

  def __init__(self, config: BertConfig, recompute=False, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.recompute = recompute
    self.embeddings, self.embeddings_project = self.make_embeddings(config)
    self.blocks = self.make_blocks(config)
    self.pooler = self.make_pooler(config)

  def call(self, inputs, training=None, dropout_seed=None, pooled_only=False,
           return_layers=False):
    """Args: inputs (the id dict), training, dropout_seed ([2] or None),
    pooled_only (see the class), return_layers: also "hidden_states" (the
    embeddings' output and each block's, L + 1 of [B, S, H]) and
    "attention_scores" (each block's, L of [B, N, S, S] before the softmax),
    what layer-wise distillation compares."""
    if dropout_seed is None and training is True:
      dropout_seed = fresh_dropout_seed()
    x, attention_bias = self._embed(inputs, training, dropout_seed)
    if return_layers:
      return self._call_with_layers(x, attention_bias, training, dropout_seed)
    last = len(self.blocks) - 1
    for i, block in enumerate(self.blocks):
      x = self._run_block(block, x, attention_bias, training,
                          fold_seed(dropout_seed, i + 1),
                          first_token_only=pooled_only and i == last)
    pooled = tf.cast(self.pooler(x[:, 0]), tf.float32)               # [B, H]
    if pooled_only:
      return {"pooled_output": pooled}
    return {"sequence_output": x, "pooled_output": pooled}

  def _embed(self, inputs, training, dropout_seed):
    """(embeddings' output float32 [B, S, H], attention bias [B, 1, 1, S]:
    0 to attend, -10000 for padding)."""
    mask = tf.cast(inputs["input_mask"], tf.float32)
    attention_bias = (1.0 - mask[:, tf.newaxis, tf.newaxis, :]) * -10000.0
    x = self.embeddings(
        tf.cast(inputs["input_word_ids"], tf.int32),
        self.token_type_ids(inputs), training=training,
        dropout_seed=fold_seed(dropout_seed, 0),
        position_ids=self.position_ids(inputs["input_mask"]))        # [B, S, E]
    if self.embeddings_project is not None:
      x = self.embeddings_project(x)                                 # [B, S, H]
    return tf.cast(x, tf.float32), attention_bias

  def layer_groups(self):
    """The encoder's variables by role, in running order: [(name, depth,
    variables)] with ("embeddings", -1) (and their projection), tables every
    block shares (`shared_tables`, depth -1), ("layer_<ii>", i) per distinct
    block (ALBERT's one shared block once), ("pooler", None). What
    layer-wise learning rates and per-layer summaries read, instead of
    matching variable names."""
    groups = [("embeddings", -1, list(self.embeddings.weights) + (
        list(self.embeddings_project.weights) if self.embeddings_project
        else []))]
    groups += [(name, -1, list(layer.weights))
               for name, layer in self.shared_tables()]
    distinct = []
    for block in self.blocks:
      if not any(block is seen for seen in distinct):
        distinct.append(block)
    groups += [(f"layer_{i:02d}", i, list(block.weights))
               for i, block in enumerate(distinct)]
    return groups + [("pooler", None, list(self.pooler.weights))]

  def shared_tables(self):
    """[(name, layer)] of tables every block reads (DeBERTa's relative
    positions); they train with the embeddings. BERT: none."""
    return []

  def make_embeddings(self, config):
    """(the embeddings layer, the projection of its output to H or None).
    Factorised embeddings (E < H, ELECTRA and ALBERT) are projected."""
    embeddings = Embeddings(config, name="embeddings")
    if embeddings.width == config.hidden_size:
      return embeddings, None
    return embeddings, Dense(config.hidden_size,
                             kernel_initializer=initializer(config),
                             name="embeddings_project")

  def make_pooler(self, config):
    """The layer [CLS]'s row [B, H] goes through: Dense(H) with
    POOLER_ACTIVATION."""
    return Dense(config.hidden_size, activation=self.POOLER_ACTIVATION,
                 kernel_initializer=initializer(config), name="pooler")

  def make_blocks(self, config):
    """The Transformer blocks in the order they run (BERT: L blocks of their
    own, `layer_<i>`)."""
    return [TransformerBlock(config, name=f"layer_{i}")
            for i in range(config.num_hidden_layers)]

  def token_type_ids(self, inputs):
    """int32 [B, S] rows of the token-type table (BERT's: input_type_ids)."""
    return tf.cast(inputs["input_type_ids"], tf.int32)

  def position_ids(self, input_mask):
    """int32 [B, S] position of each token in the position table, or None
    for 0..S-1 on every row (BERT's)."""
    del input_mask
    return None

  def onnx_position_ids(self, graph):
    """position_ids as ONNX nodes of `input_mask` (bertexp.model.onnx_graph's
    GraphBuilder): the name of an int32 [B, S] tensor, or None for 0..S-1
    (BERT's). A family that overrides position_ids overrides this too."""
    del graph
    return None

  def _call_with_layers(self, x, attention_bias, training, dropout_seed):
    hidden_states, attention_scores = [x], []
    for i, block in enumerate(self.blocks):
      x, scores = block(x, attention_bias, training=training,
                        dropout_seed=fold_seed(dropout_seed, i + 1),
                        return_scores=True)
      hidden_states.append(x)
      attention_scores.append(scores)                                # [B, N, S, S]
    pooled = tf.cast(self.pooler(x[:, 0]), tf.float32)               # [B, H]
    return {"sequence_output": x, "pooled_output": pooled,
            "hidden_states": hidden_states,
            "attention_scores": attention_scores}

  def _run_block(self, block, x, attention_bias, training, seed,
                 first_token_only):
    run = lambda x: block(x, attention_bias, training=training,
                          dropout_seed=seed, first_token_only=first_token_only)
    if self.recompute and training:
      return tf.recompute_grad(run)(x)
    return run(x)

  def dummy_inputs(self):
    return dummy_inputs()

  def get_config(self):
    """For Keras' saving metadata (bertexp restores weights from
    checkpoints, never from a config)."""
    return {"config": dataclasses.asdict(self.config),
            "recompute": self.recompute}

  def build_variables(self):
    """Creates all variables by one call on dummy inputs; returns self."""
    self(self.dummy_inputs(), training=False)
    return self


def dummy_inputs(batch_size=1, seq_length=8):
  """Token-id inputs that build an encoder's variables by one call."""
  ones = tf.ones([batch_size, seq_length], tf.int32)
  return {"input_word_ids": ones, "input_mask": ones,
          "input_type_ids": tf.zeros_like(ones)}


class HeadModel(tf_keras.Model):
  """The one base of every task's model: an encoder (`self.encoder`) with
  the task's head. Subclasses set `encoder` and their layers, and name the
  attributes their saved config holds in `config_fields`."""

  config_fields = ()

  def dummy_inputs(self):
    """Inputs whose one call creates every variable (the encoder's)."""
    return self.encoder.dummy_inputs()

  def build_variables(self):
    """Creates every variable by one call on `dummy_inputs()`; returns
    self."""
    self(self.dummy_inputs(), training=False)
    return self

  def get_config(self):
    """For Keras' saving metadata (bertexp restores weights from
    checkpoints, never from a config)."""
    return {"encoder": self.encoder.get_config(),
            **{name: getattr(self, name) for name in self.config_fields}}


class ClassifierModel(HeadModel):
  """Encoder + dropout + dense on the pooled output -> logits [B, L].

  With num_labels == 1 the single output is a regression value.
  """
  config_fields = ("num_labels",)

  def __init__(self, encoder: BertEncoder, num_labels: int,
               dropout_rate: float = 0.1, seed=None, **kwargs):
    super().__init__(**kwargs)
    self.encoder = encoder
    self.num_labels = num_labels
    self.dropout = Dropout(dropout_rate)
    # Seeded: the same head in every process and every rerun of a seed.
    self.classifier = tf_keras.layers.Dense(
        num_labels, kernel_initializer=tf_keras.initializers.TruncatedNormal(
            stddev=encoder.config.initializer_range, seed=seed),
        dtype="float32", name="classifier")

  def call(self, inputs, training=None, dropout_seed=None,
           return_layers=False):
    """Logits [B, L]; with return_layers, (logits, the encoder's outputs
    with its hidden states and attention scores)."""
    # Only BertEncoder returns layers (a TF-Hub SavedModelEncoder does not).
    layers = {"return_layers": True} if return_layers else {}
    encoded = self.encoder(inputs, training=training,
                           pooled_only=not return_layers,
                           dropout_seed=fold_seed(dropout_seed, 0), **layers)
    logits = self.classifier(self.dropout(
        encoded["pooled_output"], training=training,
        seed=fold_seed(dropout_seed, 1)))                                # [B, L]
    return (logits, encoded) if return_layers else logits
