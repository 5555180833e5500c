"""TF Serving's gRPC API (tensorflow.serving.PredictionService and
ModelService, from the tensorflow-serving-api package's own protos), for
`bertexp serve`: Predict, GetModelMetadata and GetModelStatus. A request's
fault is answered with its status code (INVALID_ARGUMENT, NOT_FOUND,
RESOURCE_EXHAUSTED, UNAVAILABLE) and the server keeps serving.
"""
import logging
import math

import grpc
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import (get_model_metadata_pb2,
                                     get_model_status_pb2, model_service_pb2_grpc,
                                     predict_pb2, prediction_service_pb2_grpc)

from bertexp.serving.server.errors import ServingError


def _version(model_spec):
  return model_spec.version.value if model_spec.HasField("version") else None


def _answer_errors(method):
  """Turns ServingError into the RPC's status; keeps tracebacks of the
  rest in the log (INTERNAL)."""
  def wrapped(self, request, context):
    try:
      return method(self, request, context)
    except ServingError as e:
      context.abort(getattr(grpc.StatusCode, e.code), e.message)
    except Exception as e:  # pylint: disable=broad-except
      logging.exception("internal error in %s", method.__name__)
      context.abort(grpc.StatusCode.INTERNAL,
                    f"internal error: {type(e).__name__}: {e}")
  wrapped.__name__ = method.__name__
  return wrapped


# Numeric dtypes read and written as raw bytes (tensor_content).
_RAW = {np.dtype(np.float32): types_pb2.DT_FLOAT,
        np.dtype(np.float64): types_pb2.DT_DOUBLE,
        np.dtype(np.int32): types_pb2.DT_INT32,
        np.dtype(np.int64): types_pb2.DT_INT64}
_RAW_BY_ENUM = {enum: dtype for dtype, enum in _RAW.items()}


def tensor_proto(array):
  """A TensorProto of a numpy array, built directly (tf.make_tensor_proto's
  checks cost more than the whole copy at batch 1): float32/64 and
  int32/64 as raw bytes (tensor_content, what TF Serving writes), bytes as
  string_val; any other dtype through tf.make_tensor_proto."""
  array = np.asarray(array)
  if array.dtype in _RAW:
    proto = tensor_pb2.TensorProto(dtype=_RAW[array.dtype],
                                   tensor_content=array.tobytes())
  elif array.dtype == object and all(isinstance(v, bytes)
                                     for v in array.flat):
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING,
                                   string_val=list(array.flat))
  else:
    return tf.make_tensor_proto(array)
  for size in array.shape:
    proto.tensor_shape.dim.add(size=size)
  return proto


def ndarray(proto):
  """The numpy array a request's TensorProto holds: raw numeric bytes read
  in place, every other form (value lists, strings) by tf.make_ndarray.

  Raises:
    ValueError: the bytes do not fill the declared shape.
  """
  dtype = _RAW_BY_ENUM.get(proto.dtype)
  if dtype is None or not proto.tensor_content:
    return tf.make_ndarray(proto)
  shape = [dim.size for dim in proto.tensor_shape.dim]
  values = np.frombuffer(proto.tensor_content, dtype)
  if values.size != math.prod(shape):
    raise ValueError(f"tensor_content holds {values.size} values, the "
                     f"shape {shape} needs {math.prod(shape)}")
  return values.reshape(shape)


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
  """Predict and GetModelMetadata of a model_server.Models."""

  def __init__(self, server):
    self._server = server

  @_answer_errors
  def Predict(self, request, context):  # pylint: disable=invalid-name
    spec = request.model_spec
    try:
      inputs = {k: ndarray(v) for k, v in request.inputs.items()}
    except (TypeError, ValueError) as e:
      raise ServingError("INVALID_ARGUMENT", f"unreadable TensorProto: "
                         f"{e}") from None
    servable, outputs = self._server.predict(
        spec.name, _version(spec), spec.signature_name, inputs)
    wanted = set(request.output_filter) or set(outputs)
    unknown = sorted(wanted - set(outputs))
    if unknown:
      raise ServingError("INVALID_ARGUMENT", f"output_filter names "
                         f"{unknown}, not outputs of this signature "
                         f"({sorted(outputs)})")
    response = predict_pb2.PredictResponse()
    response.model_spec.name = spec.name
    response.model_spec.version.value = servable.version
    response.model_spec.signature_name = spec.signature_name or \
        "serving_default"
    for name in wanted:
      response.outputs[name].CopyFrom(tensor_proto(outputs[name]))
    return response

  @_answer_errors
  def GetModelMetadata(self, request, context):  # pylint: disable=invalid-name
    fields = list(request.metadata_field)
    if fields != ["signature_def"]:
      raise ServingError("INVALID_ARGUMENT", f"metadata_field {fields}: "
                         "only [\"signature_def\"] is available")
    spec = request.model_spec
    servable = self._server.servable(spec.name, _version(spec))
    signatures = get_model_metadata_pb2.SignatureDefMap()
    for key, proto in servable.signature_defs.items():
      signatures.signature_def[key].CopyFrom(proto)
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    response.model_spec.name = spec.name
    response.model_spec.version.value = servable.version
    response.metadata["signature_def"].Pack(signatures)
    return response


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
  """GetModelStatus of a model_server.Models."""

  _STATES = get_model_status_pb2.ModelVersionStatus.State

  def __init__(self, server):
    self._server = server

  @_answer_errors
  def GetModelStatus(self, request, context):  # pylint: disable=invalid-name
    spec = request.model_spec
    response = get_model_status_pb2.GetModelStatusResponse()
    for version, state, error in self._server.status(spec.name,
                                                     _version(spec)):
      status = response.model_version_status.add()
      status.version = version
      status.state = self._STATES.Value(state)
      if error:
        status.status.error_code = grpc.StatusCode.UNKNOWN.value[0]
        status.status.error_message = error
    return response


def add_services(grpc_server, server):
  """Registers both services of `server` on a grpc.Server."""
  prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
      PredictionServicer(server), grpc_server)
  model_service_pb2_grpc.add_ModelServiceServicer_to_server(
      ModelServicer(server), grpc_server)
