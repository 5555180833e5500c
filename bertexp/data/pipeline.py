"""tf.data input pipelines over the prepared TFRecords.

Training: the records in the order of `bertexp.data.order` (a pure function of
seed, epoch and position, so a resumed run continues where its checkpoint
was taken), sharded per input pipeline, batched with drop_remainder (static
shapes for TPU); features["record_index"] names each example's record. Evaluation: every real example once;
the tail is padded with `example_weight` 0 rows to a whole number of batches,
so TPUs keep static shapes and metrics still cover exactly the eval set.
"""
import dataclasses
import math
import re
from typing import Optional

import tensorflow as tf

from bertexp.data import order as order_lib

MODEL_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")


def _record_spec(seq_length, label_dtype, label_names, id_name,
                 float_features=None, int_features=()):
  spec = {name: tf.io.FixedLenFeature([seq_length], tf.int64)
          for name in MODEL_INPUTS}
  for name in int_features:
    spec[name] = tf.io.FixedLenFeature([], tf.int64)
  for name, width in (float_features or {}).items():
    spec[name] = tf.io.FixedLenFeature([width], tf.float32)
  for name in label_names:
    spec[name] = tf.io.FixedLenFeature([], label_dtype)
  spec[id_name] = tf.io.FixedLenFeature([], tf.int64)
  return spec


def _decode(spec, label_names):
  @tf.autograph.experimental.do_not_convert
  def decode(serialized):
    parsed = tf.io.parse_example(serialized, spec)
    # TPUs have no int64 matmul/gather path; the model wants int32 anyway.
    parsed = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v
              for k, v in parsed.items()}
    labels = [parsed.pop(name) for name in label_names]
    labels = labels[0] if len(labels) == 1 else tf.stack(labels, -1)  # [B(, K)]
    parsed["example_weight"] = tf.ones_like(parsed[MODEL_INPUTS[0]][:, 0],
                                            tf.float32)
    return parsed, labels
  return decode


def record_decoder(seq_length, label_type, label_names=("label_ids",),
                   id_name="example_id", float_features=None,
                   int_features=()):
  """decode(serialized [B]) -> (features, labels) of `bertexp prepare`'s
  fine-tuning records; `float_features` ({name: width}) adds float features
  records may carry (teacher outputs), `int_features` scalar int features
  (a window's document_id)."""
  label_dtype = tf.float32 if label_type == "float" else tf.int64
  return _decode(_record_spec(seq_length, label_dtype, label_names, id_name,
                              float_features, int_features), label_names)


def check_training_files(file_pattern, decode, *, config, label_ranges=None,
                         source="the meta data", sample=1000):
  """Stops before training when the first `sample` records of a training
  file disagree with the configuration: a file that is not TFRecord (or is
  damaged), records of another layout or sequence length than `source`
  says, token ids outside the model's vocab_size, segment ids outside its
  type_vocab_size (where its encoder reads them), labels outside `label_ranges` ({name: (low, high)}: low
  <= label < high; "label" for a single label tensor) or not finite. Errors
  name the file and the record."""
  for path in list_files(file_pattern):
    records = tf.data.TFRecordDataset(path).take(sample).batch(sample)
    try:
      batch = next(iter(records), None)
      if batch is None:
        raise ValueError(f"{path}: no records")
      features, labels = decode(batch)
    except tf.errors.DataLossError as e:
      raise ValueError(f"{path}: not a TFRecord file, or damaged "
                       f"({_first_line(e)})") from None
    except tf.errors.InvalidArgumentError as e:
      raise ValueError(f"{path}: records do not match {source} "
                       f"({_first_line(e)})") from None
    _check_range(path, "token id", features["input_word_ids"], 0,
                 config.vocab_size, "the model's vocab_size")
    if config.reads_type_ids:
      _check_range(path, "segment id", features["input_type_ids"], 0,
                   config.type_vocab_size, "the model's type_vocab_size")
    for name, values in (labels.items() if isinstance(labels, dict)
                         else [("label", labels)]):
      if values.dtype.is_floating and not bool(
          tf.reduce_all(tf.math.is_finite(values))):
        raise ValueError(f"{path}: {name} of record "
                         f"{_first_bad(~tf.math.is_finite(values))} is not "
                         "finite")
      if name in (label_ranges or {}):
        _check_range(path, name, values, *label_ranges[name], source)


