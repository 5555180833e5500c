"""Request batching with TF Serving's knobs and their meaning.

Concurrent requests to the same signature, with the same per-row shape, wait
in one queue; a batch thread takes up to `max_batch_size` rows at once as
soon as that many are waiting, or when the oldest request has waited
`batch_timeout_micros`, and makes ONE model call for all of them; each
request gets its own rows back. `num_batch_threads` batches run at a time.
At most `max_enqueued_batches` full batches of rows may wait: a request
beyond that is refused with RESOURCE_EXHAUSTED (memory stays bounded under
overload), as is a request larger than `max_batch_size` (INVALID_ARGUMENT).

The parameters file is TF Serving's own (`--batching_parameters_file`, a
text-format BatchingParameters proto), so one file serves both servers:

    max_batch_size { value: 32 }
    batch_timeout_micros { value: 2000 }
    max_enqueued_batches { value: 100 }
    num_batch_threads { value: 2 }
"""
import collections
import concurrent.futures
import dataclasses
import logging
import threading
import time

import numpy as np

from bertexp.serving.server.errors import ServingError
from bertexp.util import fileio

_INT64_FIELDS = ("max_batch_size", "batch_timeout_micros",
                 "max_enqueued_batches", "num_batch_threads",
                 "max_execution_batch_size")
# Fields TF Serving's file may hold that this server accepts and ignores.
_IGNORED = {"thread_pool_name": "StringValue",
            "enable_large_batch_splitting": "BoolValue"}


@dataclasses.dataclass(frozen=True)
class BatchingParameters:
  """TF Serving's batching knobs (its defaults, but 2 threads: the
  machines here have 2 cores)."""
  max_batch_size: int = 32
  batch_timeout_micros: int = 1000
  max_enqueued_batches: int = 100
  num_batch_threads: int = 2

  def __post_init__(self):
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      least = 0 if field.name == "batch_timeout_micros" else 1
      if not isinstance(value, int) or value < least:
        raise ValueError(f"batching parameter {field.name} = {value!r}: "
                         f"expected an integer >= {least}")

  @classmethod
  def from_file(cls, path):
    """Reads TF Serving's text-format batching parameters file.

    Raises:
      ValueError: a syntax error or an unknown field (named with its line).
    """
    from google.protobuf import text_format
    message = _batching_message_class()()
    try:
      text_format.Parse(fileio.read_text(path), message)
    except text_format.ParseError as e:
      raise ValueError(f"{path}:{e}") from None
    values = {name: getattr(message, name).value for name in _INT64_FIELDS
              if message.HasField(name)}
    for name in set(values) - {f.name for f in dataclasses.fields(cls)}:
      logging.warning("%s: %s is not used by bertexp serve", path, name)
      values.pop(name)
    try:
      return cls(**values)
    except ValueError as e:
      raise ValueError(f"{path}: {e}") from None


def _batching_message_class():
  """BatchingParameters as TF Serving's session_bundle_config.proto spells
  it (its fields we read, plus the common ones we accept), built from a
  descriptor: the tensorflow-serving-api package does not ship that proto."""
  from google.protobuf import (descriptor_pb2, descriptor_pool,
                               message_factory, wrappers_pb2)
  field = descriptor_pb2.FieldDescriptorProto
  proto = descriptor_pb2.FileDescriptorProto(
      name="bertexp/batching_parameters.proto", package="bertexp.serving",
      syntax="proto3", dependency=["google/protobuf/wrappers.proto"])
  message = proto.message_type.add(name="BatchingParameters")
  wrapped = [(name, "Int64Value") for name in _INT64_FIELDS] + list(
      _IGNORED.items())
  for number, (name, wrapper) in enumerate(wrapped, 1):
    message.field.add(name=name, number=number, label=field.LABEL_OPTIONAL,
                      type=field.TYPE_MESSAGE,
                      type_name=f".google.protobuf.{wrapper}")
  message.field.add(name="allowed_batch_sizes", number=len(wrapped) + 1,
                    label=field.LABEL_REPEATED, type=field.TYPE_INT64)
  message.field.add(name="pad_variable_length_inputs",
                    number=len(wrapped) + 2, label=field.LABEL_OPTIONAL,
                    type=field.TYPE_BOOL)
  pool = descriptor_pool.DescriptorPool()
  pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
  pool.Add(proto)
  return message_factory.GetMessageClass(
      pool.FindMessageTypeByName("bertexp.serving.BatchingParameters"))


