"""The one trainer/evaluator: every task trains and evaluates through it.

    trainer = Trainer(task=task, model=model, optimizer=opt, strategy=s,
                      settings=StepSettings(global_batch_size=32, ...), ...)
    controller = orbit.Controller(trainer=trainer, evaluator=trainer, ...)

One train step: the loss denominators summed over replicas; forward and
backward under a tape (XLA-compiled with jit_compile: no collective inside);
loss normalised over the global batch (bertexp.tasks.base.Task.loss_weights);
loss scaling for float16; gradients summed across replicas, clipped by their
global norm, applied. A step whose loss or gradient norm is not finite (or
whose loss is above `loss_upper_bound`) changes no weight and no optimizer
slot: it is counted in `TrainingState.nonfinite_steps` and logged with its
step and record indices (float16 overflow skips, decided by the
LossScaleOptimizer, are counted the same way). The training loop ends early,
after the step in flight, when a stop is requested (`stop_requested`, set by
a signal) or after `max_consecutive_bad_steps` bad steps in a row: `train`
then raises `Preempted` or `Diverged` for the run to handle. Evaluation
gathers per-example outputs to the host and lets the task compute whole-set
metrics (F1, MCC, Spearman...).
"""
import ctypes
import dataclasses
import logging
import sys
import time
from typing import Optional

import tensorflow as tf
import tf_keras

from bertexp.data import pipeline
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.train import evaluation
from bertexp.train import layer_summaries
from bertexp.util import orbit_import
from bertexp.util import private_apis

orbit = orbit_import.orbit

# The run's stop exceptions, raised by train() and gather().
Preempted = evaluation.Preempted
Diverged = evaluation.Diverged


# Every training input iterator this process made, never destroyed: not
# when its trainer is gone, nor when the interpreter exits (one reference
# the interpreter does not own; the operating system frees the memory with
# the process). Destroying a distributed iterator that ran for a while can
# block for a minute or more: tf.data's autotuning thread of each device's
# input is joined and wakes only at the end of its (growing, up to 60 s)
# period. Seen after training on 8 replicas, when --mode=train_eval_predict's
# predictions started (27-132 s idle in 11 of 19 runs; none in 8 with the
# iterator kept), and at the exit of a process that trained on 2 replicas.
# An iterator holds a few prefetched batches.
_TRAINING_ITERATORS = []
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_TRAINING_ITERATORS))


def _format_seconds(seconds):
  seconds = int(max(seconds, 0))
  hours, rest = divmod(seconds, 3600)
  return (f"{hours}h{rest // 60:02d}m" if hours else
          f"{rest // 60}m{rest % 60:02d}s")


class TrainingState(tf.Module):
  """What a resumed run needs besides the model and the optimizer; saved in
  every checkpoint (as `input`): the data position and seed, and the count
  of skipped steps."""

  def __init__(self):
    super().__init__(name="training_state")
    int64 = lambda name, value=0: tf.Variable(value, dtype=tf.int64,
                                              trainable=False, name=name)
    self.examples_seen = int64("examples_seen")  # global data position
    self.data_seed = int64("data_seed", -1)     # -1: not drawn yet
    self.nonfinite_steps = int64("nonfinite_steps")
    self.consecutive_bad_steps = int64("consecutive_bad_steps")


def _false():
  return tf.constant(False)


def _print_true(*message):
  """Prints `message` to stderr when run; returns True (a cond branch)."""
  tf.print(*message, summarize=-1, output_stream=sys.stderr)
  return tf.constant(True)


def _apply_if(ok, apply, skip, grads):
  """apply(grads) when `ok` (the same on every replica), else skip(), from
  a replica context. Strategies that need a merge_call for the optimizer get
  the condition in the cross-replica context, as Keras' LossScaleOptimizer
  does (a replica-context cond cannot hold a merge_call)."""
  skip_branch = lambda: (skip(), tf.constant(False))[1]
  if private_apis.strategy_supports_no_merge_call():
    return tf.cond(ok, lambda: (apply(grads), tf.constant(True))[1],
                   skip_branch)

  def cross_replica(strategy, ok, grads):
    ok = strategy.experimental_local_results(ok)[0]
    return tf.cond(ok, lambda: (strategy.extended.call_for_each_replica(
        apply, args=(grads,)), tf.constant(True))[1], skip_branch)
  return tf.distribute.get_replica_context().merge_call(
      cross_replica, args=(ok, grads))