def _first_line(error):
  return str(error.message if hasattr(error, "message") else error).strip() \
      .splitlines()[0]


def _first_bad(mask):
  mask = tf.reshape(mask, [tf.shape(mask)[0], -1])
  return int(tf.where(tf.reduce_any(mask, axis=1))[0, 0])


def _check_range(path, what, values, low, high, limit):
  bad = (values < low) | (values >= high)
  if bool(tf.reduce_any(bad)):
    record = _first_bad(bad)
    value = tf.boolean_mask(values, bad)[0].numpy()
    raise ValueError(f"{path}: record {record} has {what} {value}, outside "
                     f"[{low}, {high}) of {limit}")


# A shard of a sharded output: PREFIX-00003-of-00008.
_SHARD = re.compile(r"^(.*)-(\d{5})-of-(\d{5})$")


def shard_name(prefix, index, count):
  """PREFIX-00003-of-00008: shard `index` of `count`."""
  return f"{prefix}-{index:05d}-of-{count:05d}"


def shard_pattern(prefix, count):
  """The glob of all `count` shards of PREFIX."""
  return f"{prefix}-?????-of-{count:05d}"


def _check_shard_sets(files):
  """Raises FileNotFoundError when a matched shard's set is incomplete on
  disk (an interrupted copy or write): PREFIX-00001-of-00004 with
  PREFIX-00003-of-00004 missing."""
  checked = set()
  for path in files:
    found = _SHARD.match(path)
    if not found or (found.group(1), found.group(3)) in checked:
      continue
    prefix, count = found.group(1), int(found.group(3))
    checked.add((prefix, found.group(3)))
    present = set(tf.io.gfile.glob(shard_pattern(prefix, count)))
    missing = [shard_name(prefix, i, count) for i in range(count)
               if shard_name(prefix, i, count) not in present]
    if missing:
      raise FileNotFoundError(
          f"{path}: {len(missing)} of its {count} shards are missing "
          f"(first: {missing[0]}); an incomplete copy or write?")


def list_files(file_pattern):
  """The files of a comma-separated list of glob patterns, each sorted.

  Raises:
    FileNotFoundError: a pattern matches no file, or a matched shard
      (PREFIX-00001-of-00004) has shards of its set missing.
  """
  patterns = file_pattern.split(",")
  files = []
  for pattern in patterns:
    matched = sorted(tf.io.gfile.glob(pattern.strip()))
    if not matched:
      raise FileNotFoundError(f"no TFRecord file matches {pattern!r}")
    files.extend(matched)
  _check_shard_sets(files)
  return files


@dataclasses.dataclass(frozen=True)
class TrainOrder:
  """Where the training stream starts: `start` examples of the global stream
  already consumed, in the order drawn from `seed`. `counts_cache`: a JSON
  file (in MODEL_DIR) keeping the files' record counts across restarts.
  `group_by_length`: see `group_by_length`."""
  seed: int = 0
  start: int = 0
  counts_cache: str = None
  group_by_length: bool = False


def train_order_or_default(train_order: Optional[TrainOrder],
                           seed: Optional[int]) -> TrainOrder:
  """`train_order`, or `seed` (0 when None) from the start of the stream."""
  return train_order or TrainOrder(seed=seed or 0)


# Hugging Face's group_by_length: megabatches of 50 global batches.
MEGABATCH_BATCHES = 50


