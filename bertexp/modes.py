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
  """
  name: str
  trains: bool
  help: str


TABLE = (
    Mode("train_and_eval", True, "train, evaluating every interval (default)"),
    Mode("train", True, "train without evaluating"),
    Mode("train_eval_predict", True,
         "train_and_eval, then predict in the same process"),
    Mode("eval", False, "evaluate a checkpoint -> eval_results.json"),
    Mode("predict", False, "predict the test splits -> prediction files"),
    Mode("export", False, "SavedModel in TF Serving's layout -> export/N/"),
    Mode("export_tflite", False, "TFLite float + int8 (export-tflite)"),
    Mode("export_onnx", False, "ONNX Runtime float32 + int8 (export-onnx)"),
    Mode("distill_targets", False, "a DistillationTask's teacher outputs, "
         "once, into its teacher_targets folder"),
    Mode("plan", False, "print the schedule and the memory plan; nothing "
         "is built or trained"),
)
ALIASES = {"export_only": "export"}
MODES = tuple(mode.name for mode in TABLE)
TRAINING_MODES = tuple(mode.name for mode in TABLE if mode.trains)


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
