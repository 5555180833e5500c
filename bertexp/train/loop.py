"""Training a model for `bertexp.experiment.experiment`: optimizer, verified
checkpoints, the start (resume, INIT_CHECKPOINT, random), the orbit
Controller loop with roll-backs after divergence, stop on signals, lost
multi-worker peers, best checkpoint, and the Training Summary."""
import contextlib
import dataclasses
import logging
import os
import time
from typing import Optional

import gin
import tensorflow as tf
import tf_keras

from bertexp import capabilities
from bertexp.checkpoints import run_dir
from bertexp.checkpoints import run_files
from bertexp.checkpoints import verified
from bertexp.data import order as order_lib
from bertexp.data import pipeline
from bertexp.model import encoders
from bertexp.train import console
from bertexp.train import optimization
from bertexp.train import run_records
from bertexp.train import stop_signals
from bertexp.train import strategy as strategy_lib
from bertexp.train import trainer as trainer_lib
from bertexp.util import fileio
from bertexp.util import gin_text
from bertexp.util import orbit_import

orbit = orbit_import.orbit


class BestCheckpoint:
  """Keeps the model weights of the best evaluation so far in `folder`
  (`ckpt-N.*` + `best_checkpoint.json` with the step and all metrics).
  Survives resumption: the JSON on disk is the score to beat."""

  def __init__(self, model, folder, metric, mode="max"):
    if mode not in ("max", "min"):
      raise ValueError(f"best checkpoint mode {mode!r} is not 'max' or 'min'")
    self.model, self.folder, self.metric, self.mode = model, folder, metric, mode
    self.info_path = run_files.best_info(folder)

  def _better(self, value, old):
    return value > old if self.mode == "max" else value < old

  def update(self, step, metrics):
    if self.metric not in metrics:
      raise ValueError(f"best-checkpoint metric {self.metric!r} is not among "
                       f"the eval metrics {sorted(metrics)}")
    value = float(metrics[self.metric])
    if tf.io.gfile.exists(self.info_path):
      old = fileio.read_json(self.info_path)
      if not self._better(value, old["metrics"][self.metric]):
        return False
    prefix = fileio.join(self.folder, f"ckpt-{step}")
    tf.train.Checkpoint(model=self.model).write(prefix)
    verified.write_manifest(prefix)
    previous = run_dir.best_checkpoint_prefix(self.folder)
    # Relative to the folder: a moved or copied run folder keeps working.
    fileio.write_json(self.info_path, {
        "step": step, "checkpoint": f"ckpt-{step}", "metric": self.metric,
        "mode": self.mode, "metrics": {k: float(v) for k, v in metrics.items()}})
    if previous and previous != prefix:
      for path in tf.io.gfile.glob(previous + ".*"):
        tf.io.gfile.remove(path)
    logging.info("new best %s %.4f at step %d -> %s", self.metric, value, step,
                 prefix)
    return True


class StopEarly(Exception):
  """Raised by an evaluation that ran out of patience."""


class EarlyStopping:
  """Patience on the best-checkpoint metric: after `patience` evaluations
  without an improvement of more than `min_delta` over the best value so
  far, training stops. Its record, MODEL_DIR/early_stopping.json, survives
  resumption (an evaluation replayed after a restart is not counted
  twice) and tells a rerun and --mode=predict/export that the run is over
  and that best_checkpoint/ holds its weights."""

  def __init__(self, model_dir, metric, mode, patience, min_delta):
    if patience < 1 or min_delta < 0:
      raise ValueError(f"early_stopping_patience {patience} must be >= 1 and "
                       f"early_stopping_min_delta {min_delta} >= 0")
    self.metric, self.mode = metric, mode
    self.patience, self.min_delta = patience, min_delta
    self.path = run_files.early_stopping(model_dir)
    self.record = (fileio.read_json(self.path) if tf.io.gfile.exists(self.path)
                   else {"metric": metric, "best": None, "best_step": None,
                         "evaluations_without_improvement": 0,
                         "last_step": -1, "stopped_early_at_step": None})

  def _improves(self, value):
    best = self.record["best"]
    if best is None:
      return True
    gain = value - best if self.mode == "max" else best - value
    return gain > self.min_delta

  def update(self, step, metrics):
    """Counts one evaluation; raises StopEarly when patience ran out."""
    record = self.record
    if step <= record["last_step"]:
      return                       # replayed after a resume: counted already
    value = float(metrics[self.metric])
    if self._improves(value):
      record.update(best=value, best_step=step,
                    evaluations_without_improvement=0)
    else:
      record["evaluations_without_improvement"] += 1
    record["last_step"] = step
    stop = record["evaluations_without_improvement"] >= self.patience
    if stop:
      record["stopped_early_at_step"] = step
    fileio.write_json(self.path, record)
    if stop:
      raise StopEarly(
          f"stopped early at step {step}: {self.metric} did not improve by "
          f"more than {self.min_delta} in {self.patience} evaluation(s); best "
          f"{record['best']:.4g} at step {record['best_step']} "
          "(best_checkpoint/, what predict and export use)")


