"""k-fold cross-validation splits of a training file (`prepare classification
--folds=K`): a seeded, stratified assignment of rows to folds, and the rows
of each fold's training and held-out parts."""
import dataclasses
import random
from typing import List, Optional, Sequence

from bertexp.data import readers


def assign(labels: Optional[Sequence], count: int, folds: int,
           seed: int) -> List[int]:
  """The fold of each of `count` rows: stratified by label (each label's
  rows shuffled with `seed` and dealt to the folds in turn, the deal
  continuing across labels so fold sizes differ by at most one); without
  labels (regression) the rows are shuffled and dealt alike.

  Raises:
    ValueError: fewer rows than folds, or folds < 2.
  """
  if folds < 2 or count < folds:
    raise ValueError(f"--folds={folds} needs at least 2 folds and as many "
                     f"training rows ({count})")
  rng = random.Random(seed)
  groups = {}
  for row in range(count):
    groups.setdefault(labels[row] if labels is not None else None,
                      []).append(row)
  assignment, turn = [0] * count, 0
  for key in sorted(groups, key=str):
    rows = groups[key]
    rng.shuffle(rows)
    for row in rows:
      assignment[row] = turn % folds
      turn += 1
  return assignment


def subset(rows: readers.Rows, indices: Sequence[int]) -> readers.Rows:
  """The rows at `indices`, their ids the original row numbers (so a fold's
  predictions map back to the training file)."""
  pick = lambda values: None if values is None else [values[i] for i in indices]
  return dataclasses.replace(
      rows, text_a=pick(rows.text_a), text_b=pick(rows.text_b),
      labels=pick(rows.labels), example_ids=[str(i) for i in indices],
      lines=pick(rows.lines), skipped=[])
