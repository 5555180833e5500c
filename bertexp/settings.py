"""What an experiment is run with, as four typed, gin-configurable settings
objects (each field documented once, here):

    bertexp.ScheduleSettings.train_batch_size = %TRAIN_BATCH_SIZE
    bertexp.StepOptions.gradient_accumulation_steps = 2
    bertexp.CheckpointSettings.best_metric = "f1"
    bertexp.RuntimeSettings.seed = %SEED

`bertexp.experiment` also takes any field by its own name
(`bertexp.experiment.train_batch_size = 64`, as files written before these
objects do); such a binding wins over the object's.
"""
import dataclasses
from typing import Any, Dict, Optional, Union

import gin


@gin.configurable(module="bertexp")
@dataclasses.dataclass(frozen=True)
class ScheduleSettings:
  """How much data, in which batches, between which evaluations.

  Attributes:
    train_batch_size: examples per optimizer step, over all replicas (the
      paper's batch; accumulation splits it, see StepOptions).
    eval_batch_size: examples per evaluation batch, over all replicas.
    num_train_epochs: passes over the training data.
    train_steps: optimizer steps, overriding num_train_epochs (None: from
      the epochs).
    num_eval_per_epoch: evaluations (and checkpoint intervals) per epoch.
    eval_interval_steps: train steps between evaluations (and, unless
      CheckpointSettings says otherwise, checkpoints), instead of an epoch's
      share (None: num_eval_per_epoch decides). Hugging Face's --eval_steps,
      Model Garden's validation_interval: for a run whose epochs are
      seconds apart, or hours.
    warmup_fraction: share of the steps the learning rate warms up over.
    warmup_steps: steps the learning rate warms up over, instead of
      warmup_fraction (None: from the fraction). Hugging Face's
      --warmup_steps; what papers that give a step count mean.
    steps_per_loop: steps per compiled loop between host work (TPUs want
      thousands).
    eval_steps: evaluation batches (-1: the whole evaluation set, the only
      honest default).
  """
  train_batch_size: int = 32
  eval_batch_size: int = 32
  num_train_epochs: float = 3
  train_steps: Optional[int] = None
  num_eval_per_epoch: int = 1
  eval_interval_steps: Optional[int] = None
  warmup_fraction: float = 0.1
  warmup_steps: Optional[int] = None
  steps_per_loop: int = 1000
  eval_steps: int = -1


@gin.configurable(module="bertexp")
@dataclasses.dataclass(frozen=True)
class StepOptions:
  """How each train step runs.

  Attributes:
    clip_norm: the global gradient norm is clipped to this (None: off).
    gradient_accumulation_steps: K micro-batches of train_batch_size / K per
      replica, their gradients summed into one optimizer step.
    pad_to_multiple_of: dynamic padding: each batch cut to its longest real
      sequence rounded up to this multiple ("auto": exact on CPUs, 8 on
      GPUs; None or 0: every batch keeps max_seq_length; TPUs always do).
    group_by_length: training batches of similar lengths (changes which
      examples share a batch, so off by default).
    summary_histograms_every: per-layer gradient and weight norms and
      histograms every this many steps (None: off, for speed).
    loss_upper_bound: a step whose loss is above it is skipped (None: none).
    max_consecutive_bad_steps: skipped (non-finite) steps in a row before
      the run rolls back to an intact checkpoint.
    recovery_max_trials: roll-backs before the run gives up.
  """
  clip_norm: Optional[float] = 1.0
  gradient_accumulation_steps: int = 1
  pad_to_multiple_of: Union[int, str, None] = "auto"
  group_by_length: bool = False
  summary_histograms_every: Optional[int] = None
  loss_upper_bound: Optional[float] = None
  max_consecutive_bad_steps: int = 25
  recovery_max_trials: int = 3


