"""ModernBERT's sliding-window layers compute their band only
(modernbert.banded_attention): equal to masking the full score matrix, on
lengths that are not a multiple of the window, with padding tails longer
than the window (rows that see no real key)."""
import numpy as np
import pytest
import tensorflow as tf

from bertexp.model.encoders import modernbert


def _full(q, k, v, mask, half):
  """The masked full-matrix attention ([B, N, S, S] scores)."""
  seq = q.shape[2]
  near = np.abs(np.arange(seq)[:, None] - np.arange(seq)[None]) <= half
  allowed = (mask[:, None, None, :] > 0) & near[None, None]
  scores = tf.where(allowed, tf.matmul(q, k, transpose_b=True), -1e9)
  return tf.matmul(tf.nn.softmax(scores, -1), v).numpy()


@pytest.mark.parametrize("seq,half", [(37, 3), (16, 4), (5, 8), (64, 1)])
def test_banded_attention_equals_the_masked_full_matrix(seq, half):
  rng = np.random.default_rng(seq + half)
  q, k, v = (tf.constant(rng.normal(size=[2, 3, seq, 8]), tf.float32)
             for _ in range(3))
  mask = np.ones([2, seq], np.float32)
  mask[1, min(seq - 1, 2 + half):] = 0          # a tail longer than the window
  banded = modernbert.banded_attention(q, k, v, tf.constant(mask), half)
  expected = _full(q, k, v, mask, half)
  np.testing.assert_allclose(banded.numpy(), expected, atol=1e-5)
  # The window matters where the sequence is longer than it: a wider one
  # gives other outputs (a window wider than the sequence is global).
  if seq > half + 1:
    assert np.abs(_full(q, k, v, mask, half + 1) - expected).max() > 1e-2
