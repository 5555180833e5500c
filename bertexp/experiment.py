"""train / eval / predict / export: strategy -> task -> model -> optimizer ->
trainer -> orbit.Controller, all from gin bindings of `bertexp.experiment`."""
import contextlib
import dataclasses

import gin
import tensorflow as tf
import tf_keras

from bertexp import capabilities
from bertexp.checkpoints import run_files
from bertexp import modes
from bertexp import settings as settings_lib
from bertexp.checkpoints import run_dir
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.serving.exporting import export as export_lib
from bertexp.train import loop
from bertexp.train import plan
from bertexp.train import provenance as provenance_lib
from bertexp.train import strategy as strategy_lib
from bertexp.train import trainer as trainer_lib
from bertexp.train import writer_lock
from bertexp.util import fileio
from bertexp.util import gin_text
from bertexp.util import orbit_import

orbit = orbit_import.orbit


@dataclasses.dataclass
class Schedule:
  """Step counts derived from the data, as Model Garden's run_classifier."""
  steps_per_epoch: int       # an epoch's (1 / NUM_EVAL_PER_EPOCH's) steps
  total_steps: int
  warmup_steps: int
  eval_interval_steps: int   # steps between evaluations


def _check_positive(**values):
  """ValueError naming the macro unless each value is an int above 0."""
  for name, value in values.items():
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"{name}={value!r}: expected a whole number above 0")


def derive_schedule(train_data_size, train_batch_size, num_train_epochs,
                    num_eval_per_epoch=1, warmup_fraction=0.1,
                    train_steps=None, warmup_steps=None,
                    eval_interval_steps=None):
  """run_classifier: an "epoch" is 1/num_eval_per_epoch of the data;
  steps_per_epoch = int(size_per_epoch / batch);
  warmup = int(epochs * size_per_epoch * 0.1 / batch), or `warmup_steps`
  when given (at most the total steps); an evaluation every epoch, or every
  `eval_interval_steps` when given.

  Returns:
    The Schedule.
  Raises:
    ValueError: a value out of range, named by its macro.
  """
  _check_positive(TRAIN_BATCH_SIZE=train_batch_size,
                  NUM_EVAL_PER_EPOCH=num_eval_per_epoch)
  if eval_interval_steps is not None:
    _check_positive(EVAL_INTERVAL_STEPS=eval_interval_steps)
  if train_steps is not None:
    _check_positive(TRAIN_STEPS=train_steps)
  if warmup_steps is not None and (isinstance(warmup_steps, bool) or
                                   not isinstance(warmup_steps, int) or
                                   warmup_steps < 0):
    raise ValueError(f"WARMUP_STEPS={warmup_steps!r}: expected a whole "
                     "number of steps, 0 or more (or None)")
  elif not (isinstance(num_train_epochs, (int, float)) and
            not isinstance(num_train_epochs, bool) and num_train_epochs > 0):
    raise ValueError(f"NUM_TRAIN_EPOCHS={num_train_epochs!r}: expected a "
                     "number above 0 (or bind TRAIN_STEPS)")
  epochs = num_train_epochs * num_eval_per_epoch
  size_per_epoch = train_data_size // num_eval_per_epoch
  steps_per_epoch = int(size_per_epoch / train_batch_size)
  if steps_per_epoch < 1 and not train_steps:
    raise ValueError(
        f"train_data_size {train_data_size} / num_eval_per_epoch "
        f"{num_eval_per_epoch} is smaller than one batch of "
        f"{train_batch_size}: no training step")
  total = train_steps or int(steps_per_epoch * epochs)
  warmup = int(epochs * size_per_epoch * warmup_fraction / train_batch_size)
  if train_steps:
    warmup = int(train_steps * warmup_fraction)
  if warmup_steps is not None:
    warmup = min(warmup_steps, total)
  steps_per_epoch = max(steps_per_epoch, 1)
  return Schedule(steps_per_epoch, total, warmup,
                  eval_interval_steps or steps_per_epoch)


def worker_model_dir(strategy, model_dir):
  """MODEL_DIR for the chief; a private folder for other multi-worker workers.

  Every worker must take part in checkpoint saving (it is collective), but
  only the chief's files are the run's.
  """
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return model_dir
  resolver = strategy.cluster_resolver
  task_type, task_id = resolver.task_type, resolver.task_id
  has_chief = "chief" in resolver.cluster_spec().as_dict()
  if task_type is None or task_type == "chief" or (
      task_type == "worker" and task_id == 0 and not has_chief):
    return model_dir
  return run_files.worker_folder(model_dir, task_type, task_id)


