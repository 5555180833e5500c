"""`bertexp export-onnx`: a run's checkpoint as ONNX Runtime models, float32
and int8, checked against the Keras model they were written from.

Writes, in TF Serving's layout of numeric versions (so that `bertexp serve
MODEL_DIR/onnx/int8` serves it, polling for new versions as for a
SavedModel):

    MODEL_DIR/onnx/float32/<version>/model.onnx   (bertexp.model.onnx_graph)
    MODEL_DIR/onnx/int8/<version>/model.onnx      ONNX Runtime's dynamic
        quantization of the matmul and attention weights: int8 weights with a
        scale per output column, activations quantized per call
    MODEL_DIR/onnx/<kind>/<version>/text/         for classification and
        regression: a SavedModel of the tokenizer and packing alone (raw
        text -> token ids), which gives the served ONNX model `serve_text`
    MODEL_DIR/onnx/onnx_report.json               each file's size and its
        agreement with the float32 Keras model on held-out token ids

The version is seconds since the epoch, as for `--mode=export`.
"""
import logging
import os
import sys
import time

import numpy as np

from bertexp.checkpoints import run_files
from bertexp.model import onnx_graph
from bertexp import capabilities
from bertexp.util import fileio

MODEL_FILE = "model.onnx"
TEXT_FOLDER = "text"      # the text packer SavedModel beside model.onnx
KINDS = ("float32", "int8")
# What dynamic quantization touches: the weights of every matmul (MatMul
# and the fused Attention's QKV projection). Embedding tables stay float32,
# as TFLite's dynamic-range quantization leaves them.
QUANTIZED_OPS = ["MatMul", "Attention"]
# Held-out rows the report compares on (the first of the evaluation data).
MAX_EXAMPLES = 2048


def build_model_proto(model, head):
  """The ONNX ModelProto of a restored serving model.

  Args:
    model: a task's serving model, weights restored.
    head: the task's head writer (its capabilities.OnnxGraph, see
      bertexp.model.onnx_graph).
  Returns:
    onnx.ModelProto with serving_default's inputs and outputs.
  Raises:
    ValueError: an encoder the graph cannot express.
  """
  graph = onnx_graph.GraphBuilder()
  outputs, shapes = head(graph, model)
  return onnx_graph.model_proto(graph, outputs, shapes, producer="bertexp")


def session(model, threads=None):
  """An ONNX Runtime CPU session, every graph optimisation on.

  Args:
    model: a local .onnx path or the file's bytes.
    threads: intra-op threads (default: one per logical core, as
      TensorFlow takes them).
  """
  import onnxruntime as ort
  options = ort.SessionOptions()
  options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
  options.log_severity_level = 4    # refused inputs raise; no stderr copy
  options.intra_op_num_threads = threads or os.cpu_count()
  return ort.InferenceSession(model, options,
                              providers=["CPUExecutionProvider"])


def run(onnx_session, inputs):
  """{output name: numpy} of int32 token-id inputs {name: [B, S]}."""
  names = [o.name for o in onnx_session.get_outputs()]
  feed = {k: np.asarray(inputs[k], np.int32) for k in onnx_graph.INPUT_NAMES}
  return dict(zip(names, onnx_session.run(names, feed)))


def agreement(expected, got, labels=None, mask=None):
  """How an ONNX model's outputs match the Keras model's on the same rows:
  max |difference| of every float output, argmax agreement of
  probabilities / span logits, and with a classifier's `labels` [N] both
  models' accuracy.

  Args:
    expected, got: {output name: numpy} of the Keras and the ONNX model.
    labels: a classifier's labels [N], or None.
    mask: the rows' input_mask [N, S], or None: a per-position output
      ([N, S], e.g. span logits) is compared on real tokens only (padding
      sits at -10000, where one float32 step is 1e-3).
  Returns:
    {figure name: value}.
  """
  report = {}
  if labels is not None and "probabilities" in got:
    report["accuracy"] = float((got["probabilities"].argmax(-1) ==
                                labels).mean())
    report["keras_accuracy"] = float((expected["probabilities"].argmax(-1) ==
                                      labels).mean())
  for name, want in expected.items():
    if want.dtype.kind != "f":
      continue
    difference = np.abs(got[name] - want)
    if mask is not None and difference.shape == np.shape(mask):
      difference = difference[np.asarray(mask) > 0]
    report[f"max_abs_diff_{name}"] = float(difference.max())
    if name != "value":
      report[f"argmax_agreement_{name}"] = float(
          (got[name].argmax(-1) == want.argmax(-1)).mean())
  return report


