"""Start/end logits -> answer texts, with google-research/bert's rules.

Per question: the n_best start and end positions of every window; a span is
kept when both ends are context tokens, start <= end, it is at most
max_answer_length pieces long and its start has maximal context in that
window. For v2.0 the null score (start + end logit at [CLS]) of the window
where it is lowest competes with the spans. The answer text is recovered
from the original context, keeping its case and punctuation.
"""
import collections
import dataclasses
import functools
import math
import unicodedata

import numpy as np


@dataclasses.dataclass
class Candidate:
  """One n-best answer: its text and its start and end logits."""
  text: str
  start_logit: float
  end_logit: float

  @property
  def score(self):
    return self.start_logit + self.end_logit


@functools.lru_cache(maxsize=None)
def _is_punctuation(ch):
  cp = ord(ch)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(ch).startswith("P")


class _CharTable(dict):
  """A str.translate table filled on first sight of each character, so the
  per-character Python work happens once per distinct character."""

  def __init__(self, rule):
    super().__init__()
    self.rule = rule

  def __missing__(self, code):
    self[code] = self.rule(chr(code))
    return self[code]


# Punctuation -> " p " (split apart); combining marks (accents after NFD) -> "".
_SPACE_PUNCTUATION = _CharTable(lambda c: f" {c} " if _is_punctuation(c) else c)
_DROP_MARKS = _CharTable(lambda c: "" if unicodedata.category(c) == "Mn" else c)


def _normalised_pieces(text, do_lower_case):
  """The text as the tokenizer's pre-WordPiece words (lower case, accents
  stripped, punctuation apart), joined by spaces."""
  if do_lower_case:
    text = text.lower()
    if not text.isascii():
      text = unicodedata.normalize("NFD", text).translate(_DROP_MARKS)
  return " ".join(text.translate(_SPACE_PUNCTUATION).split())


@functools.lru_cache(maxsize=1 << 16)
def final_text(predicted, original, do_lower_case, splits_punctuation=True):
  """The span of `original` that the (normalised) `predicted` text covers.

  E.g. predicted "steve smith", original "Steve Smith's" -> "Steve Smith".
  Falls back to `original` when the two cannot be aligned char by char
  (ignoring spaces), e.g. when normalisation changed the length.

  Args:
    predicted: the pieces' text (tokenizer.pieces_text).
    original: the whitespace words the pieces came from, joined by spaces.
    do_lower_case: the tokenizer's.
    splits_punctuation: the tokenizer puts punctuation apart (WordPiece:
      `predicted` is found as words of the spaced original, as
      google-research's get_final_text); False (SentencePiece: pieces run
      across punctuation) finds it by its characters, spaces ignored.
  Returns:
    The original text of the answer.
  """
  normalised = _normalised_pieces(original, do_lower_case)
  if normalised == predicted:
    return original          # the span covers whole words: nothing to trim
  if (len(original) - original.count(" ") !=
      len(normalised) - normalised.count(" ")):
    return original
  if splits_punctuation:
    start = normalised.find(predicted)
    first_k = start - normalised.count(" ", 0, start)
  else:
    first_k = start = normalised.replace(" ", "").find(
        predicted.replace(" ", ""))
  if start < 0 or not predicted.strip():
    return original
  # The k-th non-space character of one is the k-th of the other.
  last_k = first_k + len(predicted) - predicted.count(" ") - 1
  return original[_nth_non_space(original, first_k):
                  _nth_non_space(original, last_k) + 1]


def _nth_non_space(text, k):
  """Index in `text` of its k-th (0-based) character that is not a space."""
  position = 0
  for word in text.split(" "):
    if k < len(word):
      return position + k
    k -= len(word)
    position += len(word) + 1
  raise IndexError(k)


def _top(logits, n):
  """Indices of the n largest logits, largest first."""
  logits = np.asarray(logits)
  if n < len(logits):
    part = np.argpartition(-logits, n - 1)[:n]
  else:
    part = np.arange(len(logits))
  return part[np.argsort(-logits[part], kind="stable")].tolist()


