"""The training order (bertexp.data.order): each epoch a permutation of every
record, a pure function of (seed, epoch, position), resumable at any
position without reading what came before."""
import json

import numpy as np
import pytest
import tensorflow as tf

from bertexp.data import order

SIZES = [7, 13, 5]   # three files; 25 records


@pytest.fixture
def files(tmp_path):
  paths = []
  for f, size in enumerate(SIZES):
    path = str(tmp_path / f"part-{f}.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
      for i in range(size):
        writer.write(f"{f}:{i}".encode())
    paths.append(path)
  return paths


def _indices(files, start, count, seed=3, window=4):
  stream = order.training_records(files, SIZES, seed=seed, window=window,
                                  start=start)
  return [int(x["record_index"]) for x in stream.take(count)]


def _records(files, start, count, seed=3, window=4):
  stream = order.training_records(files, SIZES, seed=seed, window=window,
                                  start=start)
  return [x["record"].numpy().decode() for x in stream.take(count)]


def test_each_epoch_is_a_permutation_of_every_record(files):
  stream = _indices(files, 0, 100)
  for epoch in range(4):
    assert sorted(stream[25 * epoch:25 * (epoch + 1)]) == list(range(25))
  assert stream[:25] != list(range(25))            # shuffled
  assert stream[:25] != stream[25:50]              # differently each epoch


def test_record_index_names_the_record(files):
  names = _records(files, 0, 25)
  indices = _indices(files, 0, 25)
  bases = np.cumsum([0] + SIZES)
  for name, index in zip(names, indices):
    f, i = map(int, name.split(":"))
    assert index == bases[f] + i


def test_any_start_continues_the_same_stream(files):
  whole = _indices(files, 0, 80)
  for start in (1, 3, 4, 7, 12, 24, 25, 26, 31, 49, 50, 51, 77):
    assert _indices(files, start, 80 - start) == whole[start:], start


def test_files_are_shuffled_at_the_file_level(files):
  bases = np.cumsum([0] + SIZES)
  opening_files = set()
  for epoch in range(8):
    # An epoch's first window (4 records) comes from its first file.
    window = _indices(files, 25 * epoch, 4, window=4)
    of_file = set(np.searchsorted(bases, window, side="right") - 1)
    assert len(of_file) == 1
    opening_files |= of_file
  assert len(opening_files) > 1   # epochs open with different files


def test_seed_changes_the_order_and_window_zero_keeps_file_order(files):
  assert _indices(files, 0, 25, seed=3) != _indices(files, 0, 25, seed=4)
  assert _indices(files, 0, 30, window=0) == list(range(25)) + list(range(5))


def test_counts_are_cached_and_a_changed_file_is_an_error(files, tmp_path):
  cache = str(tmp_path / "counts.json")
  assert order.count_records(files, cache) == SIZES
  with open(cache) as f:
    cached = json.load(f)
  assert [cached[p]["records"] for p in files] == SIZES
  with tf.io.TFRecordWriter(files[1]) as writer:
    writer.write(b"only one record now")
  with pytest.raises(ValueError, match="training data changed"):
    order.count_records(files, cache)


def test_no_record_is_an_error(tmp_path):
  empty = str(tmp_path / "empty.tfrecord")
  with tf.io.TFRecordWriter(empty):
    pass
  with pytest.raises(ValueError, match="no training record"):
    order.training_records([empty], [0], seed=1, window=4)