@gin.configurable(module="bertexp")
@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
  """Where weights come from and which ones a run keeps.

  Attributes:
    init_checkpoint: the pretrained encoder (a bertexp checkpoint, or a
      training run's: see run_dir.initialise_from_checkpoint).
    init_optimizer_state: with a training run's INIT_CHECKPOINT, its
      optimizer moments too.
    require_pretrained_encoder: a fresh training run without
      INIT_CHECKPOINT or HUB_MODULE_URL is an error.
    predict_checkpoint_path: what predict and export read (default: the
      newest intact checkpoint; a folder resolves through
      best_checkpoint.json).
    checkpoint_interval_steps: steps between checkpoints (None: one
      evaluation interval: ScheduleSettings.eval_interval_steps or an
      epoch's share).
    max_checkpoints: checkpoints kept.
    best_metric, best_mode: what MODEL_DIR/best_checkpoint/ keeps during
      train_and_eval (default: the task's selection metric; "max" or
      "min").
    early_stopping_patience: evaluations in a row without an improvement of
      best_metric by more than early_stopping_min_delta before training
      stops (None: never); the run then keeps best_checkpoint/.
    early_stopping_min_delta: see early_stopping_patience.
    eval_before_training: evaluate the initial weights first.
  """
  init_checkpoint: Optional[str] = None
  init_optimizer_state: bool = False
  require_pretrained_encoder: bool = False
  predict_checkpoint_path: Optional[str] = None
  checkpoint_interval_steps: Optional[int] = None
  max_checkpoints: int = 5
  best_metric: Optional[str] = None
  best_mode: str = "max"
  early_stopping_patience: Optional[int] = None
  early_stopping_min_delta: float = 0.0
  eval_before_training: bool = False


@gin.configurable(module="bertexp")
@dataclasses.dataclass(frozen=True)
class RuntimeSettings:
  """The process: seeds, threads, determinism.

  Attributes:
    seed: the seed of initialisers, dropout and the data order (None: drawn
      once and kept in the checkpoint).
    cpu_threads: TensorFlow's intra- and inter-op threads (None: its own).
    deterministic: TensorFlow's op determinism (slower; bit-identical
      reruns).
  """
  seed: Optional[int] = None
  cpu_threads: Optional[int] = None
  deterministic: bool = False


@dataclasses.dataclass(frozen=True)
class Settings:
  """The four settings objects of one experiment."""
  schedule: ScheduleSettings
  steps: StepOptions
  checkpoints: CheckpointSettings
  runtime: RuntimeSettings

  def flat(self) -> Dict[str, Any]:
    """{field: value} of all four objects."""
    return {k: v for part in (self.schedule, self.steps, self.checkpoints,
                              self.runtime)
            for k, v in dataclasses.asdict(part).items()}


# bertexp.experiment's own parameters; any other name bound on it is a field.
EXPERIMENT_PARAMETERS = ("mode", "model_dir", "task", "schedule", "steps",
                         "checkpoints", "runtime", "config_text")
_OBJECTS = (ScheduleSettings, StepOptions, CheckpointSettings, RuntimeSettings)


def check_fields(names):
  """Raises ValueError naming the first of `names` that is no settings
  field (one line, with the fields)."""
  fields = sorted(f.name for cls in _OBJECTS for f in dataclasses.fields(cls))
  for name in sorted(names):
    if name not in fields:
      raise ValueError(f"bertexp.experiment.{name}: not a setting; the "
                       f"settings are {fields}")


def resolve(schedule=None, steps=None, checkpoints=None, runtime=None,
            overrides=None) -> Settings:
  """The experiment's Settings: each object as given, else built from its
  gin bindings, then `overrides` ({field: value}, e.g. the
  `bertexp.experiment.<field>` bindings) applied over them.

  Raises:
    ValueError: an override that names no field (the one-line error names
      it and the fields).
  """
  parts = {"schedule": schedule or ScheduleSettings(),
           "steps": steps or StepOptions(),
           "checkpoints": checkpoints or CheckpointSettings(),
           "runtime": runtime or RuntimeSettings()}
  owner = {field.name: name for name, part in parts.items()
           for field in dataclasses.fields(part)}
  check_fields(overrides or {})
  changes = {name: {} for name in parts}
  for field, value in (overrides or {}).items():
    changes[owner[field]][field] = value
  return Settings(**{name: dataclasses.replace(part, **changes[name])
                     for name, part in parts.items()})
