"""SQuAD scoring: the official v1.1 / v2.0 rules on hand-computed cases."""
import io
import json

import pytest

from bertexp import cli
from bertexp.tasks.squad import scoring as sm


def _dataset(questions, version="1.1"):
  """questions: [(id, [gold texts], is_impossible)]."""
  qas = [{"id": qid, "question": "q?", "is_impossible": impossible,
          "answers": [{"text": t, "answer_start": 0} for t in golds]}
         for qid, golds, impossible in questions]
  return {"version": version,
          "data": [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]}


def test_normalisation():
  assert sm.normalize_answer("The  Cat, sat!") == "cat sat"
  assert sm.normalize_answer("an apple a day") == "apple day"
  assert sm.normalize_answer("Theatre") == "theatre"       # article only as a word
  assert sm.normalize_answer("  A.  ") == ""


def test_f1_by_hand():
  # gold "the black cat" -> [black, cat]; pred "black dog" -> [black, dog]
  assert sm.f1_score("the black cat", "black dog", True) == pytest.approx(0.5)
  # precision 1/3, recall 1/1
  assert sm.f1_score("cat", "a cat sat down", True) == pytest.approx(2 * (1 / 3) / (4 / 3))
  assert sm.f1_score("", "", True) == 1.0      # v2.0: both empty
  assert sm.f1_score("", "", False) == 0.0     # v1.1: no common token
  assert sm.f1_score("", "cat", True) == 0.0


def test_v1_counts_missing_as_zero():
  data = _dataset([("q1", ["Denver Broncos", "the Broncos"], False),
                   ("q2", ["Santa Clara, California"], False),
                   ("q3", ["gold"], False)])
  preds = {"q1": "Broncos", "q2": "Santa Clara"}
  log = io.StringIO()
  result = sm.evaluate_v1(data, preds, log=log)
  # q1: EM 1 (vs "the Broncos"); q2: F1 = 2*(1*2/3)/(1+2/3) = 0.8; q3: 0
  assert result == {"exact_match": pytest.approx(100 / 3),
                    "f1": pytest.approx(100 * (1 + 0.8) / 3)}
  assert "Unanswered question q3 will receive score 0." in log.getvalue()


def test_v2_breakdown_threshold_and_best_threshold():
  data = _dataset([("a1", ["red"], False), ("a2", ["blue sky"], False),
                   ("n1", [], True), ("n2", [], True)], version="v2.0")
  preds = {"a1": "red", "a2": "sky", "n1": "", "n2": "green"}
  na = {"a1": 0.1, "a2": 0.6, "n1": 0.9, "n2": 0.4}
  result = sm.evaluate_v2(data, preds, na, na_prob_threshold=0.5)
  # threshold 0.5: a2 and n1 become "no answer": a1 1, a2 0, n1 1, n2 0 (green)
  assert result["exact"] == pytest.approx(50.0)
  assert result["f1"] == pytest.approx(50.0)
  assert result["total"] == 4
  assert result["HasAns_exact"] == pytest.approx(50.0)
  assert result["HasAns_total"] == 2 and result["NoAns_total"] == 2
  assert result["NoAns_exact"] == pytest.approx(50.0)
  # Sweep (odds ascending a1 .1, n2 .4, a2 .6, n1 .9) from 2 (no answers):
  # exact: +1 (a1) = 3 best@.1; -1 (n2) = 2; +0 (a2) = 2; n1 pred "" = 2.
  assert result["best_exact"] == pytest.approx(75.0)
  assert result["best_exact_thresh"] == pytest.approx(0.1)
  # f1: a2 "sky" vs "blue sky" = 2/3 -> 3 @.1, 2 @.4, 2.667 @.6 -> best 3 @ .1
  assert result["best_f1"] == pytest.approx(75.0)
  assert result["best_f1_thresh"] == pytest.approx(0.1)
  plain = sm.evaluate_v2(data, preds)       # no odds: nothing is thresholded
  assert plain["exact"] == pytest.approx(50.0) and "best_exact" not in plain


def test_cli_prints_official_json(tmp_path, capsys):
  data = tmp_path / "dev.json"
  data.write_text(json.dumps(_dataset([("a", ["x y"], False), ("b", [], True)],
                                      version="v2.0")))
  preds = tmp_path / "pred.json"
  preds.write_text(json.dumps({"a": "x", "b": ""}))
  assert cli.main(["evaluate-squad", str(data), str(preds)]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["exact"] == pytest.approx(50.0)
  assert out["f1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
  assert set(out) == {"exact", "f1", "total", "HasAns_exact", "HasAns_f1",
                      "HasAns_total", "NoAns_exact", "NoAns_f1", "NoAns_total"}


@pytest.mark.parametrize("data,preds,message", [
    ("{not json", {}, "dev.json: not valid JSON"),
    (json.dumps({"version": "1.1"}), {}, "no top-level 'data' list"),
    (json.dumps({"data": [{"paragraphs": [{"qas": [{"id": "a"}]}]}]}), {},
     "data[0].paragraphs[0].qas[0] has no 'answers'"),
    (json.dumps(_dataset([("a", ["x"], False)])), {"zz": "x"},
     "1 prediction id(s) are not questions of"),
])
def test_bad_input(tmp_path, capsys, data, preds, message):
  (tmp_path / "dev.json").write_text(data)
  (tmp_path / "pred.json").write_text(json.dumps(preds))
  code = cli.main(["evaluate-squad", str(tmp_path / "dev.json"),
                   str(tmp_path / "pred.json")])
  assert code == 2
  assert message in capsys.readouterr().err


def test_rethreshold_two_pass_in_one(tmp_path, capsys):
  data = _dataset([("a1", ["red"], False), ("a2", ["blue sky"], False),
                   ("n1", [], True), ("n2", [], True)], version="v2.0")
  nbest = {"a1": [{"text": "red"}], "a2": [{"text": ""}, {"text": "blue sky"}],
           "n1": [{"text": "x"}], "n2": [{"text": "green"}]}
  odds = {"a1": -3.0, "a2": -1.0, "n1": 2.0, "n2": 0.5}
  threshold, predictions = sm.rethreshold(data, nbest, odds)
  # answering a1 and a2 and abstaining on n1/n2 is perfect: threshold -1.0
  assert threshold == pytest.approx(-1.0)
  assert predictions == {"a1": "red", "a2": "blue sky", "n1": "", "n2": ""}
  for name, value in (("dev.json", data), ("nbest.json", nbest), ("odds.json", odds),
                      ("pred.json", {k: "" for k in odds})):
    (tmp_path / name).write_text(json.dumps(value))
  assert cli.main(["evaluate-squad", str(tmp_path / "dev.json"),
                   str(tmp_path / "pred.json"), "--na-prob-file",
                   str(tmp_path / "odds.json"), "--nbest-file",
                   str(tmp_path / "nbest.json"), "--na-prob-thresh", "-1.0",
                   f"--best_threshold_output={tmp_path / 'best.json'}"]) == 0
  out = capsys.readouterr().out
  scores = json.loads(out[out.index("{"):])
  assert scores["exact"] == pytest.approx(100.0)