def answer_question(example, windows, tokenizer, *, n_best_size=20,
                    max_answer_length=30, do_lower_case=True,
                    version_2_with_negative=False):
  """The n-best answers of one question.

  Args:
    example: the SquadExample.
    windows: [(feature, start_logits [S], end_logits [S])] of its windows.
    tokenizer: the one that made the windows (its vocab, pieces_text and
      splits_punctuation).
    n_best_size, max_answer_length, do_lower_case, version_2_with_negative:
      run_squad's.
  Returns:
    (n-best candidates, best, null score diff or None).
  """
  spans, null = [], None   # spans: per window (scores, starts, ends) arrays
  for feature, start_logits, end_logits in windows:
    if version_2_with_negative:
      score = start_logits[0] + end_logits[0]
      if null is None or score < null.score:
        null = Candidate("", float(start_logits[0]), float(end_logits[0]))
    starts = np.array(_top(start_logits, n_best_size))                # [n]
    ends = np.array(_top(end_logits, n_best_size))                    # [n]
    # A span starts at a context token with maximal context in this window
    # and ends at a context token, within max_answer_length.
    good_start = np.array([feature.token_is_max_context.get(int(p), False)
                           for p in starts])
    good_end = np.array([int(p) in feature.token_to_word for p in ends])
    length = ends[None, :] - starts[:, None] + 1                      # [n, n]
    ok = (good_start[:, None] & good_end[None, :] & (length >= 1) &
          (length <= max_answer_length))
    i, j = np.nonzero(ok)
    spans.append((start_logits[starts[i]] + end_logits[ends[j]], starts[i],
                  ends[j], np.full(len(i), len(spans))))
  candidates, seen = [], set()
  if spans:
    scores, starts, ends, window = (np.concatenate(x) for x in zip(*spans))
    for k in np.argsort(-scores, kind="stable"):
      if len(candidates) >= n_best_size:
        break
      feature, start_logits, end_logits = windows[window[k]]
      s, e = int(starts[k]), int(ends[k])
      pieces = [tokenizer.vocab[i] for i in feature.input_word_ids[s:e + 1]]
      words = example.doc_tokens[feature.token_to_word[s]:
                                 feature.token_to_word[e] + 1]
      text = final_text(tokenizer.pieces_text(pieces), " ".join(words),
                        do_lower_case, tokenizer.splits_punctuation)
      if text in seen:
        continue
      seen.add(text)
      candidates.append(Candidate(text, float(start_logits[s]),
                                  float(end_logits[e])))
  if null is not None:
    candidates.append(null)
    candidates.sort(key=lambda c: -c.score)
    candidates = candidates[:max(n_best_size, 1)]
  if not candidates:
    # No valid span in any window: the answer is "" (google-research writes
    # the word "empty"; "" is what the exported serve_text returns too).
    candidates = [Candidate("", 0.0, 0.0)]
  best_non_null = next((c for c in candidates if c.text), None)
  diff = None
  if version_2_with_negative:
    diff = (null.score - best_non_null.score) if best_non_null else math.inf
  return candidates, best_non_null, diff


def probabilities(candidates):
  """Softmax of the candidates' scores (start + end logit), in their order."""
  scores = np.array([c.score for c in candidates], np.float64)
  exp = np.exp(scores - scores.max())
  return exp / exp.sum()


def predict_answers(examples, features, logits_by_unique_id, tokenizer, *,
                    n_best_size=20, max_answer_length=30, do_lower_case=True,
                    version_2_with_negative=False, null_score_diff_threshold=0.0):
  """-> (predictions {qid: text}, nbest {qid: [..]}, null_odds {qid: diff})."""
  by_example = collections.defaultdict(list)
  for feature in features:
    if feature.unique_id in logits_by_unique_id:
      start, end = logits_by_unique_id[feature.unique_id]
      by_example[feature.example_index].append((feature, start, end))
  predictions, nbest, null_odds = {}, {}, {}
  for index, example in enumerate(examples):
    candidates, best, diff = answer_question(
        example, by_example.get(index, []), tokenizer, n_best_size=n_best_size,
        max_answer_length=max_answer_length, do_lower_case=do_lower_case,
        version_2_with_negative=version_2_with_negative)
    probs = probabilities(candidates)
    nbest[example.qid] = [
        {"text": c.text, "probability": float(p), "start_logit": c.start_logit,
         "end_logit": c.end_logit} for c, p in zip(candidates, probs)]
    if version_2_with_negative:
      null_odds[example.qid] = float(diff)
      predictions[example.qid] = (best.text if best is not None and
                                  diff <= null_score_diff_threshold else "")
    else:
      predictions[example.qid] = candidates[0].text
  return predictions, nbest, null_odds