def _merge_repeated_rows(gradient):
  """IndexedSlices with repeated indices -> one row per index (summed)."""
  if not isinstance(gradient, tf.IndexedSlices):
    return gradient
  unique, position = tf.unique(gradient.indices)
  values = tf.math.unsorted_segment_sum(gradient.values, position,
                                        tf.shape(unique)[0])
  return tf.IndexedSlices(values, unique, gradient.dense_shape)


def accumulated_gradients(micro_batch, k):
  """(loss, gradients) of K micro-batches run in sequence, summed in float32
  (dense). micro_batch(i) -> (loss, [gradient or None]); micro-batch 0 runs
  first, outside the loop, which tells the None gradients."""
  loss, first = micro_batch(0)
  present = [i for i, g in enumerate(first) if g is not None]
  dense = lambda grads: [tf.cast(tf.convert_to_tensor(grads[i]), tf.float32)
                         for i in present]

  def body(i, loss, sums):
    micro_loss, grads = micro_batch(i)
    return i + 1, loss + micro_loss, [a + g for a, g in zip(sums, dense(grads))]

  _, loss, sums = tf.while_loop(
      lambda i, *_: i < k, body, (tf.constant(1), loss, dense(first)),
      parallel_iterations=1)   # one micro-batch's activations at a time
  grads = [None] * len(first)
  for i, total in zip(present, sums):
    grads[i] = total
  return loss, grads


def stop_requested_anywhere(strategy, stop_requested):
  """True on every worker when any worker's `stop_requested` flag is set."""
  stop = tf.cast(stop_requested, tf.int32)
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    stop = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(
        lambda: tf.cast(stop_requested, tf.int32)), axis=None)
  return stop > 0


def loss_scale(optimizer):
  """{"loss_scale": the dynamic loss scale} under mixed_float16, else {}."""
  if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
    return {"loss_scale": tf.convert_to_tensor(optimizer.loss_scale)}
  return {}


def global_batch_loss(task, labels, outputs, totals):
  """This replica's share of the loss: for each of the task's terms, the sum
  of its numerators here over `totals[term]`, the term's weight summed over
  the global batch. Summed over replicas it is the global batch's loss,
  whatever the number of replicas."""
  numerators = task.loss_numerators(labels, outputs)
  return tf.add_n([
      tf.reduce_sum(tf.cast(numerators[name], tf.float32)) /
      tf.maximum(totals[name], 1e-12) for name in sorted(numerators)])


def check_accumulation(global_batch_size, accumulation_steps, replicas):
  """Raises ValueError unless the global batch splits into
  `accumulation_steps` equal micro-batches on each of `replicas`."""
  if not isinstance(accumulation_steps, int) or accumulation_steps < 1:
    raise ValueError("gradient_accumulation_steps must be a positive integer, "
                     f"got {accumulation_steps!r}")
  if global_batch_size % (accumulation_steps * replicas):
    raise ValueError(
        f"TRAIN_BATCH_SIZE {global_batch_size} does not split into "
        f"GRADIENT_ACCUMULATION_STEPS {accumulation_steps} micro-batches on "
        f"each of {replicas} replica(s): it must be a multiple of "
        f"{accumulation_steps * replicas}")


