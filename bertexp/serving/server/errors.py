"""Errors a model server answers with, in TF Serving's terms.

A `ServingError` carries a gRPC status code name; the REST API maps it to the
HTTP status TF Serving's own HTTP server uses (RESOURCE_EXHAUSTED is 429 Too
Many Requests there, UNAVAILABLE 503), so a client written for TF Serving
sees the same codes from `bertexp serve`.
"""

HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}


class ServingError(Exception):
  """A request the server refuses (the server itself keeps serving).

  Attributes:
    code: a gRPC status code name, a key of HTTP_STATUS.
    message: what was wrong, naming the input, signature or model.
  """

  def __init__(self, code, message):
    if code not in HTTP_STATUS:
      raise ValueError(f"unknown status code {code!r}")
    super().__init__(message)
    self.code = code
    self.message = message

  @property
  def http_status(self):
    return HTTP_STATUS[self.code]
