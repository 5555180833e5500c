"""The ModernBERT family (answerdotai, December 2024) and the checkpoints of
its architecture (ModernBERT base/large, mmBERT, the Ettin encoders,
gte-modernbert, modernbert-embed).

Each block is pre-normalised (the first block's attention takes the
embeddings as they are) and has:
  attention: one [H, 3H] projection to queries, keys and values, rotary
    positions on queries and keys (global layers with global_rope_theta,
    local ones with local_rope_theta), a global layer every
    global_attn_every_n_layers (from layer 0) and sliding-window layers
    between them, where a token sees the tokens at most local_attention / 2
    positions away;
  feed-forward: GeGLU, act(x Wi_a) * (x Wi_b) -> Wo;
with biases only where the config has them (attention_bias, mlp_bias,
norm_bias). The embeddings are one word table and a LayerNorm (no
positions, no token types); a final LayerNorm closes the stack. The pooled
output is the classification head transformers puts before its classifier:
[CLS]'s row or the mean of the real tokens (classifier_pooling), then
dense -> classifier_activation -> LayerNorm.

Shape legend: B batch, S sequence length, H hidden size, N heads, D head
width (H / N), I intermediate size.
"""
import dataclasses
import math
from typing import Optional, Union

import numpy as np
import tensorflow as tf
import tf_keras

from bertexp.data import tokenization
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.model.encoders import reference

# transformers' names for config fields bertexp names BERT's way.
_HF_NAMES = {"hidden_activation": "hidden_act", "norm_eps": "layer_norm_eps",
             "mlp_dropout": "hidden_dropout_prob",
             "attention_dropout": "attention_probs_dropout_prob"}
POOLINGS = ("cls", "mean")
# The classification head's layers in transformers' task models.
HEAD = ("head.dense", "head.norm")


@dataclasses.dataclass
class ModernBertConfig(modeling.BertConfig):
  """BertConfig's fields (hidden_act is transformers' hidden_activation,
  layer_norm_eps its norm_eps) and ModernBERT's own:

  norm_bias, attention_bias, mlp_bias, classifier_bias: whether those
    layers have biases.
  global_rope_theta, local_rope_theta: the rotary base of global and of
    sliding-window layers (None: the global one).
  local_attention: the sliding window's width (a token sees
    local_attention // 2 positions each way).
  global_attn_every_n_layers: layer i is global when i is a multiple.
  classifier_pooling: "cls" or "mean" (over real tokens), before the head.
  classifier_activation: the head's activation.
  pad_token_id: the padding token.
  """
  FAMILY_NAME = "modernbert"
  MAY_BE_ZERO = ("pad_token_id",)
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.0
  attention_probs_dropout_prob: float = 0.0
  max_position_embeddings: int = 8192
  type_vocab_size: int = 1
  layer_norm_eps: float = 1e-5
  norm_bias: bool = False
  attention_bias: bool = False
  mlp_bias: bool = False
  classifier_bias: bool = False
  classifier_activation: str = "gelu"
  classifier_pooling: str = "cls"
  global_rope_theta: Union[int, float] = 160000.0
  local_rope_theta: Optional[Union[int, float]] = 10000.0
  local_attention: int = 128
  global_attn_every_n_layers: int = 3
  pad_token_id: int = 50283
  family: str = "modernbert"

  def __post_init__(self):
    super().__post_init__()
    if self.classifier_pooling not in POOLINGS:
      raise ValueError(f"classifier_pooling {self.classifier_pooling!r} is "
                       f"not one of {POOLINGS}")
    for name in ("global_rope_theta", "local_rope_theta"):
      value = getattr(self, name)
      if value is not None and not (isinstance(value, (int, float)) and
                                    value > 1):
        raise ValueError(f"{name} must be a number > 1, got {value!r}")
    modeling.get_activation(self.classifier_activation)

  @classmethod
  def from_dict(cls, values, source="config"):
    """A config from bertexp's or transformers' field names."""
    if isinstance(values, dict):
      values = dict(values)
      for theirs, ours in _HF_NAMES.items():
        if theirs in values and ours not in values:
          values[ours] = values.pop(theirs)
    return super().from_dict(values, source)

  @property
  def reads_type_ids(self):
    """No: ModernBERT has no token types."""
    return False

  def parameter_count(self):
    """Parameters of the encoder: the word table and its norm, each block
    (no attention norm in the first), the final norm, the pooler head."""
    h, i = self.hidden_size, self.intermediate_size
    norm = h * (2 if self.norm_bias else 1)
    blocks = self.num_hidden_layers * self.block_parameters() - norm
    head = h * h + (h if self.classifier_bias else 0) + norm
    return self.vocab_size * h + norm + blocks + norm + head

  def block_parameters(self):
    """One block: two norms, the [H, 3H] and [H, H] attention projections,
    the [H, 2I] and [I, H] GeGLU pair (biases where the config has them)."""
    h, i = self.hidden_size, self.intermediate_size
    norm = h * (2 if self.norm_bias else 1)
    attention = 4 * h * h + (4 * h if self.attention_bias else 0)
    mlp = 3 * h * i + (2 * i + h if self.mlp_bias else 0)
    return 2 * norm + attention + mlp

  def is_global(self, layer):
    """Whether layer `layer` (0-based) attends over the whole sequence."""
    return layer % self.global_attn_every_n_layers == 0

  def rope_theta(self, layer):
    """The rotary base of layer `layer`."""
    if self.is_global(layer) or self.local_rope_theta is None:
      return self.global_rope_theta
    return self.local_rope_theta