# What TensorFlow raises in a multi-worker run when a peer is gone or hangs.
_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                tf.errors.AbortedError)


def _build_optimizer(model, strategy, precision, schedule):
  with strategy.scope():
    optimizer = optimization.create_optimizer(schedule.total_steps,
                                              schedule.warmup_steps)
    # Slots must exist before a restore, or their saved values are skipped.
    optimization.build(optimizer, model.trainable_variables,
                       encoders.variable_groups(model))
    if precision == "mixed_float16":
      optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
      optimizer.build(model.trainable_variables)
  return optimizer


def _start_weights(model, optimizer, model_dir, resume_from, init_checkpoint,
                   init_optimizer_state, task_initialisation=None):
  """Logs where the weights come from; applies INIT_CHECKPOINT on a fresh run
  (a resumed run is restored by the orbit Controller). Returns that, in
  words, for the Training Summary."""
  if resume_from:
    logging.info("resuming from %s (weights, optimizer, step and data "
                 "position); INIT_CHECKPOINT is not used", resume_from)
    return f"resumed from {resume_from}"
  if init_checkpoint and task_initialisation:
    raise ValueError(f"INIT_CHECKPOINT {init_checkpoint} would overwrite the "
                     f"task's own initialisation ({task_initialisation}): "
                     "bind INIT_CHECKPOINT=None, or let the task start at "
                     "random (e.g. student_init='checkpoint')")
  if init_checkpoint:
    what = run_dir.initialise_from_checkpoint(
        model, optimizer, init_checkpoint, init_optimizer_state)
    logging.info("initialised %s (INIT_CHECKPOINT)", what)
    return what
  if task_initialisation:
    return task_initialisation        # the task logged it when it built
  if isinstance(getattr(model, "encoder", None), encoders.SavedModelEncoder):
    logging.info("the encoder starts from HUB_MODULE_URL %s (trainable: %s)",
                 model.encoder.path, model.encoder.trainable)
    return f"HUB_MODULE_URL {model.encoder.path}"
  logging.warning("no checkpoint in %s and no INIT_CHECKPOINT: training "
                  "from random initialisation", model_dir)
  return "random"


def _train_dataset_fn(task, strategy, state, model_dir, global_batch_size,
                      group_by_length=False):
  """The training input, built once the checkpoint is restored: it starts at
  the checkpoint's data position, in the order of its data seed."""
  def build():
    if int(state.data_seed.numpy()) < 0:
      state.data_seed.assign(order_lib.resolve_seed(
          task.seed, share=lambda draw: strategy_lib.chief_value(strategy,
                                                                 draw)))
    train_order = pipeline.TrainOrder(
        seed=int(state.data_seed.numpy()),
        start=int(state.examples_seen.numpy()),
        counts_cache=run_files.train_record_counts(model_dir),
        group_by_length=group_by_length)
    logging.info("training data: seed %d, starting after %d examples",
                 train_order.seed, train_order.start)
    return strategy.distribute_datasets_from_function(
        lambda ctx: task.build_inputs(
            "train", ctx, ctx.get_per_replica_batch_size(global_batch_size),
            train_order=train_order))
  return build