def group_by_length(records, decode_batch, megabatch, start):
  """Length-grouped order (Hugging Face's `group_by_length`): the shuffled
  record stream cut into megabatches of `megabatch` examples counted from
  the stream's beginning, each decoded and sorted by real length
  (input_mask), longest first, so consecutive batches hold similar lengths
  and dynamic padding cuts more. `records` must start at the megabatch
  boundary at or before `start`; the examples before `start` are dropped,
  so a resumed run continues the uninterrupted run's order. Returns single
  decoded (features, labels) examples."""
  @tf.autograph.experimental.do_not_convert
  def decode_sorted(batch):
    features, labels = decode_batch(batch)
    lengths = tf.reduce_sum(tf.cast(features["input_mask"], tf.int32), 1)
    order = tf.argsort(-lengths, stable=True)
    take = lambda t: tf.gather(t, order)
    return (tf.nest.map_structure(take, features),
            tf.nest.map_structure(take, labels))
  dataset = records.batch(megabatch).map(decode_sorted).unbatch()
  return dataset.skip(start % megabatch)


def training_batches(file_pattern, decode, *, batch_size, input_context=None,
                     train_order=None, shuffle_window=10000):
  """(features, labels) batches of the training stream for this input
  pipeline: `decode(serialized [B]) -> (features, labels)`, plus
  features["record_index"] [B]. See `bertexp.data.order`."""
  train_order = train_order or TrainOrder()
  files = list_files(file_pattern)
  counts = order_lib.count_records(files, train_order.counts_cache)
  index_dtype = tf.int32 if sum(counts) < 2 ** 31 else tf.int64
  replicas = input_context.num_replicas_in_sync if input_context else 1
  megabatch = MEGABATCH_BATCHES * batch_size * replicas
  start = train_order.start
  if train_order.group_by_length:
    start -= start % megabatch
  dataset = order_lib.training_records(
      files, counts, seed=train_order.seed, window=shuffle_window,
      start=start)

  @tf.autograph.experimental.do_not_convert
  def decode_batch(batch):
    features, labels = decode(batch["record"])
    features["record_index"] = tf.cast(batch["record_index"], index_dtype)
    return features, labels
  if train_order.group_by_length:   # grouped over the global stream
    dataset = group_by_length(dataset, decode_batch, megabatch,
                              train_order.start)
  if input_context and input_context.num_input_pipelines > 1:
    dataset = dataset.shard(input_context.num_input_pipelines,
                            input_context.input_pipeline_id)
  dataset = dataset.batch(batch_size, drop_remainder=True)
  if not train_order.group_by_length:
    dataset = dataset.map(decode_batch, num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=True)
  return dataset.prefetch(tf.data.AUTOTUNE)


def make_dataset(file_pattern, *, seq_length, label_type, batch_size,
                 is_training, input_context=None, train_order=None,
                 num_examples=None, shuffle_buffer=10000,
                 label_names=("label_ids",), id_name="example_id",
                 float_features=None, int_features=()):
  """Returns a dataset of (features, labels) batches of `batch_size`.

  batch_size is per replica when `input_context` is given (that is how
  `distribute_datasets_from_function` calls us), global otherwise.
  num_examples is required for evaluation (to size the padding).
  Training: `train_order` (TrainOrder) says the seed and the start;
  shuffle_buffer is the shuffle window (0 keeps the file order, e.g. to
  compare strategies). Several label_names are stacked into labels [B, K]
  (SQuAD start/end). float_features, int_features: see record_decoder.
  """
  decode = record_decoder(seq_length, label_type, label_names, id_name,
                          float_features, int_features)
  if is_training:
    return training_batches(
        file_pattern, decode, batch_size=batch_size,
        input_context=input_context, train_order=train_order,
        shuffle_window=shuffle_buffer)
  dataset = tf.data.TFRecordDataset(list_files(file_pattern)).enumerate()
  if input_context and input_context.num_input_pipelines > 1:
    dataset = dataset.shard(input_context.num_input_pipelines,
                            input_context.input_pipeline_id)
  if num_examples is None:
    raise ValueError("evaluation needs num_examples to pad the last batch")
  label_dtype = tf.float32 if label_type == "float" else tf.int64
  dataset = dataset.batch(batch_size).map(
      with_positions(decode)).unbatch()
  return pad_and_batch_eval(
      dataset, num_examples=num_examples, batch_size=batch_size,
      input_context=input_context,
      padding=padding_element(seq_length, label_dtype, len(label_names),
                              id_name, int_features))