def rotary_tables(seq_length, width, theta):
  """(cos, sin) float32 [S, D] of rotary positions 0..S-1: frequency
  theta^(-2j/D) for j < D/2, each repeated for the two halves."""
  inverse = 1.0 / (theta ** (tf.range(0, width, 2, dtype=tf.float32) / width))
  angles = tf.cast(tf.range(seq_length), tf.float32)[:, None] * inverse[None]
  angles = tf.concat([angles, angles], -1)                           # [S, D]
  return tf.cos(angles), tf.sin(angles)


def rotate(x, cos, sin):
  """Rotary positions on x [B, N, S, D] (the halves' rotation)."""
  half = x.shape[-1] // 2
  turned = tf.concat([-x[..., half:], x[..., :half]], -1)
  return x * cos + turned * sin


def _norm(config, name):
  """A LayerNorm in float32, with a shift only when norm_bias."""
  return tf_keras.layers.LayerNormalization(
      epsilon=config.layer_norm_eps, center=config.norm_bias,
      dtype="float32", name=name)


def _neighbours(x, chunks):
  """x [G, M, c, ...] chunked on axis 1 -> [G, M, 3c, ...]: each chunk with
  the one before and the one after (zeros past the ends)."""
  padded = tf.pad(x, [[0, 0], [1, 1]] + [[0, 0]] * (len(x.shape) - 2))
  return tf.concat([padded[:, :chunks], padded[:, 1:chunks + 1],
                    padded[:, 2:chunks + 2]], axis=2)


