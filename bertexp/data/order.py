"""The training data order: a pure function of (seed, epoch, position).

    records = training_records(files, counts, seed=7, window=10000, start=p)

Epoch e reads the files in an order drawn from (seed, e) (the file-level
shuffle of google-research/bert's pretraining input), then cuts the
concatenated stream into windows of `window` consecutive records and permutes
each window with a permutation drawn from (seed, e, window index) (the
example-level shuffle; a shuffle buffer of the same size mixes as locally).
Epochs follow each other without a gap, as `Dataset.repeat`.

Because nothing depends on what was read before, the stream can start at any
global position `start` (examples consumed so far, over all epochs) at the
cost of one window: whole files before the position are not opened, the
current file skips whole records up to the window's start (TFRecord skipping
reads record headers, not the examples), and only the current window is read
and permuted. `window=0` keeps the file order (no shuffle at all).

Every record carries `record_index`: its place in the files as listed
(file after file), the same in every epoch, for logs and for checking that a
resumed run saw exactly the data of an uninterrupted one.
"""
import json
import logging
import os

import tensorflow as tf

from bertexp.util import fileio

_NO_END = 2 ** 62


def count_records(files, cache_path=None):
  """[number of records of each file]. With `cache_path` (a JSON file in
  MODEL_DIR) the counts are read once per run: a resumed run reuses them,
  after checking that each file still has the size it had."""
  cached = {}
  if cache_path and tf.io.gfile.exists(cache_path):
    cached = fileio.read_json(cache_path)
  counts, entries = [], {}
  for path in files:
    size = tf.io.gfile.stat(path).length
    entry = cached.get(path)
    if entry and entry["bytes"] != size:
      raise ValueError(
          f"{path}: training data changed since this run started ({entry['bytes']}"
          f" bytes then, {size} now, see {cache_path}); the run cannot resume at "
          "its data position: restore the file or start a new MODEL_DIR")
    if not entry:
      records = int(tf.data.TFRecordDataset(path).batch(4096).reduce(
          tf.constant(0, tf.int64),
          lambda n, batch: n + tf.size(batch, tf.int64)))
      entry = {"bytes": size, "records": records}
    entries[path] = entry
    counts.append(entry["records"])
  if cache_path and entries != {p: cached.get(p) for p in entries}:
    fileio.write_json(cache_path, {**cached, **entries})
  return counts


def _permutation(size, key):
  return tf.random.experimental.stateless_shuffle(
      tf.range(size, dtype=tf.int64), seed=key)


def training_records(files, counts, *, seed, window, start=0):
  """An endless dataset of {"record": serialized, "record_index": int64} in
  the order of (seed, epoch, position), beginning at global position
  `start`. `counts`: the records of each file (`count_records`)."""
  total = sum(counts)
  if total == 0:
    raise ValueError(f"no training record in {', '.join(files)}")
  first_epoch, offset = divmod(int(start), total)
  names = tf.constant(files)
  sizes = tf.constant(counts, tf.int64)
  bases = tf.math.cumsum(sizes, exclusive=True)    # record_index of each file
  root = tf.constant([int(seed) % 2 ** 62, 0], tf.int64)

  # Plain TensorFlow code: tf.data need not convert it with autograph (nor
  # the pipeline's decode functions, marked the same way), which takes time
  # at every start.
  @tf.autograph.experimental.do_not_convert
  def epoch_records(epoch):
    key = tf.random.experimental.stateless_fold_in(root, epoch)
    order = (_permutation(len(files), key) if window and len(files) > 1
             else tf.range(len(files), dtype=tf.int64))
    epoch_sizes = tf.gather(sizes, order)
    consumed = tf.where(epoch == first_epoch, tf.constant(offset, tf.int64), 0)
    first_window = consumed // window if window else tf.constant(0, tf.int64)
    skipped = first_window * window if window else consumed
    before = tf.math.cumsum(epoch_sizes, exclusive=True)
    file_skip = tf.clip_by_value(skipped - before, 0, epoch_sizes)
    pieces = tf.data.Dataset.from_tensor_slices(
        (tf.gather(names, order), file_skip, epoch_sizes,
         tf.gather(bases, order))).filter(lambda _, skip, size, __: skip < size)
    records = pieces.flat_map(_file_records)
    if window:
      windows = tf.data.Dataset.zip(
          tf.data.Dataset.range(first_window, _NO_END), records.batch(window))
      records = windows.map(
          lambda index, batch: _permute_window(batch, key, index)).unbatch()
    return records.skip(consumed - skipped)

  return tf.data.Dataset.range(first_epoch, _NO_END).flat_map(epoch_records)


def _file_records(path, skip, size, base):
  return tf.data.Dataset.zip({
      "record": tf.data.TFRecordDataset(path).skip(skip),
      "record_index": tf.data.Dataset.range(base + skip, base + size)})


def _permute_window(batch, epoch_key, index):
  key = tf.random.experimental.stateless_fold_in(epoch_key, index + 1)
  order = _permutation(tf.shape(batch["record_index"], tf.int64)[0], key)
  return tf.nest.map_structure(lambda t: tf.gather(t, order), batch)


def resolve_seed(seed, share=None):
  """The data order's seed: `seed`, or a fresh random one in [0, 2**31)
  (stored in the checkpoint by the caller, so a resumed run keeps it).

  Args:
    seed: the run's SEED, or None to draw one.
    share: with several workers, a function that returns the chief's draw
      on every worker (`bertexp.train.strategy.chief_value`): each worker
      draws, and all take the chief's, so the cluster shards one order.
      Without it, a multi-worker run would shard a different permutation on
      each worker and train on some records twice and others never.
  Returns:
    The seed (int).
  """
  if seed is not None:
    return int(seed)
  drawn = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
  if share is not None:
    drawn = int(share(drawn))
  logging.info("data order seed %d (drawn by the chief: SEED is None)", drawn)
  return drawn


def describe(counts, window, start):
  """One log line: where in the data a run starts."""
  total = sum(counts)
  epoch, offset = divmod(int(start), total)
  return json.dumps({"epoch": epoch, "position_in_epoch": offset,
                     "epoch_size": total, "shuffle_window": window})
