"""Windows over long sequences (bertexp.data.windows), without preparing a
file: every piece lies in a window, the last window reaches the end, and
each piece is scored by the window that gives it the most context (SQuAD's
rule), checked against a direct count. The prepared records are checked in
tests/e2e/test_long_documents.py and tests/e2e/test_tagging.py."""
import itertools

import pytest

from bertexp.data import windows


@pytest.mark.parametrize("length,width,stride,want", [
    (5, 8, 4, [0]),                  # fits in one window
    (8, 8, 4, [0]),                  # exactly one window
    (9, 8, 4, [0, 4]),
    (20, 8, 4, [0, 4, 8, 12]),
    (20, 8, 8, [0, 8, 16]),
])
def test_window_starts(length, width, stride, want):
  assert windows.window_starts(length, width, stride) == want


def _layouts(longest, widest):
  """(length, width, stride, starts) of every sequence up to `longest`
  pieces in windows up to `widest` wide, at every stride up to the width."""
  for length, width, stride in itertools.product(
      range(1, longest + 1), range(2, widest + 1), range(1, widest + 1)):
    if stride <= width:
      yield length, width, stride, windows.window_starts(length, width, stride)


def test_windows_cover_every_piece_and_the_last_reaches_the_end():
  for length, width, stride, starts in _layouts(39, 9):
    covered = {p for s in starts for p in range(s, min(s + width, length))}
    assert covered == set(range(length)), (length, width, stride)
    assert starts[-1] + width >= length
    assert all(b - a == stride for a, b in zip(starts, starts[1:]))


def _most_context(position, starts, width, length):
  """The window index a direct count picks: the largest min(left, right)
  context of `position`, the earliest such window on a tie."""
  scored = [(min(position - s, min(s + width, length) - 1 - position), -k)
            for k, s in enumerate(starts) if s <= position < s + width]
  return -max(scored)[1]


def test_each_piece_is_owned_by_its_window_of_most_context():
  for length, width, stride, starts in _layouts(29, 8):
    for position in range(length):
      assert windows.owning_window(position, starts, width, length) == (
          _most_context(position, starts, width, length)), (
              length, width, stride, position)


def test_owning_window_prefers_the_centre():
  # Windows [0, 8) and [4, 12): piece 6 has 1 piece after it in the first
  # and 2 before it in the second.
  assert windows.owning_window(6, [0, 4], 8, 12) == 1
  assert windows.owning_window(5, [0, 4], 8, 12) == 0   # 2 vs 1
  assert windows.owning_window(1, [0, 4], 8, 12) == 0   # only in the first


@pytest.mark.parametrize("args,message", [
    ((2, None, None), "max_seq_length 2 leaves no room for [CLS] a piece [SEP]"),
    ((600, 512, None), "max_seq_length 600 is above the model's "
                       "max_position_embeddings 512"),
    ((128, 512, 0), "doc_stride 0 must be in [1, 126]"),
    ((128, 512, 127), "doc_stride 127 must be in [1, 126]"),
])
def test_lengths_that_cannot_window_are_named(args, message):
  with pytest.raises(ValueError) as error:
    windows.check_lengths(*args)
  assert str(error.value).startswith(message)


def test_lengths_that_can_window_pass():
  windows.check_lengths(3, None, None)
  windows.check_lengths(512, 512, 1)
  windows.check_lengths(128, 512, 126)