def banded_attention(q, k, v, mask, half, dropout=tf.identity):
  """Sliding-window attention computed on its band only.

  The sequence is cut into chunks of `half` positions; a query sees keys at
  most `half` away, all in its own chunk or the two next to it, so each
  chunk's scores are [half, 3 half]: time and memory grow linearly with S.
  Equal to masking the full score matrix (the query rows with no real key
  in their window take the mean of every value, as a full softmax over
  equal scores does). Tensors stay 4-D (batch and heads merged), which
  TFLite's kernels take.

  Args:
    q, k, v: [B, N, S, D], queries already scaled.
    mask: [B, S], 1 for real tokens.
    half: the window's reach each way (local_attention // 2), >= 1.
    dropout: applied to the attention probabilities.
  Returns:
    [B, N, S, D] float32.
  """
  batch, heads, seq = tf.shape(q)[0], tf.shape(q)[1], tf.shape(q)[2]
  width = q.shape[-1]
  chunks = (seq + half - 1) // half
  extra = chunks * half - seq
  chunk = lambda t: tf.reshape(                                      # [G,M,c,D]
      tf.pad(t, [[0, 0], [0, 0], [0, extra], [0, 0]]),
      [batch * heads, chunks, half, width])
  keys, values = _neighbours(chunk(k), chunks), _neighbours(chunk(v), chunks)
  real = tf.reshape(tf.pad(tf.cast(mask, tf.float32), [[0, 0], [0, extra]]),
                    [batch, chunks, half])
  real = tf.repeat(_neighbours(real, chunks) > 0, heads, axis=0)     # [G,M,3c]
  offset = tf.range(3 * half)[None] - half - tf.range(half)[:, None]  # [c, 3c]
  allowed = tf.logical_and(real[:, :, None, :],
                           (tf.abs(offset) <= half)[None, None])     # [G,M,c,3c]
  scores = tf.where(allowed, tf.matmul(chunk(q), keys, transpose_b=True),
                    -1e9)
  context = tf.matmul(dropout(tf.nn.softmax(scores, -1)), values)    # [G,M,c,D]
  context = tf.reshape(context, [batch, heads, chunks * half, width])[:, :, :seq]
  # Rows that see no real key: a full softmax over equal scores averages
  # every value of the sequence.
  blind = tf.logical_not(tf.reduce_any(allowed, -1))                 # [G,M,c]
  blind = tf.reshape(blind, [batch, heads, chunks * half])[:, :, :seq, None]
  return tf.where(blind, tf.reduce_mean(v, 2, keepdims=True), context)


def _dense(config, units, use_bias, name):
  """A Dense of `units` with the config's initializer, biased or not."""
  return modeling.Dense(units, use_bias=use_bias, name=name,
                        kernel_initializer=modeling.initializer(config))


class RotaryAttention(tf_keras.layers.Layer):
  """Self-attention with rotary positions, global or in a sliding window."""

  def __init__(self, config, layer, **kwargs):
    # No autocast: x stays float32; the projections cast what they read.
    super().__init__(autocast=False, **kwargs)
    self.config = config
    self.heads = config.num_attention_heads
    self.width = config.hidden_size // self.heads
    self.theta = config.rope_theta(layer)
    self.window = None if config.is_global(layer) else config.local_attention
    self.qkv = _dense(config, 3 * config.hidden_size, config.attention_bias,
                      "qkv")
    self.out = _dense(config, config.hidden_size, config.attention_bias, "out")
    self.dropout = modeling.Dropout(config.attention_probs_dropout_prob)

  def allowed(self, mask):
    """bool [B, 1, S, S]: the real keys each query may see (its window)."""
    seq = tf.shape(mask)[1]
    allowed = tf.cast(mask, tf.bool)[:, None, None, :]
    if self.window is not None:
      position = tf.range(seq)
      near = tf.abs(position[:, None] - position[None, :]) <= self.window // 2
      allowed = tf.logical_and(allowed, near[None, None])
    return allowed

  def call(self, x, mask, training=None, seed=None, full_scores=False):
    """x [B, S, H], mask [B, S] -> ([B, S, H], scores [B, N, S, S] or None).

    A sliding-window layer computes only its band (banded_attention: time
    and memory linear in S) unless `full_scores` asks for the whole score
    matrix (what layer-wise distillation compares)."""
    batch, seq = tf.shape(x)[0], tf.shape(x)[1]
    qkv = tf.reshape(self.qkv(x), [batch, seq, 3, self.heads, self.width])
    q, k, v = tf.unstack(tf.transpose(
        tf.cast(qkv, tf.float32), [2, 0, 3, 1, 4]))                  # [B,N,S,D]
    cos, sin = rotary_tables(seq, self.width, self.theta)
    q, k = rotate(q, cos, sin) / math.sqrt(self.width), rotate(k, cos, sin)
    if self.window is not None and not full_scores:
      context, scores = banded_attention(
          q, k, v, mask, self.window // 2,
          lambda probs: self.dropout(probs, training=training, seed=seed)), None
    else:
      scores = tf.where(self.allowed(mask), tf.matmul(q, k, transpose_b=True),
                        -1e9)                                        # [B,N,S,S]
      probs = self.dropout(tf.nn.softmax(scores, -1), training=training,
                           seed=seed)
      context = tf.matmul(probs, v)                                  # [B,N,S,D]
    context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]),
                         [batch, seq, self.heads * self.width])
    return self.out(tf.cast(context, self.compute_dtype)), scores


