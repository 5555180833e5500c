"""Classification's and regression's heads in an ONNX graph (what
ClassificationTask.onnx_head returns; see bertexp.model.onnx_graph).

Shape legend: B batch, H hidden size, L labels.
"""
import numpy as np

from bertexp.model import onnx_graph


def classifier_outputs(graph, logits, label_names):
  """{probabilities [B, L], label [B]} of a classifier's logits."""
  probabilities = graph.node("Softmax", [logits], axis=-1)
  best = graph.node("ArgMax", [probabilities], axis=1, keepdims=0)   # [B]
  names = graph.constant("label_names", np.array(label_names, dtype=object))
  return {"probabilities": probabilities,
          "label": graph.node("Gather", [names, best], axis=0)}


def regression_outputs(graph, logits):
  """{value [B]} of a one-output head's logits [B, 1]."""
  axes = graph.constant("squeeze_axes", np.array([1], np.int64))
  return {"value": graph.node("Squeeze", [logits, axes])}


def classifier_head(label_names):
  """The writer of a ClassifierModel's probabilities [B, L] and label [B]
  (the name of the most probable of `label_names`)."""
  def write(graph, model):
    logits = _pooled_dense(graph, model)
    return (classifier_outputs(graph, logits, list(label_names)),
            {"probabilities": ("float", ["batch", len(label_names)]),
             "label": ("string", ["batch"])})
  return write


def regression_head(graph, model):
  """The writer of a one-output ClassifierModel's value [B]."""
  return (regression_outputs(graph, _pooled_dense(graph, model)),
          {"value": ("float", ["batch"])})


def _pooled_dense(graph, model):
  """The classifier's logits [B, L] of the pooled output."""
  sequence = onnx_graph.encoder_output(graph, model.encoder)        # [B, S, H]
  pooled = onnx_graph.pooled_output(graph, sequence, model.encoder)  # [B, H]
  return onnx_graph.dense(graph, pooled, model.classifier, "classifier")
