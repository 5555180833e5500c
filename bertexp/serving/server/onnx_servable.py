"""An ONNX model version (`bertexp export-onnx`) behind `bertexp serve`:
serving_default on token ids, run by ONNX Runtime, and serve_text on raw
text when the version holds the text packer (text/: tokenizer and packing,
run by TensorFlow, then the ONNX model), with the same checks, errors and
batching as a SavedModel's.

Shape legend: B batch (rows of a request), S sequence length.
"""
import numpy as np
import tensorflow as tf

from bertexp.serving.exporting import onnx_export
from bertexp.serving.server import servable as servable_lib
from bertexp.serving.server.errors import ServingError
from bertexp.util import fileio

_DTYPES = {"tensor(float)": tf.float32, "tensor(int32)": tf.int32,
           "tensor(int64)": tf.int64, "tensor(string)": tf.string}


def _spec(node):
  """The tf.TensorSpec of an ONNX Runtime input or output (named dims are
  unknown)."""
  shape = [d if isinstance(d, int) else None for d in node.shape]
  return tf.TensorSpec(shape, _DTYPES[node.type], node.name)


class OnnxSignature:
  """serving_default of an ONNX model (see servable.Signature).

  Attributes:
    name: "serving_default".
    inputs: {input name: tf.TensorSpec}, int32 [B, S] token ids.
    outputs: {output name: tf.TensorSpec}.
  """

  def __init__(self, session):
    self.name = servable_lib.DEFAULT_SIGNATURE
    self._session = session
    self.inputs = {n.name: _spec(n) for n in session.get_inputs()}
    self.outputs = {n.name: _spec(n) for n in session.get_outputs()}

  def __call__(self, inputs):
    """{name: numpy [B, S]} -> {output name: numpy [B, ...]} (strings as
    bytes, as a SavedModel returns them).

    Raises:
      ServingError: INVALID_ARGUMENT when ONNX Runtime refuses the inputs
        (an id outside the vocabulary, a sequence past the position table).
    """
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors
    try:
      outputs = onnx_export.run(self._session, inputs)
    except ort_errors.InvalidArgument as e:     # e.g. an id past the vocab
      raise ServingError("INVALID_ARGUMENT", str(e)) from None
    return {name: (np.array([v.encode("utf-8") for v in value], dtype=object)
                   if value.dtype == object else value)
            for name, value in outputs.items()}


class OnnxTextSignature:
  """serve_text of an ONNX model: the text packer's token ids, then the
  model (see servable.Signature).

  Attributes:
    name: "serve_text".
    inputs: {input name: tf.TensorSpec}, string [B] (`text`, or `text_a`
      and `text_b`).
    outputs: the model's outputs.
  """

  def __init__(self, pack, model_signature):
    self.name = "serve_text"
    self._pack = pack
    self._model = model_signature
    self.inputs = dict(pack.structured_input_signature[1])
    self.outputs = model_signature.outputs

  def __call__(self, inputs):
    """{name: bytes [B]} -> {output name: numpy [B, ...]}."""
    ids = self._pack(**{k: tf.constant(v, tf.string)
                        for k, v in inputs.items()})      # {name: [B, S]}
    return self._model({k: v.numpy() for k, v in ids.items()})


class OnnxServable(servable_lib.ServableBase):
  """A version folder holding model.onnx, loaded (see ServableBase)."""

  def __init__(self, path, version):
    self.path, self.version = path, version
    # Read as bytes: the folder may be on gs://, ONNX Runtime reads locally.
    content = fileio.read_bytes(fileio.join(path, onnx_export.MODEL_FILE))
    # --tensorflow_intra_op_parallelism applies to ONNX Runtime too.
    threads = tf.config.threading.get_intra_op_parallelism_threads()
    signature = OnnxSignature(onnx_export.session(content, threads or None))
    self.signatures = {signature.name: signature}
    text_folder = fileio.join(path, onnx_export.TEXT_FOLDER)
    if tf.io.gfile.exists(fileio.join(text_folder, "saved_model.pb")):
      import tensorflow_text  # noqa: F401  (the tokenizer's ops)
      self._packer = tf.saved_model.load(text_folder)
      text = OnnxTextSignature(self._packer.signatures["serve_text"],
                               signature)
      self.signatures[text.name] = text
    self.signature_defs = {name: signature_def(value)
                           for name, value in self.signatures.items()}


def signature_def(signature):
  """The SignatureDef proto GetModelMetadata returns for `signature`."""
  from tensorflow.core.protobuf import meta_graph_pb2
  proto = meta_graph_pb2.SignatureDef(
      method_name="tensorflow/serving/predict")
  for field, specs in ((proto.inputs, signature.inputs),
                       (proto.outputs, signature.outputs)):
    for name, spec in specs.items():
      field[name].name = name
      field[name].dtype = spec.dtype.as_datatype_enum
      field[name].tensor_shape.CopyFrom(spec.shape.as_proto())
  return proto