class ModernBlock(tf_keras.layers.Layer):
  """Pre-norm attention and GeGLU feed-forward, each around a residual."""

  def __init__(self, config, layer, **kwargs):
    # No autocast: the residual stream stays float32 under mixed precision.
    super().__init__(autocast=False, **kwargs)
    self.config = config
    self.attention_norm = None if layer == 0 else _norm(config,
                                                         "attention_norm")
    self.attention = RotaryAttention(config, layer, name="attention")
    self.mlp_norm = _norm(config, "mlp_norm")
    self.wi = _dense(config, 2 * config.intermediate_size, config.mlp_bias,
                     "wi")
    self.wo = _dense(config, config.hidden_size, config.mlp_bias, "wo")
    self.activation = modeling.get_activation(config.hidden_act)
    self.dropout = modeling.Dropout(config.hidden_dropout_prob)

  def call(self, x, mask, training=None, seed=None, full_scores=False):
    """x [B, S, H] float32 -> ([B, S, H], attention scores [B, N, S, S], or
    None from a sliding-window layer unless `full_scores`)."""
    normed = x if self.attention_norm is None else self.attention_norm(x)
    attended, scores = self.attention(normed, mask, training=training,
                                      seed=modeling.fold_seed(seed, 0),
                                      full_scores=full_scores)
    x = x + tf.cast(attended, tf.float32)
    gate_input, gate = tf.split(self.wi(self.mlp_norm(x)), 2, axis=-1)  # [B,S,I]
    inner = self.dropout(self.activation(gate_input) * gate,
                         training=training, seed=modeling.fold_seed(seed, 1))
    return x + tf.cast(self.wo(inner), tf.float32), scores


