"""Capabilities: a task declares what it can do besides training; a shared
layer asks by kind and gets one line naming the task and the capability
when it is absent."""
import pytest

from bertexp import capabilities
from bertexp.tasks import base


class _Declares(base.Task):
  """A task with the core only, declaring what it is given."""

  def __init__(self, *declared):
    self.declared = declared

  def build_model(self):
    raise AssertionError("not built here")

  build_inputs = per_example_loss = eval_outputs = finalize_eval = build_model

  def capabilities(self):
    return self.declared


def _write(gathered, output_dir, split):
  return f"{output_dir}/{split}"


def test_a_declared_capability_is_found_by_kind():
  predictions = capabilities.Predictions(splits=["test"], write=_write)
  task = _Declares(predictions, capabilities.MemoryPlan(model_shape=tuple))
  assert capabilities.require(task, capabilities.Predictions,
                              "--mode=predict") is predictions
  assert capabilities.find(task, capabilities.OnnxGraph) is None


@pytest.mark.parametrize("kind,action,what", [
    (capabilities.OnnxGraph, "export-onnx", "an ONNX graph"),
    (capabilities.TfliteGraph, "export-tflite", "a TFLite export"),
    (capabilities.TeacherTargets, "--mode=distill_targets", "a teacher"),
    (capabilities.MemoryPlan, "--mode=plan", "a memory plan"),
    (capabilities.SavedModelServing, "--mode=export", "a SavedModel export"),
])
def test_an_absent_capability_is_one_line_naming_task_and_capability(
    kind, action, what):
  with pytest.raises(ValueError) as error:
    capabilities.require(_Declares(), kind, action)
  message = str(error.value)
  assert message.startswith(f"{action}: _Declares does not declare {what}")
  assert "\n" not in message


def test_the_task_core_is_a_dozen_methods_and_none_about_export():
  core = [name for name, value in vars(base.Task).items()
          if callable(value) and not name.startswith("_")]
  assert len(core) <= 12, core
  assert not [name for name in core if any(
      word in name for word in ("serv", "onnx", "tflite", "predict",
                                "teacher", "shape"))]


def test_merged_replaces_a_kind_and_keeps_the_others():
  data = capabilities.TrainingData(num_examples=lambda: 3)
  plan = capabilities.MemoryPlan(model_shape=tuple)
  student = capabilities.DistillationStudent(loss=max)
  offline = capabilities.DistillationStudent(loss=min, offline_targets=True)
  merged = capabilities.merged((data, student, plan), offline)
  assert merged == (data, plan, offline)


def test_two_capabilities_of_one_kind_are_an_error():
  task = _Declares(capabilities.MemoryPlan(model_shape=tuple),
                   capabilities.MemoryPlan(model_shape=list))
  with pytest.raises(ValueError, match="declares 2 MemoryPlan"):
    capabilities.find(task, capabilities.MemoryPlan)
