"""Fast tf.train.Example serialisation for fixed-length numeric features.

Building one `tf.train.Example` per row in Python costs ~75 us; encoding the
protobuf wire format for all rows at once in numpy costs a few us per row.
The bytes are a valid Example: `tf.io.parse_example` reads them (tested).

Wire format used (proto3 field numbers of example.proto):
  Example.features(1) -> Features.feature(1): map entries {key(1), value(2)}
  Feature.float_list(2) / int64_list(3) -> value(1), packed.
"""
import numpy as np
import tensorflow as tf

from bertexp.util import fileio

_LEN = 2  # wire type "length-delimited"


def _tag(field):
  return bytes([(field << 3) | _LEN])


def _varint(n):
  out = bytearray()
  while True:
    byte = n & 0x7F
    n >>= 7
    if n:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


def _length_prefixed(field, payload):
  return _tag(field) + _varint(len(payload)) + payload


def _packed_varints(values):
  """int [N, K] -> list of N byte strings, each the packed varints of a row."""
  v = values.astype(np.int64).view(np.uint64)                     # two's complement
  n, k = v.shape
  chunks = np.zeros([n, k, 10], np.uint8)
  count = np.ones([n, k], np.int64)
  rest = v.copy()
  for i in range(10):
    chunks[:, :, i] = (rest & np.uint64(0x7F)).astype(np.uint8)
    rest = rest >> np.uint64(7)
    more = rest > 0
    chunks[:, :, i] |= (more * 0x80).astype(np.uint8)
    count += more
    if not more.any():
      break
  keep = np.arange(10)[None, None, :] < count[:, :, None]          # [N, K, 10]
  stream = chunks[keep].tobytes()
  row_ends = np.cumsum(count.sum(axis=1))
  starts = np.concatenate([[0], row_ends[:-1]])
  return [stream[s:e] for s, e in zip(starts, row_ends)]


def _packed_floats(values):
  raw = values.astype("<f4")
  return [row.tobytes() for row in raw]


def serialize_examples(features):
  """dict name -> numpy [N, K] (int or float) -> list of N serialised Examples."""
  names = sorted(features)
  n = len(features[names[0]])
  per_feature = []
  for name in names:
    values = np.asarray(features[name])
    if values.ndim == 1:
      values = values[:, None]
    if len(values) != n:
      raise ValueError(f"feature {name!r} has {len(values)} rows, expected {n}")
    if np.issubdtype(values.dtype, np.floating):
      payloads, list_field = _packed_floats(values), 2
    else:
      payloads, list_field = _packed_varints(values), 3
    key = _length_prefixed(1, name.encode())
    entries = []
    for payload in payloads:
      value_list = _length_prefixed(1, payload)
      feature = _length_prefixed(list_field, value_list)
      entries.append(_length_prefixed(1, key + _length_prefixed(2, feature)))
    per_feature.append(entries)
  examples = []
  for parts in zip(*per_feature):
    examples.append(_length_prefixed(1, b"".join(parts)))
  return examples


class RecordWriter:
  """Writes a TFRecord file under a temporary name; `commit()` renames it."""

  def __init__(self, path):
    self.path = path
    self.tmp = fileio.temp_name(path)
    self.count = 0
    self._writer = tf.io.TFRecordWriter(self.tmp)

  def write_batch(self, features):
    self.write_serialized(serialize_examples(features))

  def write_serialized(self, examples):
    for record in examples:
      self._writer.write(record)
    self.count += len(examples)

  def commit(self):
    self._writer.close()
    tf.io.gfile.rename(self.tmp, self.path, overwrite=True)

  def abort(self):
    self._writer.close()
    if tf.io.gfile.exists(self.tmp):
      tf.io.gfile.remove(self.tmp)