class ModernBertEncoder(tf_keras.Model):
  """ModernBERT: the id dict [B, S] -> sequence_output [B, S, H] (after the
  final norm) and pooled_output [B, H] (the classification head's pooling,
  dense, activation and norm). Outputs are float32. See the module
  docstring; the call contract is BertEncoder's."""

  def __init__(self, config, recompute=False, **kwargs):
    super().__init__(**kwargs)
    if recompute:
      raise ValueError("bertexp.build_encoder.recompute is not implemented "
                       "for the modernbert family yet")
    self.config = config
    self.word_embeddings = tf_keras.layers.Embedding(
        config.vocab_size, config.hidden_size,
        embeddings_initializer=modeling.initializer(config),
        name="word_embeddings")
    self.embedding_norm = _norm(config, "embedding_norm")
    self.embedding_dropout = modeling.Dropout(config.hidden_dropout_prob)
    self.blocks = [ModernBlock(config, i, name=f"layer_{i}")
                   for i in range(config.num_hidden_layers)]
    self.final_norm = _norm(config, "final_norm")
    self.head_dense = _dense(config, config.hidden_size,
                             config.classifier_bias, "head_dense")
    self.head_norm = _norm(config, "head_norm")
    # Resolved when built (inside modeling.portable_activations for TFLite).
    self.head_activation = modeling.get_activation(
        config.classifier_activation)

  def call(self, inputs, training=None, dropout_seed=None, pooled_only=False,
           return_layers=False):
    """As BertEncoder's: `return_layers` also gives "hidden_states" (L + 1
    of [B, S, H]) and "attention_scores" (L of [B, N, S, S])."""
    if dropout_seed is None and training is True:
      dropout_seed = modeling.fresh_dropout_seed()
    mask = tf.cast(inputs["input_mask"], tf.float32)                 # [B, S]
    x = self.embedding_norm(self.word_embeddings(
        tf.cast(inputs["input_word_ids"], tf.int32)))
    x = tf.cast(self.embedding_dropout(
        x, training=training, seed=modeling.fold_seed(dropout_seed, 0)),
                tf.float32)                                          # [B, S, H]
    hidden, scores = [x], []
    for i, block in enumerate(self.blocks):
      x, block_scores = block(x, mask, training=training,
                              seed=modeling.fold_seed(dropout_seed, i + 1),
                              full_scores=return_layers)
      hidden.append(x)
      scores.append(block_scores)
    x = tf.cast(self.final_norm(x), tf.float32)
    pooled = self.pool(x, mask)
    outputs = ({"pooled_output": pooled} if pooled_only else
               {"sequence_output": x, "pooled_output": pooled})
    if return_layers:
      outputs.update(hidden_states=hidden, attention_scores=scores)
    return outputs

  def pool(self, sequence, mask):
    """[B, H]: classifier_pooling over the real tokens, then the head."""
    if self.config.classifier_pooling == "cls":
      pooled = sequence[:, 0]
    else:
      pooled = (tf.reduce_sum(sequence * mask[..., None], 1) /
                tf.reduce_sum(mask, 1, keepdims=True))
    return tf.cast(self.head_norm(self.head_activation(
        self.head_dense(pooled))), tf.float32)

  def layer_groups(self):
    """The embeddings (table and norm), each block, then the final norm and
    the pooler head (see BertEncoder.layer_groups)."""
    groups = [("embeddings", -1, list(self.word_embeddings.weights) +
               list(self.embedding_norm.weights))]
    groups += [(f"layer_{i:02d}", i, list(block.weights))
               for i, block in enumerate(self.blocks)]
    return groups + [("pooler", None, list(self.final_norm.weights) +
                      list(self.head_dense.weights) +
                      list(self.head_norm.weights))]

  def dummy_inputs(self):
    return modeling.dummy_inputs()

  def build_variables(self):
    """Creates every variable by one call on dummy inputs; returns self."""
    self(self.dummy_inputs(), training=False)
    return self


def build(config, recompute=False):
  """A ModernBertEncoder named "encoder" (variables created on first
  call)."""
  return ModernBertEncoder(config, recompute=recompute, name="encoder")


def _linear(layer, source):
  """A Dense from a PyTorch Linear ([out, in]), its bias when it has one."""
  pairs = [(layer.kernel, source + ".weight", np.transpose)]
  return pairs + ([(layer.bias, source + ".bias", None)]
                  if layer.use_bias else [])


def _norm_pairs(layer, source):
  pairs = [(layer.gamma, source + ".weight", None)]
  return pairs + ([(layer.beta, source + ".bias", None)]
                  if layer.center else [])


def hf_assignments(encoder, tensors):
  """[(keras variable, HF name, transform)] for every encoder variable
  (HF names without the task models' `model.` prefix; the head's outside
  it)."""
  del tensors
  pairs = [(encoder.word_embeddings.embeddings,
            "embeddings.tok_embeddings.weight", None)]
  pairs += _norm_pairs(encoder.embedding_norm, "embeddings.norm")
  for i, block in enumerate(encoder.blocks):
    prefix = f"layers.{i}."
    if block.attention_norm is not None:
      pairs += _norm_pairs(block.attention_norm, prefix + "attn_norm")
    pairs += _linear(block.attention.qkv, prefix + "attn.Wqkv")
    pairs += _linear(block.attention.out, prefix + "attn.Wo")
    pairs += _norm_pairs(block.mlp_norm, prefix + "mlp_norm")
    pairs += _linear(block.wi, prefix + "mlp.Wi")
    pairs += _linear(block.wo, prefix + "mlp.Wo")
  pairs += _norm_pairs(encoder.final_norm, "final_norm")
  return (pairs + _linear(encoder.head_dense, HEAD[0]) +
          _norm_pairs(encoder.head_norm, HEAD[1]))


