"""What a task can do besides training: capabilities it declares.

The Task core (bertexp/tasks/base.py) is what the Trainer needs: a model,
inputs, a loss, metrics and evaluation. Everything else — exports, serving,
Predictor methods, predictions, teacher targets, the memory plan — is a
capability: a small frozen object the task lists in `Task.capabilities()`.
A shared layer asks for the kind it needs:

    onnx = capabilities.require(task, capabilities.OnnxGraph, "export-onnx")

and a task that did not declare it gets one line naming the task and the
capability, never an AttributeError or a probe of what the task is. A new
capability is a new class here plus the one layer that asks for it; a task
gains it by listing an instance, in its own folder.

Shape legend: B examples, S sequence length, L labels.
"""
import dataclasses
from typing import (Any, Callable, ClassVar, Dict, List, Optional, Sequence,
                    Tuple, Type, TypeVar)


class Capability:
  """A capability kind; `what` names it in errors ("an ONNX graph")."""
  what: ClassVar[str] = "a capability"


def _same_model(model):
  return model


@dataclasses.dataclass(frozen=True)
class TrainingData(Capability):
  """The record files a task trains from.

  Each is a function, called only by what needs it (a meta data file may
  lack the training counts of a run that only exports).

  Attributes:
    num_examples: () -> training examples per epoch (0: unknown; epochs
      cannot be counted).
    files: () -> {"vocab_file": path or None, "data_files": [paths]}, for
      the run's provenance record.
    check: () -> None before the first step; raises a clear error when the
      files disagree with the configuration.
  """
  what: ClassVar[str] = "training data"
  num_examples: Callable[[], int] = lambda: 0
  files: Callable[[], Dict[str, Any]] = lambda: {"vocab_file": None,
                                                 "data_files": []}
  check: Callable[[], None] = lambda: None


@dataclasses.dataclass(frozen=True)
class SavedModelServing(Capability):
  """The task's models export as SavedModels (`--mode=export`).

  Attributes:
    outputs: model outputs -> {name: [B, ...] tensor} the export returns.
    serving_model: the trained model -> the model an export saves (a
      distillation's student alone); default the model itself.
    text: model -> a tf.Module whose `signature()` is the `serve_text`
      signature (raw text in, tracking the tokenizer), or None when the
      vocabulary is unknown; absent: the task serves token ids only.
    packer: model -> the tokenizer and packing of `text` alone (raw text ->
      ids), saved beside an ONNX model to give it `serve_text`; absent when
      raw-text serving needs more than packing.
  """
  what: ClassVar[str] = "a SavedModel export"
  outputs: Callable[[Any], Dict[str, Any]]
  serving_model: Callable[[Any], Any] = _same_model
  text: Optional[Callable[[Any], Any]] = None
  packer: Optional[Callable[[Any], Any]] = None


@dataclasses.dataclass(frozen=True)
class PredictorApi(Capability):
  """What `bertexp.Predictor` offers for the task's exports.

  Both are module-level functions: an export records their "module:name",
  so the module must be importable where the export is read.

  Attributes:
    decoder: function(outputs {name: [N, ...] numpy}, i) -> what
      `Predictor.predict` returns for row i (None: each output's value).
    methods: {name: function(predictor, *args)} offered as Predictor methods
      (a question-answering task's `answer`, multiple choice's `choose`).
  """
  what: ClassVar[str] = "Predictor methods"
  decoder: Optional[Callable[[Dict, int], Dict]] = None
  methods: Dict[str, Callable[..., Any]] = dataclasses.field(
      default_factory=dict)


def checked_text(value, what):
  """`value`, a string: what a PredictorApi method checks of its inputs.

  Raises:
    ValueError: it is not one (naming `what`, e.g. "row 3").
  """
  if not isinstance(value, str):
    raise ValueError(f"{what}: expected a string, got {type(value).__name__}")
  return value


@dataclasses.dataclass(frozen=True)
class OnnxGraph(Capability):
  """export-onnx: `head` writes the task's head (see bertexp.model.
  onnx_graph; called as head(graph, model) -> (outputs, output shapes))."""
  what: ClassVar[str] = "an ONNX graph (export a SavedModel with " \
      "--mode=export instead)"
  head: Callable[[Any, Any], Tuple[Dict, Dict]]


