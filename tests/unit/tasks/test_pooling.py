"""Sentence embeddings from token vectors (bertexp/tasks/embedding/
pooling.py): each mode against numpy on padded rows, whose padding holds
values that would change every mode if it were read."""
import numpy as np
import pytest

from bertexp.tasks.embedding import pooling


def _rows():
  rng = np.random.default_rng(0)
  lengths = np.array([5, 2, 1])
  mask = (np.arange(5)[None] < lengths[:, None]).astype(np.int32)   # [3, 5]
  x = rng.normal(size=(3, 5, 4)).astype(np.float32)
  x[mask == 0] = 100.0            # padding: far above every real value
  return x, mask, lengths


@pytest.mark.parametrize("normalize", [False, True])
def test_each_mode_reads_real_tokens_only(normalize):
  x, mask, lengths = _rows()
  want = {"mean": np.stack([x[i, :n].mean(0) for i, n in enumerate(lengths)]),
          "cls": x[:, 0],
          "max": np.stack([x[i, :n].max(0) for i, n in enumerate(lengths)])}
  for mode, expected in want.items():
    if normalize:
      expected = expected / np.linalg.norm(expected, axis=-1, keepdims=True)
    got = pooling.pool(x, mask, mode, normalize).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6,
                               err_msg=mode)
    if normalize:
      np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, rtol=1e-6)


def test_an_all_padding_row_is_zeros_and_a_bad_mode_is_named():
  x, mask, _ = _rows()
  mask[2] = 0
  assert np.all(pooling.pool(x, mask, "mean").numpy()[2] == 0)
  with pytest.raises(ValueError, match=r"pooling mode 'sum': expected one of "
                                       r"\['mean', 'cls', 'max'\]"):
    pooling.pool(x, mask, "sum")
