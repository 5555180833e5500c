"""The modes of `bertexp train --mode`: one table that the command line and
the experiment both read (it imports nothing, so `--help` stays fast)."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Mode:
  """One mode.

  Attributes:
    name: the --mode value.
    trains: the mode trains (writes checkpoints, config.gin, the summary).
    help: one line for `bertexp train --help`.
    exports: the mode writes an export of the restored model.
    float32: the mode computes in float32 whatever the training precision
      (served models, predictions and teacher targets give the numbers an
      export gives).
    schedule: the mode derives the schedule from the data (training and
      the plan).
  """
  name: str
  trains: bool
  help: str
  exports: bool = False
  float32: bool = False
  schedule: bool = False


TABLE = (
    Mode("train_and_eval", True, "train, evaluating every interval (default)",
         schedule=True),
    Mode("train", True, "train without evaluating", schedule=True),
    Mode("train_eval_predict", True,
         "train_and_eval, then predict in the same process", schedule=True),
    Mode("eval", False, "evaluate a checkpoint -> eval_results.json"),
    Mode("predict", False, "predict the test splits -> prediction files",
         float32=True),
    Mode("export", False, "SavedModel in TF Serving's layout -> export/N/",
         exports=True, float32=True),
    Mode("export_tflite", False, "TFLite float + int8 (export-tflite)",
         exports=True, float32=True),
    Mode("export_onnx", False, "ONNX Runtime float32 + int8 (export-onnx)",
         exports=True, float32=True),
    Mode("distill_targets", False, "a DistillationTask's teacher outputs, "
         "once, into its teacher_targets folder", float32=True),
    Mode("plan", False, "print the schedule and the memory plan; nothing "
         "is built or trained", schedule=True),
)
ALIASES = {"export_only": "export"}
MODES = tuple(mode.name for mode in TABLE)
TRAINING_MODES = tuple(mode.name for mode in TABLE if mode.trains)
_BY_NAME = {mode.name: mode for mode in TABLE}


def trains(name):
  """Whether mode `name` trains."""
  return _BY_NAME[canonical(name)].trains


def exports(name):
  """Whether mode `name` writes an export."""
  return _BY_NAME[canonical(name)].exports


def serves_float32(name):
  """Whether mode `name` computes in float32 whatever the training
  precision."""
  return _BY_NAME[canonical(name)].float32


def derives_schedule(name):
  """Whether mode `name` derives the schedule from the data."""
  return _BY_NAME[canonical(name)].schedule


def canonical(name):
  """The table's name for `name` (aliases resolved).

  Raises:
    ValueError: `name` is not a mode.
  """
  name = ALIASES.get(name, name)
  if name not in MODES:
    raise ValueError(f"--mode={name!r} is not one of {MODES}")
  return name


def help_text():
  """`--mode` help: each mode with its line."""
  return "; ".join(f"{mode.name}: {mode.help}" for mode in TABLE)
