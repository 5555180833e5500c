"""serve_text's in-graph answer recovery (bertexp.tasks.squad.serving) on hand-made
logits: spans cut from the original text the way get_final_text cuts them."""
import os

import numpy as np
import pytest
import tensorflow as tf

from bertexp.data import tokenization
from bertexp.tasks.squad import serving as squad_serving
from conftest import MINILM_HF, requires_minilm

SPEC = {"max_seq_length": 64, "max_query_length": 16, "n_best_size": 20,
        "max_answer_length": 30, "version_2_with_negative": False,
        "null_score_diff_threshold": 0.0}


class _PeakAt:
  """Logits [B, S, 2] peaking where the ids are the chosen start/end tokens
  (a stand-in for a trained span head; the real one is in test_squad_task)."""

  def __init__(self, start_id, end_id, null=-100.0):
    self.start_id, self.end_id, self.null = start_id, end_id, null

  def __call__(self, inputs, training=False):
    ids = inputs["input_word_ids"]
    context = tf.cast(inputs["input_type_ids"], tf.float32)
    start = tf.where(ids == self.start_id, 10.0, 0.0) * context
    end = tf.where(ids == self.end_id, 10.0, 0.0) * context
    cls = tf.one_hot(tf.zeros_like(ids[:, 0]), tf.shape(ids)[1]) * self.null
    return tf.stack([start + cls, end + cls], axis=-1)


@pytest.fixture(scope="module")
def tokenizer():
  requires_minilm()
  return tokenization.Tokenizer(os.path.join(MINILM_HF, "vocab.txt"))


@pytest.mark.parametrize("context,start,end,expected", [
    ("He met Steve Smith's dog.", "steve", "smith", "Steve Smith"),
    ("Founded in Zürich (1990).", "zurich", "zurich", "Zürich"),
    ("Founded in Zürich (1990).", "1990", "1990", "1990"),
    ("It runs\tfast   and far.", "runs", "fast", "runs fast"),
])
def test_answer_text_from_original_context(tokenizer, context, start, end,
                                           expected):
  model = _PeakAt(tokenizer.token_to_id[start], tokenizer.token_to_id[end])
  out = squad_serving.answer(tokenizer, model, SPEC, tf.constant(["who?"]),
                            tf.constant([context]))
  assert out["answer"].numpy()[0].decode() == expected
  assert out["score"].numpy()[0] == pytest.approx(20.0)
  assert not out["context_truncated"].numpy()[0]


def test_spans_never_leave_the_context_and_respect_the_length(tokenizer):
  # The peaks sit in the question; the only context candidates are zeros.
  ids = tokenizer.token_to_id
  model = _PeakAt(ids["who"], ids["who"])
  out = squad_serving.answer(tokenizer, model, dict(SPEC, max_answer_length=1),
                            tf.constant(["who"]), tf.constant(["a b c"]))
  assert out["answer"].numpy()[0].decode() in {"a", "b", "c"}
  assert out["score"].numpy()[0] == pytest.approx(0.0)


def test_v2_null_answer_and_truncation(tokenizer):
  ids = tokenizer.token_to_id
  spec = dict(SPEC, version_2_with_negative=True, max_seq_length=12)
  long_context = "Steve Smith " + "word " * 30
  for null, expected in ((100.0, ""), (-100.0, "Steve Smith")):
    out = squad_serving.answer(tokenizer, _PeakAt(ids["steve"], ids["smith"], null),
                              spec, tf.constant(["who?"]),
                              tf.constant([long_context]))
    assert out["answer"].numpy()[0].decode() == expected
    assert out["context_truncated"].numpy()[0]
    np.testing.assert_allclose(out["null_score_diff"].numpy()[0],
                               2 * null - 20.0, atol=1e-4)
