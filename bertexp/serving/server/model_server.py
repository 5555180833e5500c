"""The model a server serves: its newest version, reloaded as new versions
appear, and the one predict path both APIs (REST and gRPC) call.

Versions follow TF Serving's default policy: the newest numeric folder is
served; a new one is loaded while the old keeps answering, then swapped in,
so no request fails across the change (TF Serving's availability-preserving
transition); the folder is polled every `poll_seconds`.
"""
import logging
import threading

import tensorflow as tf

from bertexp.serving.exporting import versions as versions_lib
from bertexp.serving.server import servable as servable_lib
from bertexp.serving.server.batching import BatchScheduler
from bertexp.serving.server.errors import ServingError
from bertexp.util import fileio


def load_version(path, version):
  """The servable of one version folder: a SavedModel, or an ONNX model
  (`bertexp export-onnx`) run by ONNX Runtime."""
  if tf.io.gfile.exists(fileio.join(path, "saved_model.pb")):
    return servable_lib.Servable(path, version)
  from bertexp.serving.server import onnx_servable  # needs the [onnx] extra
  return onnx_servable.OnnxServable(path, version)


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
    self.polls = 0                # finished looks at the folder
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
    try:
      return self._load_newest()
    finally:
      self.polls += 1

  def _load_newest(self):
    found = versions_lib.list_versions(self.folder)
    if not found:
      return self._current and self._current.version
    newest = max(found)
    if self._current is not None and newest <= self._current.version:
      return self._current.version
    with self._lock:
      self._status[newest] = ("LOADING", "")
    try:
      loaded = load_version(found[newest], newest)
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


class Models:
  """The models one server serves, by name (TF Serving's model config).

  Args:
    servers: ModelServers with distinct names.
  """

  def __init__(self, servers):
    self._servers = {server.name: server for server in servers}

  @property
  def names(self):
    return sorted(self._servers)

  def get(self, name):
    """The ModelServer of `name`.

    Raises:
      ServingError: NOT_FOUND naming the models served.
    """
    if name not in self._servers:
      raise ServingError("NOT_FOUND", f"Servable not found for request: "
                         f"Latest({name}) (this server serves "
                         f"{self.names})")
    return self._servers[name]

  def servable(self, name, version=None):
    """See ModelServer.servable."""
    return self.get(name).servable(name, version)

  def status(self, name, version=None):
    """See ModelServer.status."""
    return self.get(name).status(version)

  def predict(self, name, version, signature_name, inputs):
    """See ModelServer.predict."""
    return self.get(name).predict(name, version, signature_name, inputs)

  def polls(self):
    """{model name: how many times its folder was looked at}."""
    return {name: server.polls for name, server in sorted(self._servers.items())}

  def schedulers(self):
    """{model name: its BatchScheduler} (models that batch)."""
    return {name: server.scheduler
            for name, server in sorted(self._servers.items())
            if server.scheduler is not None}

  def start_polling(self, poll_seconds):
    for server in self._servers.values():
      server.start_polling(poll_seconds)

  def drain(self, timeout=60.0):
    """Drains every model; True when all finished within `timeout` each."""
    return all([server.drain(timeout) for server in self._servers.values()])


def read_model_config(path):
  """[(name, base_path)] of TF Serving's model config file (a text-format
  ModelServerConfig); a relative base_path is taken from the file's folder.

  Raises:
    ValueError: a syntax error (with its line), no model, a repeated name,
      or a platform other than "tensorflow".
  """
  import os
  from google.protobuf import text_format
  from tensorflow_serving.config import model_server_config_pb2
  from bertexp.util import fileio
  config = model_server_config_pb2.ModelServerConfig()
  try:
    text_format.Parse(fileio.read_text(path), config)
  except text_format.ParseError as e:
    raise ValueError(f"{path}:{e}") from None
  models = list(config.model_config_list.config)
  if not models:
    raise ValueError(f"{path}: no model in model_config_list")
  names = [m.name for m in models]
  if len(set(names)) != len(names) or not all(names):
    raise ValueError(f"{path}: every model needs its own name, got {names}")
  folder = os.path.dirname(os.path.abspath(path))
  result = []
  for model in models:
    if model.model_platform not in ("", "tensorflow"):
      raise ValueError(f"{path}: model {model.name}: platform "
                       f"{model.model_platform!r}, expected \"tensorflow\"")
    base = model.base_path
    if not base:
      raise ValueError(f"{path}: model {model.name} has no base_path")
    if "://" not in base and not os.path.isabs(base):
      base = os.path.join(folder, base)
    result.append((model.name, base))
  return result