@dataclasses.dataclass(frozen=True)
class StepSettings:
  """How the one train step and evaluation run (the experiment's bindings).

  Attributes:
    global_batch_size: examples per optimizer step, over all replicas.
    eval_batch_size: examples per evaluation batch, over all replicas.
    clip_norm: the global gradient norm is clipped to this (None: off).
    jit_compile: XLA-compile each replica's forward and backward pass.
    gradient_accumulation_steps: micro-batches per optimizer step (K).
    pad_to_multiple_of: dynamic padding's multiple (None: every batch keeps
      max_seq_length; TPUs always do).
    summary_histograms_every: per-layer norms and histograms every this
      many steps (None: off).
    loss_upper_bound: a step whose loss is above it is skipped (None: none).
    max_consecutive_bad_steps: skipped steps in a row that stop the loop.
  """
  global_batch_size: int
  eval_batch_size: int
  clip_norm: Optional[float] = 1.0
  jit_compile: bool = False
  gradient_accumulation_steps: int = 1
  pad_to_multiple_of: Optional[int] = None
  summary_histograms_every: Optional[int] = None
  loss_upper_bound: Optional[float] = None
  max_consecutive_bad_steps: int = 25


def _compiles_alone(settings, task, tpu):
  """Whether each replica's forward and backward pass is XLA-compiled as a
  function of its own: with jit_compile, unless the task's loss gathers
  across replicas and the replicas are not a TPU's (a collective inside a
  nested compiled function cannot reach mirrored replicas)."""
  if not settings.jit_compile:
    return False
  if task.gathers_across_replicas and not tpu:
    logging.warning("jit_compile: %s's loss gathers across replicas; its "
                    "step runs uncompiled on these replicas (a TPU compiles "
                    "it whole)", type(task).__name__)
    return False
  return True