class _Request:
  __slots__ = ("inputs", "rows", "future", "enqueued")

  def __init__(self, inputs, rows):
    self.inputs, self.rows = inputs, rows
    self.future = concurrent.futures.Future()
    self.enqueued = time.monotonic()


class BatchScheduler:
  """Merges concurrent requests into model calls.

  Args:
    run: (key, {input name: numpy [N, ...]}) -> {output name: numpy
      [N, ...]}, the model call of one batch (N rows of several requests).
    params: BatchingParameters.
  """

  def __init__(self, run, params):
    self._run = run
    self.params = params
    self._queues = collections.OrderedDict()   # key -> deque of _Request
    self._waiting_rows = 0
    self._closed = False
    self._cond = threading.Condition()
    self.batch_sizes = collections.Counter()   # rows per model call
    self._threads = [threading.Thread(target=self._work, daemon=True,
                                      name=f"batch-{i}")
                     for i in range(params.num_batch_threads)]
    for thread in self._threads:
      thread.start()

  @property
  def waiting_rows(self):
    """Rows queued and not yet taken into a batch."""
    with self._cond:
      return self._waiting_rows

  def submit(self, key, inputs, rows):
    """Queues one request's rows.

    Args:
      key: requests merge only with the same key (signature and shapes).
      inputs: {input name: numpy [rows, ...]}.
      rows: its number of rows.
    Returns:
      A Future of {output name: numpy [rows, ...]}.
    Raises:
      ServingError: INVALID_ARGUMENT above max_batch_size;
        RESOURCE_EXHAUSTED when the queue is full; UNAVAILABLE once closed.
    """
    limit = self.params.max_batch_size
    if rows > limit:
      raise ServingError("INVALID_ARGUMENT", f"Task size {rows} is larger "
                         f"than maximum input batch size {limit}")
    with self._cond:
      if self._closed:
        raise ServingError("UNAVAILABLE", "the server is shutting down")
      capacity = self.params.max_enqueued_batches * limit
      if self._waiting_rows + rows > capacity:
        raise ServingError(
            "RESOURCE_EXHAUSTED", f"The batch scheduling queue is full "
            f"({self._waiting_rows} rows waiting, max_enqueued_batches "
            f"{self.params.max_enqueued_batches} x max_batch_size {limit})")
      request = _Request(inputs, rows)
      self._queues.setdefault(key, collections.deque()).append(request)
      self._waiting_rows += rows
      self._cond.notify()
    return request.future

  def close(self):
    """Refuses new requests, runs every queued one, joins the threads."""
    with self._cond:
      self._closed = True
      self._cond.notify_all()
    for thread in self._threads:
      thread.join()

  def _next_batch(self):
    """(key, [requests]) to run now, waiting as the timeout says; None once
    closed and empty."""
    timeout = self.params.batch_timeout_micros / 1e6
    with self._cond:
      while True:
        if not self._queues:
          if self._closed:
            return None
          self._cond.wait()
          continue
        key = min(self._queues, key=lambda k: self._queues[k][0].enqueued)
        queue = self._queues[key]
        waiting = sum(r.rows for r in queue)
        wait = queue[0].enqueued + timeout - time.monotonic()
        if waiting >= self.params.max_batch_size or wait <= 0 or self._closed:
          return key, self._take(key, queue)
        self._cond.wait(wait)

  def _take(self, key, queue):
    taken, rows = [], 0
    while queue and rows + queue[0].rows <= self.params.max_batch_size:
      request = queue.popleft()
      taken.append(request)
      rows += request.rows
    if not queue:
      del self._queues[key]
    self._waiting_rows -= rows
    return taken

  def _work(self):
    while True:
      batch = self._next_batch()
      if batch is None:
        return
      key, requests = batch
      self._run_batch(key, requests)

  def _run_batch(self, key, requests):
    merged = {name: np.concatenate([r.inputs[name] for r in requests])
              for name in requests[0].inputs}
    total = sum(r.rows for r in requests)
    try:
      outputs = self._run(key, merged)
    except Exception as e:  # pylint: disable=broad-except
      for request in requests:   # each caller sees the batch's error
        request.future.set_exception(e)
      return
    with self._cond:
      self.batch_sizes[total] += 1
    start = 0
    for request in requests:
      end = start + request.rows
      request.future.set_result({name: value[start:end]
                                 for name, value in outputs.items()})
      start = end
