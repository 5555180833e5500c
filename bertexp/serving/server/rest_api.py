"""TF Serving's REST API on a WSGI app (werkzeug), for `bertexp serve`.

  GET  /v1/models/<name>[/versions/<v>]            model_version_status
  GET  /v1/models/<name>[/versions/<v>]/metadata   signature_def map
  POST /v1/models/<name>[/versions/<v>]:predict    {"instances": [...]} (row
       form -> {"predictions": ...}) or {"inputs": ...} (column form ->
       {"outputs": ...}); "signature_name" picks the signature
  GET  /monitoring/prometheus/metrics              model calls by rows, rows
                                                   waiting

Errors answer {"error": message} with TF Serving's HTTP status for the code
(400 bad request, 404 unknown model or version, 429 queue full, 503
shutting down); the server keeps serving.
"""
import base64
import json
import logging
import re

from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request, Response

from bertexp.serving.server.errors import ServingError

_MODEL_PATH = re.compile(
    r"/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+)|"
    r"/labels/(?P<label>[^/:]+))?(?P<rest>/metadata|:[a-z]+)?")


def make_app(server, max_request_bytes=None):
  """The WSGI app of `server` (a model_server.Models); a body above
  `max_request_bytes` is refused with 413 from its Content-Length, before
  it is read (None: no limit)."""

  @Request.application
  def app(request):
    request.max_content_length = max_request_bytes
    try:
      return _json(200, _route(server, request))
    except ServingError as e:
      return _json(e.http_status, {"error": e.message})
    except RequestEntityTooLarge:
      return _json(413, {"error": f"the request body holds "
                                  f"{request.content_length} bytes, more "
                                  f"than the server's limit of "
                                  f"{max_request_bytes}"})
    except Exception as e:  # pylint: disable=broad-except
      logging.exception("internal error answering %s %s", request.method,
                        request.path)
      return _json(500, {"error": f"internal error: {type(e).__name__}: "
                                  f"{e}"})
  return app


def _json(status, body):
  if isinstance(body, Response):
    return body
  return Response(json.dumps(body, ensure_ascii=False), status=status,
                  content_type="application/json")


def _route(server, request):
  if request.path == "/monitoring/prometheus/metrics":
    return Response(_metrics(server), content_type="text/plain")
  match = _MODEL_PATH.fullmatch(request.path)
  if not match:
    raise ServingError("NOT_FOUND", f"Malformed request: {request.method} "
                       f"{request.path}")
  if match["label"]:
    raise ServingError("INVALID_ARGUMENT", "version labels are not "
                       "supported: use /versions/<number>")
  name, rest = match["name"], match["rest"] or ""
  version = int(match["version"]) if match["version"] else None
  if rest.startswith(":"):
    if request.method != "POST":
      raise ServingError("INVALID_ARGUMENT", f"{rest[1:]} needs POST")
    if rest != ":predict":
      raise ServingError("UNIMPLEMENTED", f"{rest[1:]}: bertexp exports "
                         "predict signatures only (use :predict)")
    return _predict(server, name, version, request.get_data())
  if request.method != "GET":
    raise ServingError("INVALID_ARGUMENT", f"{request.path} needs GET")
  if rest == "/metadata":
    return _metadata(server, name, version)
  return {"model_version_status": [
      {"version": str(v), "state": state,
       "status": {"error_code": "UNKNOWN" if error else "OK",
                  "error_message": error}}
      for v, state, error in server.status(name, version)]}


def _predict(server, name, version, body):
  try:
    request = json.loads(body)
  except (ValueError, UnicodeDecodeError) as e:
    raise ServingError("INVALID_ARGUMENT", f"JSON Parse error: {e}") from None
  except RecursionError:
    raise ServingError("INVALID_ARGUMENT",
                       "JSON Parse error: nested too deep") from None
  if not isinstance(request, dict):
    raise ServingError("INVALID_ARGUMENT", "the request must be a JSON "
                       "object with \"instances\" or \"inputs\"")
  if ("instances" in request) == ("inputs" in request):
    raise ServingError("INVALID_ARGUMENT", "the request must hold exactly "
                       "one of \"instances\" (rows) or \"inputs\" (columns)")
  signature_name = request.get("signature_name", "")
  if not isinstance(signature_name, str):
    raise ServingError("INVALID_ARGUMENT", "signature_name must be a string")
  signature = server.servable(name, version).signature(signature_name)
  names = sorted(signature.inputs)
  rows = "instances" in request
  inputs = (_columns_from_rows(request["instances"], names) if rows else
            _named_inputs(request["inputs"], names))
  _, outputs = server.predict(name, version, signature_name, inputs)
  if rows:
    if len(outputs) == 1:
      return {"predictions": _jsonable(next(iter(outputs.values())))}
    count = len(next(iter(outputs.values())))
    return {"predictions": [{k: _jsonable(v[i]) for k, v in outputs.items()}
                            for i in range(count)]}
  if len(outputs) == 1:
    return {"outputs": _jsonable(next(iter(outputs.values())))}
  return {"outputs": {k: _jsonable(v) for k, v in outputs.items()}}


