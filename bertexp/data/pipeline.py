"""tf.data input pipelines over the prepared TFRecords.

Training: shard per input pipeline, shuffle (seeded), repeat, batch with
drop_remainder (static shapes for TPU). Evaluation: every real example once;
the tail is padded with `example_weight` 0 rows to a whole number of batches,
so TPUs keep static shapes and metrics still cover exactly the eval set.
"""
import math

import tensorflow as tf

MODEL_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")


def _record_spec(seq_length, label_dtype, label_names, id_name):
  spec = {name: tf.io.FixedLenFeature([seq_length], tf.int64)
          for name in MODEL_INPUTS}
  for name in label_names:
    spec[name] = tf.io.FixedLenFeature([], label_dtype)
  spec[id_name] = tf.io.FixedLenFeature([], tf.int64)
  return spec


def _decode(spec, label_names):
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


def list_files(file_pattern):
  patterns = file_pattern.split(",")
  files = []
  for pattern in patterns:
    matched = sorted(tf.io.gfile.glob(pattern.strip()))
    if not matched:
      raise FileNotFoundError(f"no TFRecord file matches {pattern!r}")
    files.extend(matched)
  return files


def make_dataset(file_pattern, *, seq_length, label_type, batch_size,
                 is_training, input_context=None, seed=None,
                 num_examples=None, shuffle_buffer=10000,
                 label_names=("label_ids",), id_name="example_id"):
  """Returns a dataset of (features, labels) batches of `batch_size`.

  batch_size is per replica when `input_context` is given (that is how
  `distribute_datasets_from_function` calls us), global otherwise.
  num_examples is required for evaluation (to size the padding).
  shuffle_buffer 0 keeps the file order (e.g. to compare strategies).
  Several label_names are stacked into labels [B, K] (SQuAD start/end).
  """
  label_dtype = tf.float32 if label_type == "float" else tf.int64
  spec = _record_spec(seq_length, label_dtype, label_names, id_name)
  files = list_files(file_pattern)
  num_pipelines = input_context.num_input_pipelines if input_context else 1
  pipeline_id = input_context.input_pipeline_id if input_context else 0
  dataset = tf.data.TFRecordDataset(files, num_parallel_reads=(
      tf.data.AUTOTUNE if is_training and len(files) > 1 else None))
  if not is_training:
    dataset = dataset.enumerate()            # (position, record)
  if num_pipelines > 1:
    dataset = dataset.shard(num_pipelines, pipeline_id)
  if is_training:
    if shuffle_buffer:
      dataset = dataset.shuffle(shuffle_buffer, seed=seed,
                                reshuffle_each_iteration=True)
    dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.map(_decode(spec, label_names),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)
  if num_examples is None:
    raise ValueError("evaluation needs num_examples to pad the last batch")
  dataset = dataset.batch(batch_size).map(
      with_positions(_decode(spec, label_names))).unbatch()
  return pad_and_batch_eval(
      dataset, num_examples=num_examples, batch_size=batch_size,
      input_context=input_context,
      padding=padding_element(seq_length, label_dtype, len(label_names),
                              id_name))


def with_positions(decode):
  """decode(records) -> decode((positions, records)) that adds
  features["position"]: each example's place in the whole eval set, so the
  host can put gathered outputs back in file order whatever the sharding
  (workers read interleaved shards)."""
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
                    id_name="example_id"):
  """A weight-0 (features, labels) element of a fine-tuning eval set."""
  features = {name: tf.zeros([seq_length], tf.int32) for name in MODEL_INPUTS}
  features[id_name] = tf.constant(-1, tf.int32)
  features["position"] = tf.constant(-1, tf.int32)
  features["example_weight"] = tf.constant(0.0)
  labels = tf.zeros([] if num_labels == 1 else [num_labels],
                    tf.float32 if label_dtype == tf.float32 else tf.int32)
  return features, labels


def eval_steps(num_examples, global_batch_size):
  return max(1, math.ceil(num_examples / global_batch_size))