def _roll_back(model, optimizer, state, model_dir, trial, error):
  """After `error` (trainer_lib.Diverged): the model and optimizer of an
  intact checkpoint (the newest on the first trial, one older on each
  further trial); the data position is kept, so training continues past the
  batches that failed."""
  candidates = verified.numbered_checkpoints(model_dir)[trial - 1:]
  path = (verified.latest_intact_checkpoint(
      model_dir, intact_only_from=candidates) if candidates else None)
  if path is None:
    raise ValueError(f"training diverged ({error}) and {model_dir} has no "
                     "checkpoint to roll back to: lower LEARNING_RATE or check "
                     "the data") from error
  tf.train.Checkpoint(model=model, optimizer=optimizer).read(
      path).expect_partial()
  state.consecutive_bad_steps.assign(0)
  logging.error("%s: rolled back to %s (trial %d); data continues after "
                "example %d", error, path, trial,
                int(state.examples_seen.numpy()))


def _run_loops(run_loops, *, model, optimizer, state, model_dir,
               recovery_max_trials):
  """run_loops() until it finishes, rolling back after each divergence, at
  most recovery_max_trials times."""
  for trial in range(recovery_max_trials + 1):
    try:
      return run_loops()
    except trainer_lib.Diverged as error:
      if trial == recovery_max_trials:
        raise ValueError(
            f"training diverged again after {recovery_max_trials} roll-backs "
            f"({error}): lower LEARNING_RATE, raise loss_upper_bound or check "
            "the data (the skipped steps' records are in the log)") from error
      _roll_back(model, optimizer, state, model_dir, trial + 1, error)
  return None


@contextlib.contextmanager
def _ends_cleanly(strategy, manager, optimizer, signals):
  """Training's ways to end early: a stop request writes a checkpoint at the
  step reached and raises RunStopped; a lost multi-worker peer raises
  WorkerLost naming it."""
  try:
    yield
  except _PEER_ERRORS as error:
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
      raise
    resolver = strategy.cluster_resolver
    raise stop_signals.worker_lost(
        error, this_task=f"{resolver.task_type} {resolver.task_id}") from None
  except trainer_lib.Preempted as stop:
    path = manager.save(checkpoint_number=optimizer.iterations,
                        check_interval=False) or manager.latest_checkpoint
    name = signals.received.name if signals.received else "a stop request"
    raise stop_signals.RunStopped(
        f"{name} at step {int(optimizer.iterations.numpy())} ({stop}): "
        f"checkpoint {path} written; run the same command again to resume"
    ) from None


def _controller(mode, *, trainer, manager, last, model_dir, steps_per_loop,
                best, early_stopping=None):
  """The orbit Controller: summaries, checkpoints, best checkpoint, early
  stopping; `last` receives each train loop's and evaluation's results."""
  written = []

  def on_train_loop(output):
    last["train"] = output
    run_records.append_metrics(model_dir, int(trainer.global_step.numpy()),
                               "train", output)
    if not written:
      fileio.write_text(run_files.operative_config(model_dir),
                        gin_text.with_working_directory(
                            gin.operative_config_str(), os.getcwd()))
      written.append(True)

  def on_eval(output):
    last["eval"] = output
    step = int(trainer.global_step.numpy())
    run_records.append_metrics(model_dir, step, "eval", output)
    logging.info("eval at step %d/%d: %s", step, trainer.total_steps,
                 "  ".join(f"{k} {float(v):.4g}" for k, v in output.items()))
    best.update(step, output)
    if early_stopping:
      early_stopping.update(step, output)

  evaluating = mode == "train_and_eval"
  return orbit.Controller(
      global_step=trainer.global_step, trainer=trainer,
      evaluator=trainer if evaluating else None, strategy=trainer.strategy,
      steps_per_loop=steps_per_loop, checkpoint_manager=manager,
      summary_interval=steps_per_loop,
      summary_dir=run_files.summaries(model_dir, "train"),
      eval_summary_dir=run_files.summaries(model_dir, "eval"),
      train_actions=[on_train_loop],
      eval_actions=[on_eval] if evaluating else None)