def _check_pretrained_source(mode, model, model_dir, init_checkpoint,
                             required):
  from_hub = isinstance(getattr(model, "encoder", None),
                        encoders.SavedModelEncoder)
  if init_checkpoint and from_hub:
    raise ValueError(
        f"INIT_CHECKPOINT ({init_checkpoint}) and HUB_MODULE_URL "
        f"({model.encoder.path}) are both set: the pretrained encoder comes "
        "from one of them; bind the other to None")
  if (required and modes.trains(mode) and not init_checkpoint
      and not from_hub and not tf.train.latest_checkpoint(model_dir)):
    raise ValueError(
        "this experiment fine-tunes a pretrained encoder: set INIT_CHECKPOINT "
        "(a bertexp checkpoint, see `bertexp convert-checkpoint`) or "
        "HUB_MODULE_URL (a SavedModel encoder folder); to train from random "
        "initialisation on purpose bind REQUIRE_PRETRAINED_ENCODER=False")


@gin.configurable(module="bertexp")
def experiment(mode="train_and_eval", *, model_dir=gin.REQUIRED,
               task=gin.REQUIRED, schedule=None, steps=None, checkpoints=None,
               runtime=None, config_text=None, **fields):
  """Runs one experiment.

  Args:
    mode: one of bertexp.modes.MODES ("export_only" = "export").
    model_dir: the run's folder (MODEL_DIR).
    task: the bertexp.tasks.base.Task.
    schedule, steps, checkpoints, runtime: the settings objects
      (bertexp.settings: ScheduleSettings, StepOptions, CheckpointSettings,
      RuntimeSettings; None: built from their gin bindings).
    config_text: (given by the command line, not by gin) the parsed gin
      files and bindings, saved in MODEL_DIR as config.gin when training
      starts and as config_<mode>.gin by the other modes (so predict or
      export never overwrite the training run's record).
    **fields: any settings field by its own name
      (`bertexp.experiment.train_batch_size = 64`), applied over the
      objects.
  Returns:
    What the mode produced: the Training Summary, evaluation results,
    prediction files, an export's folder or the plan.
  Raises:
    ValueError: a setting that is not one, or a configuration the mode
      cannot run (one line, naming it).
  """
  mode = modes.canonical(mode)
  settings = settings_lib.resolve(schedule, steps, checkpoints, runtime,
                                  fields)
  sched, opts = settings.schedule, settings.steps
  run = settings.runtime
  _check_positive(EVAL_BATCH_SIZE=sched.eval_batch_size,
                  GRADIENT_ACCUMULATION_STEPS=opts.gradient_accumulation_steps)
  derived = derive_schedule(
      _train_examples(task), sched.train_batch_size,
      sched.num_train_epochs, sched.num_eval_per_epoch, sched.warmup_fraction,
      sched.train_steps, sched.warmup_steps,
      sched.eval_interval_steps) if modes.derives_schedule(
          mode) else None
  if mode == "train_eval_predict":
    _prediction_splits(task, mode)
  # The machine's settings, read from gin once, here, and handed down.
  machine = plan.MachineSettings(strategy=strategy_lib.StrategySettings(),
                                 numerics=strategy_lib.NumericsSettings(),
                                 encoder=encoders.EncoderSettings())
  if mode == "plan":         # what a run would do, without running it
    return _plan(task, derived, sched.train_batch_size,
                 opts.gradient_accumulation_steps, run.seed, machine)
  strategy, precision, jit_compile = _start_runtime(mode, run, machine)
  with strategy_lib.leaving_together(strategy), encoders.settings_scope(
      machine.encoder):
    return _run(mode, task, model_dir, config_text, settings, derived,
                strategy, precision, jit_compile)


