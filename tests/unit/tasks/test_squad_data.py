"""SQuAD reading and windowing (run_squad's rules) on hand cases and the real
SQuAD v1.1 dev file."""
import json
import os

import pytest

from bertexp.data import tokenization
from bertexp.tasks.squad import data as squad
from conftest import MINILM_HF, REPO, requires_minilm

DEV = os.path.join(REPO, ".cache", "squad", "dev-v1.1.json")


def test_split_context_offsets():
  tokens, offsets = squad.split_context("The  cat\tsat.")
  assert tokens == ["The", "cat", "sat."]
  assert offsets == [0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]


def test_doc_windows_and_max_context():
  assert squad.doc_windows(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
  assert squad.doc_windows(3, 4, 2) == [(0, 3)]
  windows = squad.doc_windows(10, 4, 2)
  # token 3: window 0 -> min(3, 0); window 1 -> min(1, 2)=1: window 1 wins
  assert squad.is_max_context(windows, 1, 3)
  assert not squad.is_max_context(windows, 0, 3)
  assert squad.is_max_context(windows, 0, 0)


def _write(tmp_path, qas, context="Denver won the game in 2016 at Santa Clara."):
  path = tmp_path / "squad.json"
  path.write_text(json.dumps({"version": "1.1", "data": [
      {"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}))
  return str(path)


def test_answer_not_found_is_skipped_and_counted(tmp_path):
  path = _write(tmp_path, [
      {"id": "ok", "question": "Who won?",
       "answers": [{"text": "Denver", "answer_start": 0}]},
      {"id": "moved", "question": "Where?",
       "answers": [{"text": "Santa Clara", "answer_start": 3}]}])
  examples, stats = squad.read_examples(path, is_training=True,
                                        version_2_with_negative=False)
  assert [e.qid for e in examples] == ["ok"]
  assert stats.skipped_answer_not_found == 1 and stats.skipped_ids == ["moved"]
  assert (examples[0].start_word, examples[0].end_word) == (0, 0)


@pytest.mark.parametrize("qa,version_2,message", [
    ({"id": "a", "question": "q", "answers": [{"text": "Denver", "answer_start": 99}]},
     False, "lies outside the 43-character context"),
    ({"id": "a", "answers": []}, False, "missing field 'question'"),
    ({"id": "a", "question": "q", "answers": []}, False, "needs one answer"),
    ({"id": "a", "question": "q", "is_impossible": True, "answers": []}, False,
     "pass --version_2_with_negative"),
    ({"id": "a", "question": "q", "answers": [{"text": "Denver", "answer_start": 0}]},
     True, "missing 'is_impossible'"),
])
def test_bad_input(tmp_path, qa, version_2, message):
  with pytest.raises(ValueError, match=message):
    squad.read_examples(_write(tmp_path, [qa]), is_training=True,
                        version_2_with_negative=version_2)


def test_malformed_json(tmp_path):
  path = tmp_path / "bad.json"
  path.write_text("{\"data\": [")
  with pytest.raises(ValueError, match="bad.json: not valid JSON"):
    squad.read_examples(str(path), is_training=True, version_2_with_negative=False)


def test_real_dev_answers_land_on_their_tokens():
  requires_minilm()
  assert os.path.exists(DEV), "make test fetches SQuAD (tools/demo_data.py fetch)"
  examples, stats = squad.read_examples(DEV, is_training=True,
                                        version_2_with_negative=False)
  assert stats.questions == 10570 and len(examples) == 10570
  tok = tokenization.Tokenizer(os.path.join(MINILM_HF, "vocab.txt"))
  subset = examples[:400]
  features = squad.convert_examples(subset, tok, max_seq_length=128,
                                    doc_stride=64, max_query_length=32,
                                    is_training=True)
  assert all(len(f.input_word_ids) == 128 for f in features)
  answered = [f for f in features if f.start_position > 0]
  exact = 0
  for f in answered:
    example = subset[f.example_index]
    span = f.input_word_ids[f.start_position:f.end_position + 1]
    assert f.input_type_ids[f.start_position] == 1          # inside the context
    answer = list(tok.tokenize([example.answer_text])[0])
    exact += span == answer
    words = {f.token_to_word[p] for p in range(f.start_position, f.end_position + 1)}
    assert min(words) >= example.start_word and max(words) <= example.end_word
  # Every question's answer is inside at least one window of its example.
  assert {f.example_index for f in answered} == set(range(len(subset)))
  assert exact / len(answered) > 0.95


@pytest.mark.parametrize("num_tokens,max_tokens,stride", [(10, 4, 2), (50, 7, 3),
                                                           (9, 9, 4), (31, 8, 8)])
def test_vectorised_max_context_equals_rule(num_tokens, max_tokens, stride):
  windows = squad.doc_windows(num_tokens, max_tokens, stride)
  best = squad.best_windows(windows, num_tokens)
  for position in range(num_tokens):
    for index in range(len(windows)):
      assert (best[position] == index) == squad.is_max_context(
          windows, index, position)


@pytest.mark.parametrize("context,answer", [
    ("He said: \u201cIt\u2019s  over\u201d\t(finally).", "It\u2019s  over"),
    ("Caf\u00e9 na\u00efve\u00a0r\u00e9sum\u00e9 costs $12.50!", "$12.50"),
    ("\u5317\u4eac\u662f\u9996\u90fd\u3002 Beijing is big.", "\u5317\u4eac"),
    ("Line one.\nLine\u202ftwo  ends here.", "two  ends"),
])
def test_span_mapping_with_punctuation_unicode_whitespace(tmp_path, context, answer):
  requires_minilm()
  start = context.index(answer)
  path = _write(tmp_path, [{"id": "x", "question": "what?",
                            "answers": [{"text": answer, "answer_start": start}]}],
                context=context)
  examples, stats = squad.read_examples(path, is_training=True,
                                        version_2_with_negative=False)
  assert stats.skipped_answer_not_found == 0
  tok = tokenization.Tokenizer(os.path.join(MINILM_HF, "vocab.txt"))
  (feature,) = squad.convert_examples(examples, tok, max_seq_length=64,
                                     doc_stride=32, max_query_length=8,
                                     is_training=True)
  span = feature.input_word_ids[feature.start_position:feature.end_position + 1]
  assert span == list(tok.tokenize([answer])[0])
