"""One loaded version of an export: its signatures, the checks a request's
inputs must pass, and the call.

Shape legend: B batch (rows of a request), S sequence length.
"""

import numpy as np
import tensorflow as tf

from bertexp.serving.exporting import export
from bertexp.serving.server.errors import ServingError
from bertexp.util import fileio

DEFAULT_SIGNATURE = "serving_default"


class Signature:
  """One signature: its input and output specs and its function.

  Attributes:
    name: the signature's key ("serving_default", "serve_text").
    inputs: {input name: tf.TensorSpec}, e.g. input_word_ids int32 [B, S] or
      text string [B].
    outputs: {output name: tf.TensorSpec}.
  """

  def __init__(self, name, function):
    self.name = name
    self.function = function
    self.inputs = dict(function.structured_input_signature[1])
    self.outputs = dict(function.structured_outputs)

  def __call__(self, inputs):
    """{name: numpy [B, ...]} -> {output name: numpy [B, ...]}.

    Raises:
      ServingError: INVALID_ARGUMENT when the model's graph refuses the
        inputs (its own checks, e.g. a context with too few choices), as TF
        Serving passes the model's status on.
    """
    try:
      outputs = self.function(**{k: tf.constant(v, self.inputs[k].dtype)
                                 for k, v in inputs.items()})
    except tf.errors.InvalidArgumentError as e:
      raise ServingError("INVALID_ARGUMENT", export.graph_refusal(e)) from None
    return {k: v.numpy() for k, v in outputs.items()}


class ServableBase:
  """One loaded version and its signatures.

  Attributes:
    version: the numeric version.
    path: its folder.
    signatures: {name: Signature}.
    signature_defs: SignatureDef protos, {name: proto} (what
      GetModelMetadata returns).
  """
  version: int
  path: str
  signatures: dict
  signature_defs: dict

  def signature(self, name):
    """The signature `name` ("" means serving_default).

    Raises:
      ServingError: INVALID_ARGUMENT naming the signatures there are.
    """
    name = name or DEFAULT_SIGNATURE
    if name not in self.signatures:
      raise ServingError(
          "INVALID_ARGUMENT", f"Serving signature name: \"{name}\" not found "
          f"in signature def (this model has {sorted(self.signatures)})")
    return self.signatures[name]


class Servable(ServableBase):
  """A SavedModel version, loaded and ready (see ServableBase)."""

  def __init__(self, path, version):
    import tensorflow_text  # noqa: F401  (serve_text's tokenizer ops)
    from tensorflow.core.protobuf import saved_model_pb2
    self.path, self.version = path, version
    self._loaded = tf.saved_model.load(path)
    self.signatures = {name: Signature(name, fn) for name, fn in
                       self._loaded.signatures.items()}
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(fileio.read_bytes(fileio.join(path,
                                                        "saved_model.pb")))
    self.signature_defs = dict(proto.meta_graphs[0].signature_def)


def check_inputs(signature, inputs, *, max_text_bytes):
  """A request's inputs as arrays of the signature's dtypes, checked.

  Args:
    signature: the Signature called.
    inputs: {input name: array-like} (from JSON or TensorProtos).
    max_text_bytes: the longest text (UTF-8 bytes) a string input may hold.
  Returns:
    ({input name: numpy [B, ...]}, B).
  Raises:
    ServingError: INVALID_ARGUMENT naming the input and what was expected:
      a missing or unknown input, a wrong dtype or rank, rows or sequence
      lengths that differ between inputs, an empty batch, empty or oversize
      text.
  """
  missing = sorted(set(signature.inputs) - set(inputs))
  unknown = sorted(set(inputs) - set(signature.inputs))
  if missing or unknown:
    raise ServingError(
        "INVALID_ARGUMENT", f"signature {signature.name} takes inputs "
        f"{sorted(signature.inputs)}: " + "; ".join(
            part for part in (missing and f"missing {missing}",
                              unknown and f"unknown {unknown}") if part))
  arrays = {name: _as_array(name, value, signature.inputs[name],
                            max_text_bytes)
            for name, value in inputs.items()}
  shapes = {name: a.shape for name, a in arrays.items()}
  # One row per example in every input; inputs of one rank (token ids,
  # mask, types [B, S]) of one shape. A context [B] may come with its
  # choices [B, N].
  by_rank = {}
  for shape in shapes.values():
    by_rank.setdefault(len(shape), set()).add(shape)
  if len({s[0] for s in shapes.values()}) > 1 or any(
      len(same_rank) > 1 for same_rank in by_rank.values()):
    raise ServingError("INVALID_ARGUMENT", f"inputs of one request must have "
                       f"the same rows (and, at one rank, the same shape), "
                       f"got {shapes}")
  rows = next(iter(shapes.values()))[0]
  if rows == 0:
    raise ServingError("INVALID_ARGUMENT", "the request holds no rows")
  return arrays, rows


def _as_array(name, value, spec, max_text_bytes):
  expected = _Expected(spec)      # formatted only into an error
  if spec.dtype == tf.string:
    array = np.asarray(value, dtype=object)
    flat = array.reshape(-1)
    for i, item in enumerate(flat):
      if isinstance(item, str):
        item = flat[i] = item.encode("utf-8")
      if not isinstance(item, bytes):
        raise ServingError("INVALID_ARGUMENT", f"input {name}: expected "
                           f"{expected}, got a {type(item).__name__} "
                           f"({item!r:.40})")
      if not item.strip():
        raise ServingError("INVALID_ARGUMENT", f"input {name}: row {i} is "
                           "empty text")
      if len(item) > max_text_bytes:
        raise ServingError("INVALID_ARGUMENT", f"input {name}: row {i} holds "
                           f"{len(item)} bytes of text, more than the "
                           f"server's limit of {max_text_bytes}")
  else:
    try:
      array = np.asarray(value)
    except ValueError as e:       # ragged lists
      raise ServingError("INVALID_ARGUMENT", f"input {name}: expected "
                         f"{expected}: {e}") from None
    if array.dtype.kind not in "iub" or not spec.dtype.is_integer:
      if not (array.dtype.kind in "iuf" and spec.dtype.is_floating):
        raise ServingError("INVALID_ARGUMENT", f"input {name}: expected "
                           f"{expected}, got {array.dtype.name} values")
    numpy_dtype = spec.dtype.as_numpy_dtype
    if spec.dtype.is_integer and array.size and array.dtype != numpy_dtype:
      bounds = np.iinfo(numpy_dtype)
      if array.min() < bounds.min or array.max() > bounds.max:
        raise ServingError("INVALID_ARGUMENT", f"input {name}: values "
                           f"outside {spec.dtype.name}")
    array = array.astype(numpy_dtype, copy=False)
  if array.ndim != len(spec.shape) or any(
      want is not None and want != got
      for want, got in zip(spec.shape.as_list(), array.shape)):
    raise ServingError("INVALID_ARGUMENT", f"input {name}: expected "
                       f"{expected}, got shape {list(array.shape)}")
  return array


class _Expected:
  """What an input must be ("int32 of shape [B, S]"), as text on demand."""

  def __init__(self, spec):
    self.spec = spec

  def __str__(self):
    return f"{self.spec.dtype.name} of shape {_shape_text(self.spec.shape)}"


def _shape_text(shape):
  return "[" + ", ".join("B" if i == 0 else ("S" if d is None else str(d))
                         for i, d in enumerate(shape.as_list())) + "]"