def _columns_from_rows(instances, names):
  if not isinstance(instances, list) or not instances:
    raise ServingError("INVALID_ARGUMENT", "\"instances\" must be a "
                       "non-empty list of rows")
  if all(isinstance(row, dict) for row in instances):
    keys = set(instances[0])
    for i, row in enumerate(instances):
      if set(row) != keys:
        raise ServingError("INVALID_ARGUMENT", f"instances[{i}] names "
                           f"{sorted(row)}, instances[0] {sorted(keys)}")
    return {k: [_decoded(row[k]) for row in instances] for k in keys}
  if len(names) != 1:
    raise ServingError("INVALID_ARGUMENT", f"this signature takes inputs "
                       f"{names}: each instance must be an object naming them")
  return {names[0]: [_decoded(row) for row in instances]}


def _named_inputs(inputs, names):
  if isinstance(inputs, dict):
    return {k: _decoded(v) for k, v in inputs.items()}
  if len(names) != 1:
    raise ServingError("INVALID_ARGUMENT", f"this signature takes inputs "
                       f"{names}: \"inputs\" must be an object naming them")
  return {names[0]: _decoded(inputs)}


def _decoded(value):
  """JSON value -> nested lists, with {"b64": ...} objects as bytes."""
  if isinstance(value, dict):
    if set(value) != {"b64"} or not isinstance(value["b64"], str):
      raise ServingError("INVALID_ARGUMENT", f"unexpected object "
                         f"{json.dumps(value)[:80]}: only {{\"b64\": "
                         "string}} may stand for a value")
    try:
      return base64.b64decode(value["b64"], validate=True)
    except ValueError:
      raise ServingError("INVALID_ARGUMENT", "invalid base64 in a \"b64\" "
                         "value") from None
  if isinstance(value, list):
    return [_decoded(v) for v in value]
  return value


def _jsonable(array):
  """numpy -> JSON values: numbers as numbers, bytes as UTF-8 text (or
  {"b64": ...} when not UTF-8)."""
  if getattr(array, "dtype", None) is not None and array.dtype == object:
    return [_jsonable(v) for v in array] if array.ndim else _jsonable(
        array.item())
  if isinstance(array, bytes):
    try:
      return array.decode("utf-8")
    except UnicodeDecodeError:
      return {"b64": base64.b64encode(array).decode()}
  return array.tolist() if hasattr(array, "tolist") else array


def _metadata(server, name, version):
  from google.protobuf import json_format
  from tensorflow_serving.apis import get_model_metadata_pb2
  servable = server.servable(name, version)
  signatures = get_model_metadata_pb2.SignatureDefMap()
  for key, proto in servable.signature_defs.items():
    signatures.signature_def[key].CopyFrom(proto)
  return {"model_spec": {"name": name, "signature_name": "",
                         "version": str(servable.version)},
          "metadata": {"signature_def": json_format.MessageToDict(
              signatures, preserving_proto_field_name=True)}}


def _metrics(server):
  lines = ["# TYPE bertexp_batch_calls counter",
           "# TYPE bertexp_waiting_rows gauge",
           "# TYPE bertexp_version_polls counter"]
  for name, polls in server.polls().items():
    lines.append(f'bertexp_version_polls{{model="{name}"}} {polls}')
  for name, scheduler in server.schedulers().items():
    for size, calls in sorted(scheduler.batch_sizes.items()):
      lines.append(f'bertexp_batch_calls{{model="{name}",rows="{size}"}} '
                   f'{calls}')
    lines.append(f'bertexp_waiting_rows{{model="{name}"}} '
                 f'{scheduler.waiting_rows}')
  return "\n".join(lines) + "\n"