@dataclasses.dataclass(frozen=True)
class LoopSettings:
  """How the outer loop runs (the experiment's bindings).

  Attributes:
    steps_per_loop: train steps per compiled loop (Orbit's steps_per_loop).
    checkpoint_interval_steps: steps between checkpoints (None: one
      evaluation interval).
    max_checkpoints: ckpt-N files kept.
    eval_steps: evaluation batches (-1: the whole eval set).
    best_metric: what best_checkpoint/ keeps (None: the task's selection
      metric).
    best_mode: "max" or "min" of best_metric.
    eval_before_training: evaluate once before the first step.
    group_by_length: training batches of similar lengths.
    recovery_max_trials: roll-backs to an intact checkpoint after a run of
      skipped steps, before the run gives up.
    init_checkpoint: INIT_CHECKPOINT (anything run_dir.resolve takes), or None.
    init_optimizer_state: also take INIT_CHECKPOINT's optimizer moments.
    early_stopping_patience: evaluations without improvement of best_metric
      (by more than early_stopping_min_delta) before training stops; None:
      never stop early.
  """
  steps_per_loop: int
  checkpoint_interval_steps: Optional[int] = None
  max_checkpoints: int = 5
  eval_steps: int = -1
  best_metric: Optional[str] = None
  best_mode: str = "max"
  eval_before_training: bool = False
  group_by_length: bool = False
  recovery_max_trials: int = 3
  init_checkpoint: Optional[str] = None
  init_optimizer_state: bool = False
  early_stopping_patience: Optional[int] = None
  early_stopping_min_delta: float = 0.0


def train(mode, *, model_dir, task, model, strategy, precision, schedule,
          step_settings, loop_settings, provenance, config_text=None):
  """Trains and returns the Training Summary.

  A run whose checkpoint already reached the last step changes nothing.

  Args:
    mode: "train" or "train_and_eval".
    model_dir: where checkpoints and records go (this worker's).
    task: a bertexp.tasks.base.Task.
    model: the task's model, built in `strategy`'s scope.
    strategy: the tf.distribute strategy.
    precision: the Keras mixed-precision policy name in force.
    schedule: the experiment's Schedule (steps, warmup, eval interval).
    step_settings: trainer.StepSettings.
    loop_settings: LoopSettings.
    provenance: the run's provenance record, for the Training Summary.
    config_text: the parsed gin files and bindings, saved as
      MODEL_DIR/config.gin when training starts.
  Returns:
    The Training Summary (a dict, also written to training_summary.json).
  Raises:
    Preempted, Diverged, CheckpointError and the task's data errors.
  """
  loop = loop_settings
  start_time = time.time()
  logging.info("schedule: %s", schedule)
  hooks = _checked_start(mode, task, loop)
  optimizer = _build_optimizer(model, strategy, precision, schedule)
  state = trainer_lib.TrainingState()
  resume_from = verified.prepare_model_dir(model_dir)
  if run_dir.stopped_early_at(model_dir) is not None:
    return _already_finished(model_dir, run_dir.stopped_early_at(model_dir),
                             early=True)
  manager = _checkpoint_manager(
      model, optimizer, state, model_dir, loop.max_checkpoints,
      loop.checkpoint_interval_steps or schedule.eval_interval_steps)
  initialisation = _start_weights(
      model, optimizer, model_dir, resume_from, loop.init_checkpoint,
      loop.init_optimizer_state,
      hooks.initialisation() if hooks.initialisation else None)
  if resume_from and checkpoint_step(resume_from) >= schedule.total_steps > 0:
    return _already_finished(model_dir, checkpoint_step(resume_from))
  if config_text is not None:
    _record_config(model_dir, config_text,
                   checkpoint_step(resume_from) if resume_from else 0)
  trainer = trainer_lib.Trainer(
      task=task, model=model, optimizer=optimizer, strategy=strategy,
      settings=step_settings, total_steps=schedule.total_steps, state=state,
      train_dataset=_train_dataset_fn(task, strategy, state, model_dir,
                                      step_settings.global_batch_size,
                                      loop.group_by_length))
  last = {"train": {}, "eval": {}}
  controller, early = _selecting_controller(mode, trainer, manager, last,
                                            model_dir, loop)
  resumed_step = int(optimizer.iterations.numpy())
  initial_eval, train_start = _run_until_done(
      mode, trainer, controller, manager, schedule, loop, model_dir,
      first_run=resumed_step == 0)
  manager.save(checkpoint_number=optimizer.iterations, check_interval=False)
  if hooks.after_training:
    hooks.after_training(model, model_dir)
  steps_run = int(optimizer.iterations.numpy()) - resumed_step
  batch = step_settings.global_batch_size
  return _write_summary(model_dir, dict(
      _loop_results(last), initial_eval_metrics=initial_eval,
      total_training_steps=schedule.total_steps,
      warmup_steps=schedule.warmup_steps, steps_this_run=steps_run,
      resumed_from_step=resumed_step,
      nonfinite_steps=int(state.nonfinite_steps.numpy()),
      examples_seen=int(state.examples_seen.numpy()),
      global_batch_size=batch, replicas=strategy.num_replicas_in_sync,
      initialisation=initialisation,
      examples_per_second=(steps_run * batch / (time.time() - train_start)
                           if steps_run else 0.0),
      wall_time_seconds=time.time() - start_time,
      selection_metric=task.selection_metric(),
      **(_early_stopping_record(early)), provenance=provenance))


