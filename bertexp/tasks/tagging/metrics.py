"""Tagging outputs on the host: windows merged back per sentence, entities,
and entity-level scores computed by seqeval (the reference implementation;
its default mode follows conlleval's rules: an I-X after O or after another
type starts an entity).
"""
from typing import Dict, List, Sequence

import numpy as np


def _seqeval():
  """seqeval's metrics and sequence_labeling modules, imported when scores
  are computed: seqeval imports scikit-learn (0.4 s), which a process that
  only trains or serves need not pay."""
  from seqeval import metrics  # pylint: disable=g-import-not-at-top
  from seqeval.metrics import sequence_labeling  # pylint: disable=g-import-not-at-top
  return metrics, sequence_labeling


def merge_windows(gathered: Dict[str, np.ndarray], num_sentences: int,
                  sentence_lengths: Sequence[int]):
  """Per-window predictions -> per-sentence, per-word predictions.

  Args:
    gathered: "weights" [N], "sentence_id" [N], "word_index" [N, S] (1 +
      word index where that window scores the word, else 0),
      "predictions" [N, S] label ids, "scores" [N, S] their probabilities.
    num_sentences: sentences in the split.
    sentence_lengths: words per sentence.
  Returns:
    (label ids, scores): lists of per-sentence int / float arrays, one entry
    per word (label 0 = O, score 0 for a word no window scored).
  """
  labels = [np.zeros(n, np.int64) for n in sentence_lengths]
  scores = [np.zeros(n, np.float32) for n in sentence_lengths]
  real = np.nonzero(gathered["weights"] > 0)[0]
  for row in real:
    sentence = int(gathered["sentence_id"][row])
    if not 0 <= sentence < num_sentences:
      raise ValueError(f"window of sentence {sentence}: the split has "
                       f"{num_sentences} sentences (records and sentences "
                       "file disagree: prepare them again)")
    word_index = gathered["word_index"][row]
    positions = np.nonzero(word_index > 0)[0]
    words = word_index[positions].astype(np.int64) - 1
    labels[sentence][words] = gathered["predictions"][row][positions]
    scores[sentence][words] = gathered["scores"][row][positions]
  return labels, scores


def entity_scores(gold: List[List[str]], predicted: List[List[str]],
                  entity_types: Sequence[str]) -> Dict[str, float]:
  """Entity-level micro precision/recall/F1, per type, and token accuracy.

  Args:
    gold, predicted: per sentence, per word tags.
    entity_types: the types to report (a type absent from both gets 0).
  Returns:
    {"precision", "recall", "f1", "accuracy", "f1_<TYPE>",
     "precision_<TYPE>", "recall_<TYPE>", "support_<TYPE>"}.
  """
  seqeval_metrics, _ = _seqeval()
  result = {"accuracy": float(seqeval_metrics.accuracy_score(gold, predicted))}
  report = seqeval_metrics.classification_report(
      gold, predicted, output_dict=True, zero_division=0)
  micro = report.get("micro avg", {})
  result.update(precision=float(micro.get("precision", 0.0)),
                recall=float(micro.get("recall", 0.0)),
                f1=float(micro.get("f1-score", 0.0)))
  for entity_type in entity_types:
    row = report.get(entity_type, {})
    result[f"f1_{entity_type}"] = float(row.get("f1-score", 0.0))
    result[f"precision_{entity_type}"] = float(row.get("precision", 0.0))
    result[f"recall_{entity_type}"] = float(row.get("recall", 0.0))
    result[f"support_{entity_type}"] = int(row.get("support", 0))
  return result


def token_accuracy(gold: List[List[str]], predicted: List[List[str]]):
  """Share of words whose tag is right (plain tagging such as POS)."""
  return {"accuracy": float(_seqeval()[0].accuracy_score(gold, predicted))}


def entities(tags: Sequence[str], scores: Sequence[float], text: str,
             offsets: Sequence[Sequence[int]]) -> List[dict]:
  """A sentence's entities with character offsets into its text.

  Args:
    tags: per word tags; scores: per word probabilities of those tags.
    text: the sentence; offsets: each word's [start, end) in it.
  Returns:
    [{"text", "type", "start", "end", "score"}], score = the mean of the
    entity's word scores; entities as seqeval (conlleval rules) reads them.
  """
  found = []
  for entity_type, first, last in _seqeval()[1].get_entities(list(tags)):
    start, end = int(offsets[first][0]), int(offsets[last][1])
    found.append({"text": text[start:end], "type": entity_type,
                  "start": start, "end": end,
                  "score": round(float(np.mean(scores[first:last + 1])), 6)})
  return found
