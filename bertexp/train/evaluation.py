"""Evaluation in the one trainer: per-example outputs of every replica
gathered to the host, in the eval file's order, and the task's whole-set
metrics (F1, MCC, Spearman...) computed from them.

`Evaluation` is the orbit evaluator half of bertexp.train.trainer.Trainer
(which supplies task, model, strategy, settings, stop_requested, _trim and
eval_pad_to_multiple_of).
"""
import logging
import time

import numpy as np
import tensorflow as tf

from bertexp.util import orbit_import

orbit = orbit_import.orbit

# Evaluation and prediction report progress at most this often.
PROGRESS_SECONDS = 30


class Preempted(Exception):
  """A stop was requested (SIGTERM/SIGINT): training ended after a step."""


class Diverged(Exception):
  """max_consecutive_bad_steps steps in a row were skipped."""


def gather_replicas(value):
  """[B, ...] per replica -> [replicas * B, ...] on every replica.

  Every replica gets every replica's rows, so the host of any worker sees the
  whole global batch, not only its local shard. Built on a SUM all-reduce of
  one-hot placed copies: `all_gather` fails for MultiWorkerMirroredStrategy on
  tensors without a device. Values go through float32 (exact for ids and
  eval positions < 2^24).
  """
  context = tf.distribute.get_replica_context()
  replicas = context.num_replicas_in_sync
  place = tf.one_hot(context.replica_id_in_sync_group, replicas)   # [R]
  place = tf.reshape(place, [replicas] + [1] * value.shape.rank)
  spread = place * tf.cast(value, tf.float32)[tf.newaxis]         # [R, B, ...]
  summed = context.all_reduce(tf.distribute.ReduceOp.SUM, spread)
  merged = tf.reshape(summed, tf.concat([[-1], tf.shape(value)[1:]], 0))
  return tf.cast(merged, value.dtype)


def concatenate_batches(arrays):
  """Per-batch arrays [B, ...] -> one array. With dynamic padding, per-token
  outputs [B, L, ...] differ in L: shorter ones are padded to the longest
  (-inf for floats, e.g. span logits no answer can start at; 0 otherwise)."""
  width = max(a.shape[1] if a.ndim > 1 else 0 for a in arrays)
  padded = []
  for a in arrays:
    if a.ndim > 1 and a.shape[1] < width:
      fill = -np.inf if np.issubdtype(a.dtype, np.floating) else 0
      pad = [(0, 0), (0, width - a.shape[1])] + [(0, 0)] * (a.ndim - 2)
      a = np.pad(a, pad, constant_values=fill)
    padded.append(a)
  return np.concatenate(padded)


class Evaluation(orbit.AbstractEvaluator):
  """Runs the model over eval splits; see the module docstring."""

  def _eval_dataset(self, split):
    if split not in self._eval_datasets:
      self._eval_datasets[split] = self.strategy.distribute_datasets_from_function(
          lambda ctx: self.task.build_inputs(
              split, ctx,
              ctx.get_per_replica_batch_size(self.settings.eval_batch_size)))
    return self._eval_datasets[split]

  def _eval_replica_step(self, features, labels):
    features = self._trim(features, self.eval_pad_to_multiple_of)
    outputs = self.model(features, training=False)
    per_example = dict(self.task.eval_outputs(features, labels, outputs))
    if "position" in features:
      per_example["position"] = features["position"]
    if self.strategy.num_replicas_in_sync == 1:
      return per_example
    return {k: gather_replicas(v) for k, v in per_example.items()}

  def gather(self, split, num_steps=-1):
    """Runs the model over `split`; returns per-example numpy arrays."""
    if self._eval_step_fn is None:
      self._eval_step_fn = tf.function(
          lambda f, l: self.strategy.run(self._eval_replica_step, args=(f, l)),
          autograph=False)
    gathered = {}
    last_report = time.time()
    for i, (features, labels) in enumerate(self._eval_dataset(split)):
      if 0 <= num_steps <= i:
        break
      if time.time() - last_report > PROGRESS_SECONDS:
        last_report = time.time()
        logging.info("%s: %d batches of %d so far", split, i,
                     self.settings.eval_batch_size)
      if bool(self.stop_requested.numpy()):
        raise Preempted(f"stop requested during evaluation of {split!r}")
      outputs = self._eval_step_fn(features, labels)
      for key, value in outputs.items():
        # After all_gather the first local replica holds the global batch.
        local = self.strategy.experimental_local_results(value)[0]
        gathered.setdefault(key, []).append(local.numpy())
    gathered = {k: concatenate_batches(v) for k, v in gathered.items()}
    if "position" in gathered:
      # Back to the eval set's order (padding, position -1, first).
      order = np.argsort(gathered["position"], kind="stable")
      gathered = {k: v[order] for k, v in gathered.items()}
    return gathered

  def evaluate(self, num_steps):
    """All eval splits; metrics of extra splits are prefixed by their name."""
    results = {}
    for split in self.task.eval_splits():
      split_metrics = self.task.finalize_eval(self.gather(split, int(num_steps)))
      prefix = "" if split == "eval" else split.replace("eval_", "") + "/"
      results.update({prefix + k: v for k, v in split_metrics.items()})
    return results
