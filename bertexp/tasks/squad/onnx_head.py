"""Question answering's span head in an ONNX graph (what
QuestionAnsweringTask.onnx_head returns; see bertexp.model.onnx_graph).

Shape legend: B batch, S sequence length, H hidden size.
"""
import numpy as np

from bertexp.model import onnx_graph


def span_outputs(graph, logits):
  """{start_logits, end_logits [B, S]} of span logits [B, S, 2], padding
  at -10000 as SpanModel gives them."""
  mask = graph.node("Cast", ["input_mask"], to=1)                    # float
  padding = graph.node("Mul", [
      graph.node("Sub", [graph.constant("one", np.array(1.0, np.float32)),
                         mask]),
      graph.constant("padding_logit", np.array(-10000.0, np.float32))])
  outputs = {}
  for index, name in enumerate(("start_logits", "end_logits")):
    column = graph.node("Gather", [logits, graph.constant(
        f"{name}_column", np.array(index, np.int64))], axis=2)       # [B, S]
    outputs[name] = graph.node("Add", [column, padding])
  return outputs


def span_head(graph, model):
  """The writer of a span model's start_logits and end_logits [B, S] (its
  dense layer `span_head` on the sequence output)."""
  sequence = onnx_graph.encoder_output(graph, model.encoder)        # [B, S, H]
  outputs = span_outputs(graph, onnx_graph.dense(graph, sequence,
                                                 model.span_head, "span"))
  return outputs, {name: ("float", ["batch", "sequence"]) for name in outputs}
