"""Overlapping windows over a long sequence of word pieces, and which window
scores each position (SQuAD's max-context rule). Shared by `prepare
tagging` (long sentences) and `prepare classification --doc_stride` (long
documents)."""
from typing import List, Optional


def check_lengths(max_seq_length: int, max_position_embeddings: Optional[int],
                  doc_stride: Optional[int]) -> None:
  """Raises ValueError unless max_seq_length holds [CLS], a piece and [SEP],
  fits the model's positions, and doc_stride (when given) lies in
  [1, max_seq_length - 2]."""
  if max_seq_length < 3:
    raise ValueError(f"max_seq_length {max_seq_length} leaves no room for "
                     "[CLS] a piece [SEP]")
  if max_position_embeddings and max_seq_length > max_position_embeddings:
    raise ValueError(f"max_seq_length {max_seq_length} is above the model's "
                     f"max_position_embeddings {max_position_embeddings}")
  if doc_stride is not None and not 1 <= doc_stride <= max_seq_length - 2:
    raise ValueError(f"doc_stride {doc_stride} must be in [1, "
                     f"{max_seq_length - 2}] (max_seq_length - 2)")


def window_starts(length: int, width: int, stride: int) -> List[int]:
  """Start of each window of `width` pieces, `stride` apart, the last one
  reaching the end of `length` pieces (one window when they fit)."""
  starts = [0]
  while starts[-1] + width < length:
    starts.append(starts[-1] + stride)
  return starts


def owning_window(position: int, starts: List[int], width: int,
                  length: int) -> int:
  """Index of the window where piece `position` has the most context (the
  smaller of its distances to the window's ends); ties go to the earlier
  window."""
  best, best_score = 0, -1
  for k, start in enumerate(starts):
    end = min(start + width, length)
    if start <= position < end:
      score = min(position - start, end - 1 - position)
      if score > best_score:
        best, best_score = k, score
  return best