def numpy_reference(tensors, config, word_ids, mask, type_ids):
  """ModernBERT in float64 numpy from HF-named tensors: {"sequence_output"
  [B, S, H], and "pooled_output" [B, H] when the tensors hold the head}."""
  del type_ids
  t = {k: v.astype(np.float64) for k, v in tensors.items()}

  def linear(x, name):
    return x @ t[name + ".weight"].T + t.get(name + ".bias", 0.0)

  def norm(x, name):
    return reference.layer_norm(x, t[name + ".weight"],
                                t.get(name + ".bias", 0.0),
                                config.layer_norm_eps)

  b, s = word_ids.shape
  n = config.num_attention_heads
  d = config.hidden_size // n
  x = norm(t["embeddings.tok_embeddings.weight"][word_ids], "embeddings.norm")
  distance = np.abs(np.arange(s)[:, None] - np.arange(s)[None])      # [S, S]
  for i in range(config.num_hidden_layers):
    p = f"layers.{i}."
    h = x if i == 0 else norm(x, p + "attn_norm")
    q, k, v = linear(h, p + "attn.Wqkv").reshape(b, s, 3, n, d).transpose(
        2, 0, 3, 1, 4)                                               # [B,N,S,D]
    angles = np.arange(s)[:, None] * config.rope_theta(i) ** (
        -np.arange(0, d, 2) / d)[None]
    cos, sin = np.cos(np.tile(angles, 2)), np.sin(np.tile(angles, 2))
    turn = lambda y: np.concatenate([-y[..., d // 2:], y[..., :d // 2]], -1)
    q, k = q * cos + turn(q) * sin, k * cos + turn(k) * sin
    allowed = np.broadcast_to(mask[:, None, None, :] > 0, (b, 1, s, s))
    if not config.is_global(i):
      allowed = allowed & (distance <= config.local_attention // 2)
    scores = np.where(allowed, q @ k.transpose(0, 1, 3, 2) / math.sqrt(d),
                      -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, -1)
    x = x + linear(context, p + "attn.Wo")
    gate_input, gate = np.split(linear(norm(x, p + "mlp_norm"), p + "mlp.Wi"),
                                2, -1)
    x = x + linear(reference.activation(config.hidden_act, gate_input) * gate,
                   p + "mlp.Wo")
  x = norm(x, "final_norm")
  outputs = {"sequence_output": x}
  if HEAD[0] + ".weight" in t:
    m = mask[..., None].astype(np.float64)
    pooled = (x[:, 0] if config.classifier_pooling == "cls" else
              (x * m).sum(1) / m.sum(1))
    outputs["pooled_output"] = norm(reference.activation(
        config.classifier_activation, linear(pooled, HEAD[0])), HEAD[1])
  return outputs


FAMILY = encoders.EncoderFamily(
    name="modernbert", config_class=ModernBertConfig, build=build,
    hf_model_types=("modernbert",), hf_assignments=hf_assignments,
    # Its tokenizer is a tokenizer.json (BPE with its own special tokens):
    # declared, and refused in one line until bertexp reads it.
    tokenizers={"modernbert": tokenization.TokenizerSpec(
        "tokenizer_json", ("tokenizer.json",), {"do_lower_case": False},
        hf_tokenizer_class="PreTrainedTokenizerFast")},
    hf_prefix="model", numpy_reference=numpy_reference,
    hf_optional_sources=tuple(f"{layer}.{kind}" for layer in HEAD
                              for kind in ("weight", "bias")),
    hf_classes=("ModernBert",), hf_exports=False)
