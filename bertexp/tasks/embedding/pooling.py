"""A sentence embedding from an encoder's token vectors: the pooling modes
sentence-transformers' Pooling module offers (mean over real tokens, the
first token, max over real tokens), then optional L2 normalisation.

Shape legend: B sentences, S tokens, H hidden size.
"""
import tensorflow as tf

MODES = ("mean", "cls", "max")


def pool(sequence_output, input_mask, mode="mean", normalize=False):
  """One vector per sentence.

  Args:
    sequence_output: float [B, S, H] token vectors.
    input_mask: int or bool [B, S], 1 on real tokens.
    mode: "mean" (average of the real tokens' vectors), "cls" (the first
      token's) or "max" (each dimension's largest over the real tokens).
    normalize: divide each vector by its L2 norm.
  Returns:
    float32 [B, H].
  Raises:
    ValueError: an unknown mode.
  """
  if mode not in MODES:
    raise ValueError(f"pooling mode {mode!r}: expected one of {list(MODES)}")
  x = tf.cast(sequence_output, tf.float32)                          # [B, S, H]
  real = tf.cast(input_mask, tf.float32)[:, :, tf.newaxis]          # [B, S, 1]
  if mode == "cls":
    pooled = x[:, 0]
  elif mode == "mean":
    # At least one token counted: an all-padding row gives zeros, not NaN.
    pooled = tf.reduce_sum(x * real, axis=1) / tf.maximum(
        tf.reduce_sum(real, axis=1), 1e-9)
  else:
    pooled = tf.reduce_max(tf.where(real > 0, x, x.dtype.min), axis=1)
  if normalize:
    # sentence-transformers' Normalize: x / max(||x||, 1e-12).
    pooled = pooled / tf.maximum(tf.norm(pooled, axis=-1, keepdims=True),
                                 1e-12)
  return pooled                                                      # [B, H]