def export_onnx(task, model, model_dir, inputs, labels=None, version=None):
  """Writes MODEL_DIR/onnx/ (see the module docstring).

  Args:
    task: the task.
    model: its serving model, weights restored, float32.
    model_dir: the run.
    inputs: held-out token ids {name: int32 [N, S]} for the agreement check.
    labels: their labels [N] (a classifier's accuracy in the report) or
      None.
    version: the version folder's number (default: seconds since the epoch).
  Returns:
    The report ({"float32": {...}, "int8": {...}}), also onnx_report.json.
  """
  import tempfile
  import tensorflow as tf
  graph = capabilities.require(task, capabilities.OnnxGraph, "export-onnx")
  serving = capabilities.require(task, capabilities.SavedModelServing,
                                 "export-onnx")
  version = version or int(time.time())
  expected = _in_batches(lambda rows: {
      k: np.asarray(v) for k, v in serving.outputs(
          model(rows, training=False)).items()}, inputs)
  proto = build_model_proto(model, graph.head)
  report = {}
  # ONNX Runtime reads local files: built in a local folder, then copied
  # (MODEL_DIR may be gs://); each version folder appears whole.
  with tempfile.TemporaryDirectory() as local:
    paths = {kind: os.path.join(local, f"{kind}.onnx") for kind in KINDS}
    with open(paths["float32"], "wb") as f:
      f.write(proto.SerializeToString())
    quantize(paths["float32"], paths["int8"])
    for kind, path in paths.items():
      target = run_files.onnx(model_dir, kind, version)
      onnx_session = session(path)
      got = _in_batches(lambda rows: run(onnx_session, rows), inputs)
      report[kind] = dict(path=fileio.join(target, MODEL_FILE),
                          bytes=os.path.getsize(path),
                          examples=int(len(inputs["input_word_ids"])),
                          **agreement(expected, got, labels,
                                      inputs["input_mask"]))
      with fileio.atomic_folder(target) as tmp:
        tf.io.gfile.copy(path, fileio.join(tmp, MODEL_FILE), overwrite=True)
        save_text_packer(task, model, tmp)
      print(f"ONNX {kind}: {report[kind]['bytes'] / 1e6:.2f} MB, " + ", ".join(
          f"{k} {v:.4g}" for k, v in report[kind].items()
          if k.startswith(("max_abs", "argmax", "accuracy"))) +
          f" on {report[kind]['examples']} held-out examples -> {target}",
          flush=True)
  fileio.write_json(run_files.onnx_report(model_dir), report)
  return report


def save_text_packer(task, model, folder):
  """Writes folder/text/: the task's raw-text tokenizer and packing as a
  SavedModel whose `serve_text` returns token ids.

  Returns:
    True when written; False for a task whose raw-text serving is more
    than packing (question answering, tagging) or that has none (no
    vocabulary file), with a line saying so.
  """
  import tensorflow as tf
  serving = capabilities.find(task, capabilities.SavedModelServing)
  packer = serving.packer(model) if serving and serving.packer else None
  if packer is None:
    print(f"{folder}: no serve_text for this ONNX model (the task's raw-text "
          "serving needs more than tokenizing; send token ids)", flush=True)
    return False
  tf.saved_model.save(packer, fileio.join(folder, TEXT_FOLDER),
                      signatures={"serve_text": packer.signature()})
  return True


def _in_batches(call, inputs, batch_size=256):
  """call(rows) on `inputs` [N, ...] 256 rows at a time, outputs joined."""
  size = len(inputs["input_word_ids"])
  parts = [call({k: np.asarray(v)[start:start + batch_size]
                 for k, v in inputs.items()})
           for start in range(0, size, batch_size)]
  return {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}


def quantize(float_path, int8_path):
  """ONNX Runtime's dynamic int8 quantization of QUANTIZED_OPS' weights,
  per output column.

  ONNX Runtime's quantization package appends its transformers folder to
  sys.path when imported, which makes its `models` folder a top-level
  package: gin then reads `include 'models/...'` as that package and fails.
  sys.path is restored when the quantization is done."""
  from onnx import TensorProto
  quiet = logging.root.manager.disable
  saved_path = list(sys.path)
  logging.disable(logging.INFO)       # a line per tensor otherwise
  try:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    quantize_dynamic(float_path, int8_path, weight_type=QuantType.QInt8,
                     op_types_to_quantize=QUANTIZED_OPS, per_channel=True,
                     # ONNX's shape inference does not know the fused
                     # com.microsoft ops: their outputs are float32.
                     extra_options={"DefaultTensorType": TensorProto.FLOAT})
  finally:
    logging.disable(quiet)
    sys.path[:] = saved_path