def _run_until_done(mode, trainer, controller, manager, schedule, loop,
                    model_dir, first_run):
  """The training loops under signal handling, until the last step, early
  stopping or a stop; returns (the evaluation before training or {}, the
  time training started)."""
  optimizer = trainer.optimizer
  with stop_signals.StopOnSignals(trainer.stop_requested) as signals:
    with _ends_cleanly(trainer.strategy, manager, optimizer, signals):
      initial_eval = (_initial_eval(trainer, loop.eval_steps) if (
          loop.eval_before_training and mode == "train_and_eval" and
          first_run) else {})
      train_start = time.time()
      try:
        with console.without_orbit_echo():
          _run_loops(_loops(mode, controller, schedule, loop.eval_steps),
                     model=trainer.model, optimizer=optimizer,
                     state=trainer.state, model_dir=model_dir,
                     recovery_max_trials=loop.recovery_max_trials)
      except StopEarly as stop:
        logging.info("%s", stop)
        print(f"bertexp: {stop}", flush=True)
  return initial_eval, train_start


def _checked_start(mode, task, loop):
  """Before anything is written: the settings and the task's training data
  checked; returns the task's RunHooks (empty when it declares none)."""
  if loop.early_stopping_patience and mode != "train_and_eval":
    raise ValueError("early_stopping_patience needs evaluations: "
                     "--mode=train_and_eval (or train_eval_predict)")
  data = capabilities.find(task, capabilities.TrainingData)
  if data:
    data.check()
  return (capabilities.find(task, capabilities.RunHooks) or
          capabilities.RunHooks())


def _early_stopping_record(early):
  """The Training Summary's early-stopping fields ({} without it)."""
  if not early:
    return {}
  return {"stopped_early_at_step": early.record["stopped_early_at_step"],
          "early_stopping": early.record}


def _selecting_controller(mode, trainer, manager, last, model_dir, loop):
  """(the Orbit controller, EarlyStopping or None): the controller keeps
  the best checkpoint by the selection metric (LoopSettings.best_metric,
  else the task's) and stops early when LoopSettings asks."""
  metric = loop.best_metric or trainer.task.selection_metric()
  best = BestCheckpoint(trainer.model, run_files.best_checkpoint(model_dir),
                        metric, loop.best_mode)
  early = (EarlyStopping(model_dir, metric, loop.best_mode,
                         loop.early_stopping_patience,
                         loop.early_stopping_min_delta)
           if loop.early_stopping_patience else None)
  with console.without_orbit_echo():       # its "restoring or initializing"
    controller = _controller(mode, trainer=trainer, manager=manager,
                             last=last, model_dir=model_dir,
                             steps_per_loop=loop.steps_per_loop, best=best,
                             early_stopping=early)
  return controller, early