def _run(mode, task, model_dir, config_text, settings, derived, strategy,
         precision, jit_compile):
  """experiment()'s mode on its strategy: what the mode produced."""
  sched, opts = settings.schedule, settings.steps
  ckpts, run = settings.checkpoints, settings.runtime
  fileio.makedirs(model_dir)
  if config_text is not None and not modes.trains(mode):
    fileio.write_text(run_files.mode_config(model_dir, mode), config_text)
  with strategy.scope(), (modeling.portable_activations()
                          if mode == "export_tflite" else contextlib.nullcontext()):
    model = task.build_model()
  if mode == "distill_targets":
    return capabilities.require(task, capabilities.TeacherTargets,
                                f"--mode={mode}").write(model)
  _check_pretrained_source(mode, model, model_dir, ckpts.init_checkpoint,
                           ckpts.require_pretrained_encoder)
  if modes.exports(mode):
    return _export(mode, task, model, model_dir, ckpts.predict_checkpoint_path)
  step_settings = trainer_lib.StepSettings(
      global_batch_size=sched.train_batch_size,
      eval_batch_size=sched.eval_batch_size, clip_norm=opts.clip_norm,
      jit_compile=jit_compile,
      gradient_accumulation_steps=opts.gradient_accumulation_steps,
      pad_to_multiple_of=strategy_lib.padding_multiple(
          strategy, opts.pad_to_multiple_of),
      summary_histograms_every=opts.summary_histograms_every,
      loss_upper_bound=opts.loss_upper_bound,
      max_consecutive_bad_steps=opts.max_consecutive_bad_steps)
  if mode in ("eval", "predict"):
    return _evaluate_or_predict(mode, model_dir, ckpts.predict_checkpoint_path,
                                task, model, strategy, step_settings,
                                sched.eval_steps)
  with _writer_lock(strategy, model_dir):
    summary = loop.train(
        "train" if mode == "train" else "train_and_eval",
        model_dir=worker_model_dir(strategy, model_dir), task=task, model=model,
        strategy=strategy, precision=precision, schedule=derived,
        step_settings=step_settings,
        loop_settings=_loop_settings(settings),
        provenance=provenance_lib.record(
            task, init_checkpoint=ckpts.init_checkpoint, seed=run.seed,
            deterministic=run.deterministic, cpu_threads=run.cpu_threads,
            precision=precision),
        config_text=config_text)
  if mode == "train_eval_predict":
    summary["predictions"] = _predict_after_training(
        model_dir, ckpts.predict_checkpoint_path, task, strategy,
        step_settings, sched.eval_steps)
  return summary


def _loop_settings(settings):
  """The train loop's LoopSettings of the experiment's settings."""
  sched, opts, ckpts = settings.schedule, settings.steps, settings.checkpoints
  return loop.LoopSettings(
      steps_per_loop=sched.steps_per_loop,
      checkpoint_interval_steps=ckpts.checkpoint_interval_steps,
      max_checkpoints=ckpts.max_checkpoints, eval_steps=sched.eval_steps,
      best_metric=ckpts.best_metric, best_mode=ckpts.best_mode,
      eval_before_training=ckpts.eval_before_training,
      group_by_length=opts.group_by_length,
      recovery_max_trials=opts.recovery_max_trials,
      init_checkpoint=ckpts.init_checkpoint,
      init_optimizer_state=ckpts.init_optimizer_state,
      early_stopping_patience=ckpts.early_stopping_patience,
      early_stopping_min_delta=ckpts.early_stopping_min_delta)


def _writer_lock(strategy, model_dir):
  """MODEL_DIR's writer lock for the process that writes the run's files
  (the chief); the other workers write under MODEL_DIR/workers/ and take
  none."""
  if worker_model_dir(strategy, model_dir) != model_dir:
    return contextlib.nullcontext()
  return writer_lock.WriterLock(model_dir)


def _plan(task, schedule, train_batch_size, accumulation_steps, seed,
          machine):
  """--mode=plan: prints the schedule and the memory plan; returns both.

  The memory plan needs the model's bert_config.json: without it (a sweep
  planned before the pretrained model is downloaded) the schedule is still
  printed and the plan says why it is missing."""
  try:
    memory, lines = plan.memory_report(
        task, machine, train_batch_size=train_batch_size,
        accumulation_steps=accumulation_steps)
  except (FileNotFoundError, ValueError) as e:
    why = gin_text.user_message(e)
    memory, lines = {"memory_plan_unavailable": why}, [
        f"memory plan: unavailable ({why})"]
  result = dict(dataclasses.asdict(schedule), **memory,
                global_batch_size=train_batch_size,
                train_data_size=_train_examples(task), seed=seed)
  print(f"schedule: {schedule.total_steps} steps of {train_batch_size} "
        f"examples ({schedule.eval_interval_steps} per evaluation, warmup "
        f"{schedule.warmup_steps})", flush=True)
  print("\n".join(lines), flush=True)
  return result


def _start_runtime(mode, run, machine):
  """Threads, the strategy, seeds and numerics (RuntimeSettings `run`,
  plan.MachineSettings `machine`), in the order TensorFlow needs them;
  returns (strategy, precision, jit_compile)."""
  if run.cpu_threads:
    # Before any TF runtime work. Thread counts change CPU reduction order,
    # so a run reproduces bit for bit only with the same setting.
    tf.config.threading.set_intra_op_parallelism_threads(run.cpu_threads)
    tf.config.threading.set_inter_op_parallelism_threads(run.cpu_threads)
  # The strategy first: multi-worker collectives must be configured before
  # any other TensorFlow call initialises the runtime.
  strategy = machine.strategy.build()
  if run.seed is not None:
    tf_keras.utils.set_random_seed(run.seed)
  if run.deterministic:
    tf.config.experimental.enable_op_determinism()
  precision, jit_compile = machine.numerics.apply(strategy)
  if modes.serves_float32(mode):
    # Served models compute in float32 whatever the training precision, so
    # predict and the exported model give the same numbers (and teacher
    # targets are the float32 teacher's).
    tf_keras.mixed_precision.set_global_policy("float32")
  return strategy, precision, jit_compile