@dataclasses.dataclass(frozen=True)
class TfliteGraph(Capability):
  """export-tflite.

  Attributes:
    outputs: model outputs -> {name: [B, ...]} the TFLite model returns.
    seq_length: the models' fixed number of tokens.
    compared: the output (scores [B, L]) whose argmax and values are
      compared with the Keras model's in the export's report.
  """
  what: ClassVar[str] = "a TFLite export"
  outputs: Callable[[Any], Dict[str, Any]]
  seq_length: int
  compared: str = "probabilities"


@dataclasses.dataclass(frozen=True)
class DistillationStudent(Capability):
  """A DistillationTask may train this task as its student.

  Attributes:
    loss: (teacher outputs, student outputs, temperature T) -> [B] float32,
      how far the student is from the teacher.
    offline_targets: whether a teacher's outputs may be written once
      (--mode=distill_targets) and trained from: a fixed width per example.
  """
  what: ClassVar[str] = "a distillation student"
  loss: Callable[[Any, Any, float], Any]
  offline_targets: bool = False


@dataclasses.dataclass(frozen=True)
class TeacherTargets(Capability):
  """--mode=distill_targets: write(model) writes a teacher's outputs once
  and returns what it wrote."""
  what: ClassVar[str] = "a teacher (bind bertexp.experiment.task to a " \
      "task that distils, e.g. @bertexp.DistillationTask())"
  write: Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class Predictions(Capability):
  """--mode=predict: prediction files for `splits`.

  Attributes:
    splits: the splits predictions are written for (may be empty: no
      unlabelled data was configured).
    write: (gathered {name: numpy} of eval_outputs over the split,
      output_dir, split) -> what was written.
  """
  what: ClassVar[str] = "predictions"
  splits: List[str]
  write: Callable[[Dict[str, Any], str, str], Any]


@dataclasses.dataclass(frozen=True)
class MemoryPlan(Capability):
  """--mode=plan: model_shape() -> (BertConfig, max_seq_length,
  bertexp.model.memory_plan.Head), read without building the model."""
  what: ClassVar[str] = "a memory plan"
  model_shape: Callable[[], Tuple[Any, int, Any]]


@dataclasses.dataclass(frozen=True)
class RunHooks(Capability):
  """Work around training besides the loop's own.

  Attributes:
    after_training: (model, model_dir) -> None once training ends (e.g.
      pretraining writes its encoder).
    initialisation: () -> how build_model initialised weights besides
      INIT_CHECKPOINT (layers copied from a teacher), for the log and the
      Training Summary; None when it did not.
  """
  what: ClassVar[str] = "run hooks"
  after_training: Optional[Callable[[Any, str], None]] = None
  initialisation: Optional[Callable[[], Optional[str]]] = None


C = TypeVar("C", bound=Capability)


def merged(declared: Sequence[Capability], *more: Capability
           ) -> Tuple[Capability, ...]:
  """`declared` with `more` added, each replacing a capability of its kind
  (a subclass extending or overriding what its base declares)."""
  kinds = {type(c) for c in more}
  return tuple(c for c in declared if type(c) not in kinds) + more


def find(task, kind: Type[C]) -> Optional[C]:
  """The task's declared capability of `kind`, or None.

  Raises:
    ValueError: the task declares two of that kind.
  """
  found = [c for c in task.capabilities() if isinstance(c, kind)]
  if len(found) > 1:
    raise ValueError(f"{type(task).__name__} declares {len(found)} "
                     f"{kind.__name__} capabilities: expected one")
  return found[0] if found else None


def require(task, kind: Type[C], action: str) -> C:
  """The task's declared capability of `kind`.

  Args:
    task: a Task.
    kind: a Capability subclass.
    action: what asked for it, for the error ("export-onnx").
  Raises:
    ValueError: (one line) the task does not declare it.
  """
  found = find(task, kind)
  if found is None:
    raise ValueError(f"{action}: {type(task).__name__} does not declare "
                     f"{kind.what}")
  return found