def _record_config(model_dir, config_text, step):
  """The parsed gin files and bindings: MODEL_DIR/config.gin, and a header
  of the run's records in TensorBoard at `step`."""
  fileio.write_text(run_files.config(model_dir),
                    gin_text.with_working_directory(config_text, os.getcwd()))
  run_records.write_header(run_files.summaries(model_dir), config_text,
                           step=step)


def _loops(mode, controller, schedule, eval_steps):
  """A function running the controller's training (and evaluation) loops to
  the schedule's last step."""
  if mode == "train_and_eval":
    return lambda: controller.train_and_evaluate(
        train_steps=schedule.total_steps, eval_steps=eval_steps,
        eval_interval=schedule.eval_interval_steps)
  return lambda: controller.train(steps=schedule.total_steps)


def _initial_eval(trainer, eval_steps):
  """The metrics before any training step, e.g. the MLM accuracy of a
  randomly initialised model."""
  metrics = {k: float(v) for k, v in trainer.evaluate(eval_steps).items()}
  logging.info("before training: %s", metrics)
  return metrics


def _checkpoint_manager(model, optimizer, state, model_dir, max_checkpoints,
                        interval):
  """The verified manager of MODEL_DIR's checkpoints (model, optimizer and
  the input position), saving every `interval` steps."""
  checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                   input=state)
  return verified.VerifiedCheckpointManager(
      checkpoint, model_dir, max_to_keep=max_checkpoints,
      checked_variables=model.variables + list(optimizer.variables),
      hold_periodic_saves=lambda: int(state.consecutive_bad_steps.numpy()) > 0,
      step_counter=optimizer.iterations, checkpoint_interval=interval)


def _write_summary(model_dir, summary):
  """Writes, logs and prints the Training Summary; returns it."""
  fileio.write_json(run_files.training_summary(model_dir), summary)
  text = fileio.read_text(run_files.training_summary(model_dir))
  logging.debug("Training Summary:\n%s", text)
  print("Training Summary: " + text, flush=True)
  return summary


def checkpoint_step(prefix):
  """The optimizer step a training checkpoint was written at (read from the
  file: the orbit Controller restores the checkpoint itself, later)."""
  steps = sorted((name for name, _ in tf.train.list_variables(prefix)
                  if name.startswith("optimizer/") and
                  name.endswith("_iterations/.ATTRIBUTES/VARIABLE_VALUE")),
                 key=len)
  return int(tf.train.load_variable(prefix, steps[0])) if steps else 0


def _already_finished(model_dir, step, early=False):
  """A finished MODEL_DIR: says so and returns its Training Summary as it is."""
  summary_path = run_files.training_summary(model_dir)
  summary = (fileio.read_json(summary_path)
             if tf.io.gfile.exists(summary_path) else {})
  how = ("it stopped early at step " if early else
         "its checkpoint is at step ") + f"{step}" + (
             f" ({run_dir.EARLY_STOPPING_INFO})" if early else ", the last one")
  further = ("remove that file" if early else
             "raise TRAIN_STEPS or NUM_TRAIN_EPOCHS")
  print(f"bertexp: {model_dir} has finished training ({how}); nothing was "
        f"changed. To train further, {further}; to start over, use another "
        "MODEL_DIR.", flush=True)
  return dict(summary, already_finished=True)


def _loop_results(last):
  """The Training Summary's view of the last train loop and evaluation."""
  return {
      "train_loss": float(last["train"].get("loss", float("nan"))),
      "last_train_metrics": {k: float(v) for k, v in last["train"].items()},
      "eval_metrics": {k: float(v) for k, v in last["eval"].items()}}