def _export(mode, task, model, model_dir, checkpoint_path):
  """--mode=export (a SavedModel), export_tflite or export_onnx of the
  restored model."""
  run_dir.restore_model(model, model_dir, checkpoint_path)
  model = capabilities.require(task, capabilities.SavedModelServing,
                               f"--mode={mode}").serving_model(model)
  if mode == "export":
    return {"export_dir": export_lib.export_saved_model(task, model, model_dir)}
  if mode == "export_onnx":
    from bertexp.serving.exporting import onnx_export  # needs the [onnx] extra
    inputs, labels = _held_out(task, max_examples=onnx_export.MAX_EXAMPLES)
    return onnx_export.export_onnx(task, model, model_dir, inputs, labels)
  inputs, _ = _held_out(task, max_examples=256)
  return export_lib.export_tflite(task, model, model_dir, inputs)


def _held_out(task, max_examples):
  """Up to `max_examples` real rows of the evaluation data: (token ids
  {name: [N, S]}, labels [N] when every batch carries them, else None)."""
  names = ("input_word_ids", "input_mask", "input_type_ids")
  inputs, labels, batches = {name: [] for name in names}, [], 0
  for features, batch_labels in task.build_inputs("eval", batch_size=256):
    real = features["example_weight"] > 0
    for name in names:
      inputs[name].append(tf.boolean_mask(features[name], real))
    if isinstance(batch_labels, tf.Tensor) and batch_labels.shape.rank == 1:
      labels.append(tf.boolean_mask(batch_labels, real))
    batches += 1
    if sum(len(part) for part in inputs["input_mask"]) >= max_examples:
      break
  inputs = {name: tf.concat(parts, 0)[:max_examples]
            for name, parts in inputs.items()}
  if len(labels) != batches:
    return inputs, None
  return inputs, tf.concat(labels, 0)[:max_examples].numpy()


def _predict_after_training(model_dir, checkpoint_path, task, strategy,
                            step_settings, eval_steps):
  """As --mode=predict would, in this process: a float32 model with the
  weights of `checkpoint_path` (default: the last checkpoint)."""
  tf_keras.mixed_precision.set_global_policy("float32")
  with strategy.scope():
    model = task.build_model()
  return _evaluate_or_predict("predict", model_dir, checkpoint_path, task,
                              model, strategy, step_settings, eval_steps)


def _evaluate_or_predict(mode, model_dir, checkpoint_path, task, model,
                         strategy, step_settings, eval_steps):
  """--mode=eval (eval_results.json) or --mode=predict (the task's
  prediction files) of `model` with the weights of `checkpoint_path`
  (default: the newest intact checkpoint in model_dir)."""
  with strategy.scope():
    optimizer = tf_keras.optimizers.SGD()   # unused; gives a step counter
  path = run_dir.restore_model(model, model_dir, checkpoint_path)
  evaluator = trainer_lib.Trainer(task=task, model=model, optimizer=optimizer,
                                  strategy=strategy, settings=step_settings,
                                  total_steps=0)
  # Every worker computes the same results; only the chief's are the run's.
  output_dir = worker_model_dir(strategy, model_dir)
  if mode == "eval":
    results = {k: float(v) for k, v in evaluator.evaluate(eval_steps).items()}
    results["checkpoint"] = path
    fileio.write_json(run_files.eval_results(output_dir), results)
    print("Eval results: " + str(results), flush=True)
    return results
  predictions = _prediction_splits(task, f"--mode={mode}")
  return {split: predictions.write(evaluator.gather(split), output_dir, split)
          for split in predictions.splits}


def _train_examples(task):
  """Training examples per epoch the task declares (0: not counted)."""
  data = capabilities.find(task, capabilities.TrainingData)
  return data.num_examples() if data else 0


def _prediction_splits(task, action):
  """The task's capabilities.Predictions, with splits to write.

  Raises:
    ValueError: the task cannot predict, or no split was configured.
  """
  predictions = capabilities.require(task, capabilities.Predictions, action)
  if not predictions.splits:
    raise ValueError(f"{action} needs TEST_DATA_PATH (or "
                     "EXTRA_TEST_DATA_PATHS) bound")
  return predictions
