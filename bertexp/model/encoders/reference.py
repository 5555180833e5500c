"""A float64 numpy forward pass of the BERT-shaped encoders, straight from
Hugging Face-named tensors: what a conversion checks its encoder against.

It reads the HF names, not bertexp's variables, so a tensor the converter
put in the wrong place shows as a difference. It shares the layer-name table
with the converter (bert.hf_layer_names); the independent check is
tests/golden's outputs that transformers computed.

Shape legend: B batch, S sequence length, E embedding width, H hidden size,
N heads, D = H / N, I intermediate size.
"""
import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def layer_norm_params(tensors, prefix):
  """(scale name, shift name): HF LayerNorm is weight/bias in new files,
  gamma/beta in old ones."""
  for scale, shift in (("weight", "bias"), ("gamma", "beta")):
    if f"{prefix}.{scale}" in tensors:
      return f"{prefix}.{scale}", f"{prefix}.{shift}"
  return f"{prefix}.weight", f"{prefix}.bias"


def hf_layer_names(i):
  """{bertexp's attribute of block i: Hugging Face's module name}."""
  p = f"encoder.layer.{i}."
  return {
      "query": p + "attention.self.query", "key": p + "attention.self.key",
      "value": p + "attention.self.value",
      "attention_output": p + "attention.output.dense",
      "attention_layer_norm": p + "attention.output.LayerNorm",
      "intermediate": p + "intermediate.dense", "output_dense": p + "output.dense",
      "output_layer_norm": p + "output.LayerNorm",
  }


def layer_norm(x, gamma, beta, eps):
  """LayerNorm over the last axis."""
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * gamma + beta


def activation(name, x):
  """The activation `name` (a config's hidden_act) in numpy."""
  name = name.lower()
  if name == "gelu":
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
  if name in ("gelu_tanh", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                  (x + 0.044715 * x ** 3)))
  if name == "relu":
    return np.maximum(x, 0)
  if name == "tanh":
    return np.tanh(x)
  return x / (1 + np.exp(-x))   # swish / silu


def forward(tensors, config, word_ids, mask, type_ids, *, position_ids=None,
            pooler_activation="tanh", layer_names=hf_layer_names,
            projection="embeddings_project", pooler="pooler.dense"):
  """The encoder's outputs in float64.

  Args:
    tensors: {HF name without the model prefix: array}; linear weights are
      [out, in]. The projection (factorised embeddings) and the pooler are
      used when present.
    config: the family's config (layer_norm_eps, num_attention_heads,
      hidden_size, num_hidden_layers, hidden_act).
    word_ids, mask, type_ids: int [B, S].
    position_ids: int [B, S] rows of the position table, or None for 0..S-1.
    pooler_activation: the pooler's activation name.
    layer_names: layer_names(i) -> {bertexp attribute: HF module} of block i
      (hf_layer_names' keys).
    projection, pooler: the HF modules of the embeddings' projection and
      the pooler's dense layer.

  Returns:
    {"sequence_output": [B, S, H]} and "pooled_output" [B, H] when the
    tensors have a pooler.
  """
  t = {k: v.astype(np.float64) for k, v in tensors.items()}
  eps = config.layer_norm_eps

  def linear(x, name):
    return x @ t[name + ".weight"].T + t[name + ".bias"]

  def norm(x, prefix):
    gamma, beta = layer_norm_params(tensors, prefix)
    return layer_norm(x, t[gamma], t[beta], eps)

  seq = word_ids.shape[1]
  positions = t["embeddings.position_embeddings.weight"]
  x = (t["embeddings.word_embeddings.weight"][word_ids] +
       (positions[:seq][None] if position_ids is None
        else positions[position_ids]) +
       t["embeddings.token_type_embeddings.weight"][type_ids])       # [B, S, E]
  x = norm(x, "embeddings.LayerNorm")
  if projection + ".weight" in t:
    x = linear(x, projection)                                        # [B, S, H]
  b, n = word_ids.shape[0], config.num_attention_heads
  d = config.hidden_size // n
  bias = (1.0 - mask[:, None, None, :]) * -10000.0                   # [B,1,1,S]
  for i in range(config.num_hidden_layers):
    names = layer_names(i)

    def heads(y):
      return y.reshape(b, seq, n, d).transpose(0, 2, 1, 3)           # [B,N,S,D]
    q, k, v = (heads(linear(x, names[p])) for p in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias       # [B,N,S,S]
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, seq, -1)  # [B, S, H]
    x = norm(x + linear(context, names["attention_output"]),
             names["attention_layer_norm"])
    inner = activation(config.hidden_act,
                       linear(x, names["intermediate"]))             # [B, S, I]
    x = norm(x + linear(inner, names["output_dense"]),
             names["output_layer_norm"])
  outputs = {"sequence_output": x}
  if pooler + ".weight" in t:
    outputs["pooled_output"] = activation(
        pooler_activation, linear(x[:, 0], pooler))                  # [B, H]
  return outputs
