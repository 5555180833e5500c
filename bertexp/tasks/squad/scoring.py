"""SQuAD scoring with the official v1.1 and v2.0 evaluation scripts' rules.

v1.1: EM/F1 as the max over gold answers; a question without a prediction
  scores 0 and counts in the total. Output keys: exact_match, f1.
v2.0: unanswerable questions have the gold answer ""; a question without a
  prediction is skipped (with a message); with null odds, a prediction whose
  odds exceed --na-prob-thresh counts as "no answer"; the best-threshold
  search reports best_exact/best_f1 and their thresholds. Output keys:
  exact, f1, total, HasAns_*, NoAns_*, best_*.
Scores are percentages, as the official scripts print them.
"""
import collections
import functools
import io
import re
import string
import sys

from bertexp.tasks.squad.squad_json import load_json

_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


@functools.lru_cache(maxsize=1 << 16)
def normalize_answer(text):
  """Lower case, drop punctuation and articles, fold whitespace."""
  text = text.lower().translate(_DROP_PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def exact_score(gold, prediction):
  """1 when the normalised answers are equal, else 0 (the official rule)."""
  return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_score(gold, prediction, empty_matches_empty):
  """Token-overlap F1. v2.0 scores two empty answers 1 (empty_matches_empty);
  v1.1 scores any pair without a common token 0."""
  gold_tokens = normalize_answer(gold).split()
  pred_tokens = normalize_answer(prediction).split()  # cached: cheap per gold
  if empty_matches_empty and (not gold_tokens or not pred_tokens):
    return float(gold_tokens == pred_tokens)
  common = collections.Counter(gold_tokens) & collections.Counter(pred_tokens)
  same = sum(common.values())
  if same == 0:
    return 0.0
  precision, recall = same / len(pred_tokens), same / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def _questions(dataset):
  for article in dataset["data"]:
    for paragraph in article.get("paragraphs", []):
      for qa in paragraph.get("qas", []):
        yield qa


def check_prediction_ids(dataset, predictions, data_file="dataset"):
  """Raises ValueError naming prediction ids that are not questions of the data."""
  known = {qa["id"] for qa in _questions(dataset)}
  unknown = sorted(set(predictions) - known)
  if unknown:
    raise ValueError(f"{len(unknown)} prediction id(s) are not questions of "
                     f"{data_file}: {unknown[:5]}")


def evaluate_v1(dataset, predictions, log=sys.stderr):
  """The official v1.1 script's result: {"exact_match", "f1"} in percent."""
  exact = f1 = total = 0
  for qa in _questions(dataset):
    total += 1
    if qa["id"] not in predictions:
      print(f"Unanswered question {qa['id']} will receive score 0.", file=log)
      continue
    golds = [a["text"] for a in qa["answers"]]
    prediction = predictions[qa["id"]]
    exact += max(exact_score(g, prediction) for g in golds)
    f1 += max(f1_score(g, prediction, empty_matches_empty=False) for g in golds)
  return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def _raw_scores_v2(dataset, predictions, log):
  exact, f1, has_answer = {}, {}, {}
  for qa in _questions(dataset):
    qid = qa["id"]
    has_answer[qid] = bool(qa["answers"])
    golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
    golds = golds or [""]
    if qid not in predictions:
      print(f"Missing prediction for {qid}", file=log)
      continue
    prediction = predictions[qid]
    exact[qid] = max(exact_score(g, prediction) for g in golds)
    f1[qid] = max(f1_score(g, prediction, empty_matches_empty=True) for g in golds)
  return exact, f1, has_answer


def _apply_threshold(scores, na_probs, has_answer, threshold):
  return {qid: (float(not has_answer[qid]) if na_probs[qid] > threshold else s)
          for qid, s in scores.items()}


def _summary(exact, f1, qids=None):
  qids = list(exact) if qids is None else [q for q in qids if q in exact]
  total = len(qids)
  if not total:
    return {"exact": 0.0, "f1": 0.0, "total": 0}
  return {"exact": 100.0 * sum(exact[q] for q in qids) / total,
          "f1": 100.0 * sum(f1[q] for q in qids) / total, "total": total}


def _best_threshold(predictions, scores, na_probs, has_answer):
  """Sweeps the null-odds threshold, lowest odds first, as the official
  script: start from "no answer everywhere" (every unanswerable question
  right), then let each question answer in turn."""
  score = best = sum(1 for has in has_answer.values() if not has)
  best_threshold = 0.0
  for qid in sorted(na_probs, key=lambda q: na_probs[q]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      score += scores[qid]
    elif predictions[qid]:
      score -= 1
    if score > best:
      best, best_threshold = score, na_probs[qid]
  return 100.0 * best / len(scores), best_threshold


def evaluate_v2(dataset, predictions, na_probs=None, na_prob_threshold=1.0,
                log=sys.stderr):
  """The official v2.0 script's result: exact, f1, total, HasAns_* and NoAns_*
  and, with null odds, the best thresholds (percentages)."""
  with_odds = na_probs is not None
  na_probs = na_probs if with_odds else {q: 0.0 for q in predictions}
  exact_raw, f1_raw, has_answer = _raw_scores_v2(dataset, predictions, log)
  missing = [q for q in exact_raw if q not in na_probs]
  if missing:
    raise ValueError(f"{len(missing)} question(s) have a prediction but no null "
                     f"odds: {missing[:5]}")
  exact = _apply_threshold(exact_raw, na_probs, has_answer, na_prob_threshold)
  f1 = _apply_threshold(f1_raw, na_probs, has_answer, na_prob_threshold)
  result = _summary(exact, f1)
  for prefix, wanted in (("HasAns", True), ("NoAns", False)):
    qids = [q for q, has in has_answer.items() if has == wanted]
    if qids:
      result.update({f"{prefix}_{k}": v
                     for k, v in _summary(exact, f1, qids).items()})
  if with_odds and exact_raw:
    result["best_exact"], result["best_exact_thresh"] = _best_threshold(
        predictions, exact_raw, na_probs, has_answer)
    result["best_f1"], result["best_f1_thresh"] = _best_threshold(
        predictions, f1_raw, na_probs, has_answer)
  return result


def is_v2(dataset):
  """v2.0 files say "v2.0" and/or hold is_impossible questions."""
  if str(dataset.get("version", "")).lstrip("v").startswith("2"):
    return True
  return any(qa.get("is_impossible") for qa in _questions(dataset))


def evaluate_files(data_file, pred_file, na_prob_file=None,
                   na_prob_threshold=1.0):
  """The official script for the dataset's version (v2.0 also when null odds
  are given); returns its result dict."""
  dataset = load_json(data_file, "dataset")
  predictions = load_json(pred_file, "predictions")
  check_prediction_ids(dataset, predictions, data_file)
  if is_v2(dataset) or na_prob_file:
    na_probs = load_json(na_prob_file, "null odds") if na_prob_file else None
    return evaluate_v2(dataset, predictions, na_probs, na_prob_threshold)
  return evaluate_v1(dataset, predictions)


def rethreshold(dataset, nbest, null_odds, *, nbest_file="n-best",
                na_prob_file="null odds"):
  """google-research's two-pass v2.0 recipe in one step: the threshold that
  maximises F1 on `dataset`, and the predictions it gives.

  Args:
    dataset: the SQuAD v2.0 dataset (checked).
    nbest: {qid: [{"text": ...}, ...]} as written by predict.
    null_odds: {qid: null score - best non-null score}.
    nbest_file, na_prob_file: their files' names, for errors.
  Returns:
    (threshold, predictions).
  Raises:
    ValueError: the two files do not cover the same questions, or name
      questions the dataset does not have.
  """
  if set(nbest) != set(null_odds):
    missing = sorted(set(nbest) ^ set(null_odds))[:3]
    raise ValueError(f"{nbest_file} and {na_prob_file} cover different "
                     f"questions (e.g. {missing})")
  if not nbest:
    raise ValueError(f"{nbest_file}: no questions")
  check_prediction_ids(dataset, nbest, nbest_file)
  best_text = {qid: next((c["text"] for c in candidates if c["text"]), "")
               for qid, candidates in nbest.items()}
  # Score the non-null answers; the sweep decides where "no answer" wins.
  scores = evaluate_v2(dataset, best_text, null_odds, log=io.StringIO())
  threshold = scores["best_f1_thresh"]
  return threshold, {qid: (text if null_odds[qid] <= threshold else "")
                     for qid, text in best_text.items()}
