"""Post-processing: final text recovery, the max-context rule, v2.0 null."""
import types

import numpy as np
import pytest

from bertexp.data import tokenization
from bertexp.tasks.squad import answers as sa
from bertexp.tasks.squad import data as squad


@pytest.mark.parametrize("predicted,original,expected", [
    ("steve smith", "Steve Smith's", "Steve Smith"),
    ("1895", "(1895-1943).", "1895"),
    ("cafe", "Café", "Café"),             # accent stripped: lengths equal? no -> original
    ("denver broncos", "Denver Broncos", "Denver Broncos"),
    ("nowhere", "Santa Clara", "Santa Clara"),
])
def test_final_text(predicted, original, expected):
  assert sa.final_text(predicted, original, do_lower_case=True) == expected


def _feature(words, start_window=0):
  """One window: [CLS] q [SEP] w0 w1 ... [SEP]; context tokens from index 3."""
  token_to_word = {3 + i: start_window + i for i in range(len(words))}
  return squad.SquadFeature(
      unique_id=0, example_index=0, window_index=0,
      input_word_ids=[2, 5, 3] + list(range(10, 10 + len(words))) + [3],
      input_mask=[1] * (len(words) + 4), input_type_ids=[0] * 3 + [1] * (len(words) + 1),
      token_to_word=token_to_word,
      token_is_max_context={p: True for p in token_to_word})


VOCAB = {i: f"w{i - 10}" for i in range(10, 20)}
VOCAB.update({2: "[CLS]", 3: "[SEP]", 5: "q"})
# What answer_question reads of a WordPiece tokenizer.
WORDPIECE = types.SimpleNamespace(
    vocab=VOCAB, pieces_text=tokenization.Tokenizer.pieces_text,
    splits_punctuation=True)


def test_best_span_and_rules():
  example = squad.SquadExample("q1", "q", ["W0", "W1", "W2", "W3"])
  feature = _feature(example.doc_tokens)
  start = np.full(8, -5.0)
  end = np.full(8, -5.0)
  start[4], end[5] = 3.0, 2.0                # w1..w2: the best span
  start[6], end[3] = 4.0, 4.0                # end before start: not allowed
  candidates, best, diff = sa.answer_question(
      example, [(feature, start, end)], WORDPIECE, do_lower_case=True)
  assert candidates[0].text == "W1 W2" and best.text == "W1 W2" and diff is None
  assert candidates[0].score == pytest.approx(5.0)
  # max_answer_length 1 forbids the 2-word span
  candidates, _, _ = sa.answer_question(
      example, [(feature, start, end)], WORDPIECE, max_answer_length=1)
  assert "W1 W2" not in [c.text for c in candidates]
  # a start without max context in this window is skipped
  feature.token_is_max_context[4] = False
  candidates, _, _ = sa.answer_question(example, [(feature, start, end)], WORDPIECE)
  assert candidates[0].text != "W1 W2"


def test_v2_null_score_and_threshold():
  example = squad.SquadExample("q1", "q", ["W0", "W1"])
  feature = _feature(example.doc_tokens)
  start = np.array([2.0, -9, -9, 1.0, -9, -9])
  end = np.array([2.0, -9, -9, 1.5, -9, -9])
  predictions, nbest, odds = sa.predict_answers(
      [example], [feature], {0: (start, end)}, WORDPIECE,
      version_2_with_negative=True, null_score_diff_threshold=0.0)
  # null 4.0 vs best span W0 (2.5): diff 1.5 > 0 -> no answer
  assert odds["q1"] == pytest.approx(1.5)
  assert predictions["q1"] == ""
  assert nbest["q1"][0]["text"] == ""
  predictions, _, _ = sa.predict_answers(
      [example], [feature], {0: (start, end)}, WORDPIECE,
      version_2_with_negative=True, null_score_diff_threshold=2.0)
  assert predictions["q1"] == "W0"
