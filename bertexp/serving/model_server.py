"""The model a server serves: its newest version, reloaded as new versions
appear, and the one predict path both APIs (REST and gRPC) call.

Versions follow TF Serving's default policy: the newest numeric folder is
served; a new one is loaded while the old keeps answering, then swapped in,
so no request fails across the change (TF Serving's availability-preserving
transition); the folder is polled every `poll_seconds`.
"""
import logging
import threading

from bertexp.serving import servable as servable_lib
from bertexp.serving import versions as versions_lib
from bertexp.serving.batching import BatchScheduler
from bertexp.serving.errors import ServingError


class ModelServer:
  """One named model from a versions folder.

  Args:
    base_path: a MODEL_DIR (its export/) or a folder of version folders.
    name: the model name requests must use.
    batching: BatchingParameters, or None to call the model per request.
    max_text_bytes: the longest text a string input may hold.
  """

  def __init__(self, base_path, name, *, batching=None,
               max_text_bytes=65536):
    self.folder = versions_lib.versions_folder(base_path)
    self.name = name
    self.max_text_bytes = max_text_bytes
    self._lock = threading.Lock()
    self._current = None
    self._status = {}             # version -> (state, error message)
    self._stop = threading.Event()
    self._poller = None
    self._in_flight = 0
    self._idle = threading.Condition(self._lock)
    self._draining = False
    self.scheduler = (BatchScheduler(self._run_batch, batching)
                      if batching else None)
    self.poll()
    if self._current is None:
      raise FileNotFoundError(f"{self.folder}: no version could be loaded")

  # -- versions ------------------------------------------------------------
  def poll(self):
    """Loads the newest version if it is newer than the one served.

    Returns:
      The version served now.
    """
    found = versions_lib.list_versions(self.folder)
    if not found:
      return self._current and self._current.version
    newest = max(found)
    if self._current is not None and newest <= self._current.version:
      return self._current.version
    with self._lock:
      self._status[newest] = ("LOADING", "")
    try:
      loaded = servable_lib.Servable(found[newest], newest)
    except Exception as e:  # pylint: disable=broad-except
      logging.exception("version %d of %s failed to load; still serving %s",
                        newest, self.name,
                        self._current and self._current.version)
      with self._lock:
        self._status[newest] = ("END", f"failed to load: {e}")
      return self._current and self._current.version
    with self._lock:
      old, self._current = self._current, loaded
      self._status[newest] = ("AVAILABLE", "")
      if old is not None:
        self._status[old.version] = ("END", "")
    logging.info("serving %s version %d from %s", self.name, newest,
                 found[newest])
    return newest

  def start_polling(self, poll_seconds):
    """Polls the folder for new versions every `poll_seconds` (0: never)."""
    if poll_seconds <= 0:
      return

    def loop():
      while not self._stop.wait(poll_seconds):
        self.poll()
    self._poller = threading.Thread(target=loop, daemon=True, name="poll")
    self._poller.start()

  def status(self, version=None):
    """[(version, state, error message)] newest first (TF Serving's
    model_version_status; a version that failed to load is END with its
    error).

    Raises:
      ServingError: NOT_FOUND for a version never seen.
    """
    with self._lock:
      items = sorted(((v, state, error) for v, (state, error) in
                      self._status.items()), reverse=True)
    if version is not None:
      items = [item for item in items if item[0] == version]
      if not items:
        raise ServingError("NOT_FOUND", f"Could not find version {version} "
                           f"of model {self.name}")
    return items

  def servable(self, name, version=None):
    """The loaded version a request addresses.

    Raises:
      ServingError: NOT_FOUND for another model name or a version not
        served.
    """
    if name != self.name:
      raise ServingError("NOT_FOUND", f"Servable not found for request: "
                         f"Latest({name}) (this server serves "
                         f"{self.name!r})")
    current = self._current
    if version is not None and version != current.version:
      raise ServingError("NOT_FOUND", f"Servable not found for request: "
                         f"Specific({name}, {version}) (serving version "
                         f"{current.version})")
    return current

  # -- predict -------------------------------------------------------------
  def predict(self, name, version, signature_name, inputs):
    """Runs one request.

    Args:
      name, version: the model name and version (None: the newest).
      signature_name: "" means serving_default.
      inputs: {input name: array-like [B, ...]}.
    Returns:
      (Servable, {output name: numpy [B, ...]}).
    Raises:
      ServingError: the request's fault (INVALID_ARGUMENT, NOT_FOUND),
        overload (RESOURCE_EXHAUSTED) or shutdown (UNAVAILABLE).
    """
    with self._lock:
      if self._draining:
        raise ServingError("UNAVAILABLE", "the server is shutting down")
      self._in_flight += 1
    try:
      servable = self.servable(name, version)
      signature = servable.signature(signature_name)
      arrays, rows = servable_lib.check_inputs(
          signature, inputs, max_text_bytes=self.max_text_bytes)
      if self.scheduler is None:
        return servable, signature(arrays)
      key = (servable, signature.name,
             tuple((k, v.shape[1:]) for k, v in sorted(arrays.items())))
      return servable, self.scheduler.submit(key, arrays, rows).result()
    finally:
      with self._lock:
        self._in_flight -= 1
        self._idle.notify_all()

  @staticmethod
  def _run_batch(key, inputs):
    servable, signature_name, _ = key
    return servable.signatures[signature_name](inputs)

  def drain(self, timeout=60.0):
    """Refuses new requests, waits for those in flight, stops polling and
    the batch threads.

    Returns:
      True when every request in flight finished within `timeout` seconds.
    """
    with self._lock:
      self._draining = True
    self._stop.set()
    if self.scheduler is not None:
      self.scheduler.close()        # runs what is queued without waiting
    with self._lock:
      return self._idle.wait_for(lambda: self._in_flight == 0, timeout)