def with_positions(decode):
  """decode(records) -> decode((positions, records)) that adds
  features["position"]: each example's place in the whole eval set, so the
  host can put gathered outputs back in file order whatever the sharding
  (workers read interleaved shards)."""
  @tf.autograph.experimental.do_not_convert
  def decode_with_positions(positions, serialized):
    features, labels = decode(serialized)
    features["position"] = tf.cast(positions, tf.int32)
    return features, labels
  return decode_with_positions


def pad_and_batch_eval(dataset, *, num_examples, batch_size, input_context,
                       padding):
  """(features, labels) elements of this pipeline's shard -> batches, padded
  with copies of `padding` (a weight-0 element) so every pipeline runs the
  same number of full steps.

  `dataset` holds this pipeline's share of the `num_examples` examples: those
  at positions pipeline_id, pipeline_id + num_pipelines, ... (shard after
  any `take`), so every example is evaluated exactly once on any number of
  replicas and workers, and every replica gets a full batch.
  """
  num_pipelines = input_context.num_input_pipelines if input_context else 1
  pipeline_id = input_context.input_pipeline_id if input_context else 0
  replicas = input_context.num_replicas_in_sync if input_context else 1
  per_pipeline = batch_size * (replicas // num_pipelines)
  steps = eval_steps(num_examples, batch_size * replicas)
  mine = len(range(pipeline_id, num_examples, num_pipelines))
  filler = tf.data.Dataset.from_tensors(padding).repeat(
      max(steps * per_pipeline - mine, 0))
  dataset = dataset.concatenate(filler).batch(batch_size, drop_remainder=True)
  return dataset.prefetch(tf.data.AUTOTUNE)


def padding_element(seq_length, label_dtype, num_labels=1,
                    id_name="example_id", int_features=()):
  """A weight-0 (features, labels) element of a fine-tuning eval set."""
  features = {name: tf.zeros([seq_length], tf.int32) for name in MODEL_INPUTS}
  features.update({name: tf.constant(-1, tf.int32) for name in int_features})
  features[id_name] = tf.constant(-1, tf.int32)
  features["position"] = tf.constant(-1, tf.int32)
  features["example_weight"] = tf.constant(0.0)
  labels = tf.zeros([] if num_labels == 1 else [num_labels],
                    tf.float32 if label_dtype == tf.float32 else tf.int32)
  return features, labels


def trimmed_length(input_mask, multiple):
  """Dynamic padding's length for a batch: its longest real sequence
  (input_mask [B, S]) rounded up to a multiple of `multiple`, at most S and
  at least `multiple`."""
  longest = tf.reduce_max(tf.reduce_sum(tf.cast(input_mask, tf.int32), axis=1))
  rounded = (longest + multiple - 1) // multiple * multiple
  return tf.minimum(tf.shape(input_mask)[1], tf.maximum(rounded, multiple))


def trim_to(features, length):
  """features with every [B, S] model input cut to [B, length]. Padded
  positions are masked out of attention, so no real position's output
  changes: a batch of short sentences costs short-sentence compute."""
  return dict(features, **{k: features[k][:, :length] for k in MODEL_INPUTS})


def eval_steps(num_examples, global_batch_size):
  """Batches that cover `num_examples` once (the last one padded)."""
  return max(1, math.ceil(num_examples / global_batch_size))