class Trainer(orbit.AbstractTrainer, evaluation.Evaluation):
  """Orbit trainer + evaluator for any `bertexp.tasks.base.Task`."""

  def __init__(self, *, task, model, optimizer, strategy,
               settings: StepSettings, total_steps, train_dataset=None,
               state=None):
    """Args:
      task: a bertexp.tasks.base.Task.
      model: the task's built model.
      optimizer: the built optimizer (its `iterations` is the step).
      strategy: the tf.distribute strategy the model was built under.
      settings: how steps and evaluation run (StepSettings).
      total_steps: the schedule's last step.
      train_dataset: a distributed dataset, or a callable that builds one
        (called at the first train loop, after any checkpoint restore).
      state: the TrainingState to count into (a new one by default).
    Raises:
      ValueError: the batch does not split into accumulation micro-batches
        over the replicas.
    """
    check_accumulation(settings.global_batch_size,
                       settings.gradient_accumulation_steps,
                       strategy.num_replicas_in_sync)
    self.settings = settings            # read as self.settings.<field>
    self.task, self.model, self.optimizer = task, model, optimizer
    # Dynamic padding, except on TPUs: they need static shapes.
    tpu = isinstance(strategy, (tf.distribute.TPUStrategy,
                                tf.distribute.experimental.TPUStrategy))
    # And except for a task whose rows are not one left-aligned sequence
    # (Task.dynamic_padding): the multiple padding uses.
    self.pad_to_multiple_of = (None if tpu or not task.dynamic_padding
                               else settings.pad_to_multiple_of)
    # Evaluation rows may be single texts (Task.eval_dynamic_padding).
    self.eval_pad_to_multiple_of = (
        None if tpu or not task.eval_dynamic_padding
        else settings.pad_to_multiple_of)
    self.strategy = strategy
    self.total_steps = total_steps
    self.global_step = optimizer.iterations
    with strategy.scope():
      self.train_loss = tf_keras.metrics.Mean("loss")
      self.gradient_norm = tf_keras.metrics.Mean("gradient_norm")
      self.train_metrics = task.build_train_metrics()
    # Every tf.function here runs with autograph off: the code they trace
    # has its control flow written out (tf.cond, tf.while_loop).
    self._gradient_fn = (tf.function(self._gradients, jit_compile=True,
                                     autograph=False)
                         if _compiles_alone(settings, task, tpu)
                         else self._gradients)
    self._eval_datasets = {}
    self._eval_step_fn = None
    self._loop_start = None
    self.train_dataset = train_dataset
    self.state = state or TrainingState()
    # Set from a signal-watching thread; read by the loop before each step.
    self.stop_requested = tf.Variable(False, trainable=False)
    self._announced = tf.Variable(False, trainable=False)
    self._train_iterator = None
    self._train_loop_fn = None

  # -- training ------------------------------------------------------------
  def train(self, num_steps):
    """Up to `num_steps` train steps in one compiled loop (orbit's API);
    raises Preempted / Diverged when the loop ended early for that reason."""
    self.train_loop_begin()
    if self._train_iterator is None:
      # A callable builds the dataset now: after the checkpoint's restore,
      # so it can start at the restored data position.
      if callable(self.train_dataset):
        self.train_dataset = self.train_dataset()
      self._train_iterator = iter(self.train_dataset)
      _TRAINING_ITERATORS.append(self._train_iterator)
    if self._train_loop_fn is None:
      self._train_loop_fn = tf.function(self._train_loop, autograph=False)
    stopped = self._train_loop_fn(self._train_iterator, num_steps)
    if bool(stopped) and not bool(self._diverged()):
      # Decided together: in a multi-worker run the signal may have reached
      # another worker only.
      raise evaluation.Preempted("stop requested on this or another worker at step "
                      f"{int(self.global_step.numpy())}")
    if self._diverged():
      raise evaluation.Diverged(
          f"{int(self.state.consecutive_bad_steps.numpy())} consecutive steps "
          f"skipped (non-finite loss or gradients) up to step "
          f"{int(self.global_step.numpy())}")
    return self.train_loop_end()

  def _diverged(self):
    return (self.state.consecutive_bad_steps >=
            self.settings.max_consecutive_bad_steps)

  def _announce(self):
    """Prints that training has started, once per process (a cond branch)."""
    _print_true("bertexp: training started at step", self.global_step)
    self._announced.assign(True)
    return tf.constant(True)

  def _train_loop(self, iterator, num_steps):
    """Up to `num_steps` train steps as one while loop; returns True when a
    stop request ended it early (one that came during its last step is the
    next loop's, or the evaluation's, to see). Whether to stop is decided
    before the loop and after each step (on every worker alike: a stop
    request or a divergence ends the loop before the next step), so the step
    is the loop's body itself, not a branch: a cond around it made every
    traced step capture each variable once more. Explicit control flow: the
    loop is traced with autograph off (converting the trainer, model and
    task code took about 4 CPU-seconds at every start)."""
    def decide():
      stopped = stop_requested_anywhere(self.strategy, self.stop_requested)
      return stopped, tf.logical_or(stopped, self._diverged())

    def keep_going(i, stopped, done):
      del stopped  # the value to return
      return tf.logical_and(i < tf.cast(num_steps, tf.int32),
                            tf.logical_not(done))

    def body(i, stopped, done):
      del stopped, done  # decided afresh after the step
      self.train_step(iterator)
      # Training runs (after the long first wait for graphs): said once.
      tf.cond(tf.logical_and(tf.equal(i, 0),
                             tf.logical_not(self._announced)),
              self._announce, _false)
      return (i + 1,) + decide()

    steps, stopped, _ = tf.while_loop(
        keep_going, body, (tf.constant(0),) + decide())
    return tf.logical_and(stopped, steps < tf.cast(num_steps, tf.int32))

  def train_loop_begin(self):
    for metric in [self.train_loss, self.gradient_norm] + self.train_metrics:
      metric.reset_states()
    self._loop_start = (time.time(), int(self.global_step.numpy()))

  def _replica_step(self, features, labels):
    """One replica's part of a train step (see the module docstring)."""
    features = self._trim(features, self.pad_to_multiple_of)
    context = tf.distribute.get_replica_context()
    replicas = self.strategy.num_replicas_in_sync
    # Loss denominators over the global batch: from the labels alone, so
    # they are known before the (possibly XLA-compiled) forward pass.
    totals = {name: tf.reduce_sum(tf.cast(weights, tf.float32))
              for name, weights in self.task.loss_weights(labels).items()}
    if replicas > 1:
      totals = context.all_reduce(tf.distribute.ReduceOp.SUM, totals)
    loss, grads = self._batch_gradients(features, labels, totals,
                                        self._dropout_seed(context))
    variables = [v for g, v in zip(grads, self.model.trainable_variables)
                 if g is not None]
    grads = [g for g in grads if g is not None]   # e.g. the pooler in QA
    # Sum across replicas first, so the clip sees the true global gradient.
    # (One replica: nothing to sum, and all_reduce would densify the
    # embedding's sparse gradient.)
    if replicas > 1:
      if self.pad_to_multiple_of:
        # A sparse gradient's all-gather changes shape with the padded length
        # from step to step, which collectives inside a loop cannot match up
        # (replicas paired a 16- and a 24-long step's gathers): sum densely.
        grads = [tf.convert_to_tensor(g) for g in grads]
      grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    # A sparse gradient lists a word once per occurrence: sum repeats first,
    # or the norm (and the clip) would be of the pieces, not the gradient.
    grads = [_merge_repeated_rows(g) for g in grads]
    norm = tf.linalg.global_norm(grads)
    if self.settings.summary_histograms_every:
      # The step this update completes; gradients unclipped and summed.
      # Each encoder variable's layer as its encoder declares it (at trace).
      layer_summaries.write_every(self.settings.summary_histograms_every,
                                  self.global_step + 1, grads, variables,
                                  encoders.variable_groups(self.model))
    if self.settings.clip_norm:
      grads, _ = tf.clip_by_global_norm(grads, self.settings.clip_norm,
                                        use_norm=norm)
    global_loss = (context.all_reduce(tf.distribute.ReduceOp.SUM, loss)
                   if replicas > 1 else loss)
    loss_ok = tf.math.is_finite(global_loss)
    if self.settings.loss_upper_bound is not None:
      loss_ok &= global_loss <= self.settings.loss_upper_bound
    finite_grads = tf.math.is_finite(norm)
    # A LossScaleOptimizer must see overflowed gradients (it skips the update
    # and lowers its scale); the clip keeps inf/nan norms non-finite.
    scaling = isinstance(self.optimizer,
                         tf_keras.mixed_precision.LossScaleOptimizer)
    _apply_if(
        loss_ok & (finite_grads | scaling),
        lambda grads: self.optimizer.apply_gradients(
            zip(grads, variables), skip_gradients_aggregation=True),
        lambda: self.optimizer.iterations.assign_add(1), grads)
    good = loss_ok & finite_grads
    self.train_loss.update_state(tf.where(good, global_loss, 0.0),
                                 tf.cast(good, tf.float32))
    self.gradient_norm.update_state(tf.where(good, norm, 0.0),
                                    tf.cast(good, tf.float32))
    return tf.logical_not(good)

  def _dropout_seed(self, context):
    """[2] seed of this step's dropout masks on this replica: a function of
    the run's seed, the step and the replica, so a resumed run draws the
    masks an uninterrupted one would."""
    seed = tf.stack([self.state.data_seed,
                     tf.cast(self.global_step, tf.int64)])
    return modeling.fold_seed(seed, context.replica_id_in_sync_group)

  def _batch_gradients(self, features, labels, totals, seed):
    """(loss share, gradients) of this replica's batch; updates the train
    metrics. With accumulation the batch runs as K micro-batches in a
    sequential loop, their gradients summed in float32 (dense); micro-batch
    0 runs first, outside the loop, which tells the None gradients."""
    k = self.settings.gradient_accumulation_steps
    if k == 1:
      loss, grads, outputs = self._gradient_fn(features, labels, totals, seed)
      self.task.update_train_metrics(self.train_metrics, labels, outputs)
      return loss, grads
    split = lambda t: tf.reshape(t, tf.concat([[k, -1], tf.shape(t)[1:]], 0))
    micro_features = tf.nest.map_structure(split, features)   # [K, B/K, ...]
    micro_labels = tf.nest.map_structure(split, labels)

    def micro_batch(i):
      pick = lambda t: t[i]
      f = tf.nest.map_structure(pick, micro_features)
      l = tf.nest.map_structure(pick, micro_labels)
      loss, grads, outputs = self._gradient_fn(
          f, l, totals, modeling.fold_seed(seed, i))
      self.task.update_train_metrics(self.train_metrics, l, outputs)
      return loss, grads

    return accumulated_gradients(micro_batch, k)

  def _gradients(self, features, labels, totals, dropout_seed):
    """This replica's loss share and gradients, with no cross-replica op (so
    it compiles with XLA, as on a TPU). Returns (loss, grads, outputs); a
    variable that does not reach the loss has a None gradient."""
    scaling = isinstance(self.optimizer,
                         tf_keras.mixed_precision.LossScaleOptimizer)
    variables = self.model.trainable_variables
    with tf.GradientTape() as tape:
      outputs = self.model(features, training=True, dropout_seed=dropout_seed)
      loss = global_batch_loss(self.task, labels, outputs, totals)
      scaled = self.optimizer.get_scaled_loss(loss) if scaling else loss
    grads = tape.gradient(scaled, variables)
    if scaling:
      present = [g for g in grads if g is not None]
      unscaled = iter(self.optimizer.get_unscaled_gradients(present))
      grads = [None if g is None else next(unscaled) for g in grads]
    return loss, grads, outputs

  def train_step(self, iterator):
    features, labels = next(iterator)
    step = self.global_step.read_value()
    bad = self.strategy.run(self._replica_step, args=(features, labels))
    bad = self.strategy.experimental_local_results(bad)[0]
    self.state.examples_seen.assign_add(self.settings.global_batch_size)
    self.state.nonfinite_steps.assign_add(tf.cast(bad, tf.int64))
    self.state.consecutive_bad_steps.assign(tf.where(
        bad, self.state.consecutive_bad_steps + 1, 0))
    records = lambda: tf.concat(self.strategy.experimental_local_results(
        features.get("record_index", tf.constant([-1]))), 0)
    tf.cond(bad, lambda: _print_true(
        "bertexp: skipped step", step + 1, "(non-finite or too large loss or "
        "gradient norm); records", records()), _false)

  def train_loop_end(self):
    step = int(self.global_step.numpy())
    start_time, start_step = self._loop_start
    elapsed = max(time.time() - start_time, 1e-9)
    steps = step - start_step
    examples_per_second = steps * self.settings.global_batch_size / elapsed
    logs = {"loss": self.train_loss.result(),
            "gradient_norm": self.gradient_norm.result(),
            "nonfinite_steps": self.state.nonfinite_steps.read_value(),
            "learning_rate": self.current_learning_rate(),
            **loss_scale(self.optimizer),
            "examples_per_second": examples_per_second}
    for metric in self.train_metrics:
      logs[metric.name] = metric.result()
    eta = (self.total_steps - step) * elapsed / max(steps, 1)
    logging.info("step %d/%d  loss %.4f  %.1f ex/s  ETA %s", step,
                 self.total_steps, float(logs["loss"]), examples_per_second,
                 _format_seconds(eta))
    return logs

  def current_learning_rate(self):
    """The optimizer's learning rate at the current step."""
    lr = self.optimizer.learning_rate
    if isinstance(self.optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
      lr = self.optimizer.inner_optimizer.learning_rate
    return lr(self.global_step) if callable(lr) else tf.convert_to_tensor(lr)

  def _trim(self, features, multiple):
    """Dynamic padding to a `multiple` (see
    `bertexp.data.pipeline.trimmed_length`; None: no cut), to one length on
    every replica: the global batch's, so a step computes on the shapes a
    one-replica run would (and gathered per-token outputs line up)."""
    if not multiple:
      return features
    length = pipeline.trimmed_length(features["input_mask"], multiple)
    if self.strategy.num_replicas_in_sync > 1:
      length = tf.cast(tf.reduce_max(
          evaluation.gather_replicas(tf.reshape(length, [1]))), tf.int32)
    return pipeline.trim_to(features, length)
