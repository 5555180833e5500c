"""The batch scheduler and TF Serving's batching parameters file, without a
model: a call that records its batches stands in for the model."""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from bertexp.serving.server.batching import BatchingParameters, BatchScheduler
from bertexp.serving.server.errors import ServingError


def test_parameters_file_in_tf_serving_syntax(tmp_path):
  path = tmp_path / "batching.txt"
  path.write_text("max_batch_size { value: 16 }\n"
                  "batch_timeout_micros { value: 500 }\n"
                  "num_batch_threads { value: 3 }\n"
                  "thread_pool_name { value: \"pool\" }\n"
                  "pad_variable_length_inputs: true\n")
  assert BatchingParameters.from_file(str(path)) == BatchingParameters(
      max_batch_size=16, batch_timeout_micros=500, num_batch_threads=3)
  path.write_text("max_batch_size { value: 16 }\nmax_batch_sise { value: 2 }\n")
  with pytest.raises(ValueError, match=r"batching.txt:2:.*max_batch_sise"):
    BatchingParameters.from_file(str(path))
  path.write_text("max_batch_size { value: 0 }\n")
  with pytest.raises(ValueError, match="max_batch_size = 0"):
    BatchingParameters.from_file(str(path))


def test_queue_is_bounded_and_oversize_requests_are_refused():
  entered, release = threading.Event(), threading.Event()

  def run(key, inputs):
    entered.set()
    release.wait(30)
    return {"y": inputs["x"] * 2}

  scheduler = BatchScheduler(run, BatchingParameters(
      max_batch_size=2, batch_timeout_micros=0, max_enqueued_batches=2,
      num_batch_threads=1))
  with pytest.raises(ServingError) as error:
    scheduler.submit("k", {"x": np.zeros([3])}, 3)
  assert error.value.code == "INVALID_ARGUMENT"
  futures = [scheduler.submit("k", {"x": np.array([0, 0])}, 2)]
  assert entered.wait(30)      # the only batch thread is inside the model
  futures += [scheduler.submit("k", {"x": np.array([i, i])}, 2)
              for i in (1, 2)]             # 2 full batches wait: the bound
  with pytest.raises(ServingError) as error:
    scheduler.submit("k", {"x": np.array([9])}, 1)
  assert error.value.code == "RESOURCE_EXHAUSTED"
  assert error.value.http_status == 429
  release.set()
  assert [f.result(30)["y"].tolist() for f in futures] == [
      [0, 0], [2, 2], [4, 4]]
  assert scheduler.batch_sizes == {2: 3}
  scheduler.close()
  with pytest.raises(ServingError) as error:
    scheduler.submit("k", {"x": np.array([1])}, 1)
  assert error.value.code == "UNAVAILABLE"


def test_requests_merge_up_to_the_limit_and_get_their_own_rows():
  calls = []

  def run(key, inputs):
    calls.append((key, len(inputs["x"])))
    return {"y": inputs["x"] + 100}

  scheduler = BatchScheduler(run, BatchingParameters(
      max_batch_size=5, batch_timeout_micros=200_000, num_batch_threads=1))
  futures = [scheduler.submit("a", {"x": np.array([0])}, 1)]
  time.sleep(0.05)          # the batch thread is awake, waiting for more
  futures += [scheduler.submit("a", {"x": np.array([i])}, 1)
              for i in range(1, 7)]
  futures.append(scheduler.submit("b", {"x": np.array([50, 51])}, 2))
  assert [f.result(30)["y"].tolist() for f in futures] == [
      [100], [101], [102], [103], [104], [105], [106], [150, 151]]
  scheduler.close()
  # Full batches go at once; different keys never share a call.
  assert sorted(calls) == [("a", 2), ("a", 5), ("b", 2)]


def test_response_tensor_protos_read_back_as_the_arrays_they_hold():
  from bertexp.serving.server import grpc_api
  arrays = [np.random.default_rng(0).random((3, 2)).astype(np.float32),
            np.arange(6, dtype=np.int32).reshape(2, 3),
            np.arange(4, dtype=np.int64)[::2],           # not contiguous
            np.array(1.5, np.float32), np.zeros([2, 0], np.float32),
            np.array([b"pos", "négatif".encode()], dtype=object)]
  for array in arrays:
    got = tf.make_ndarray(grpc_api.tensor_proto(array))
    assert got.dtype == array.dtype and got.shape == array.shape
    assert (got == array).all()


def test_request_tensor_protos_are_read_as_the_arrays_they_hold():
  from tensorflow.core.framework import tensor_pb2
  from bertexp.serving.server import grpc_api
  arrays = [np.arange(12, dtype=np.int32).reshape(2, 6) - 5,
            np.arange(4, dtype=np.int64) * (1 << 40),
            np.random.default_rng(1).random((2, 3)).astype(np.float32),
            np.zeros([0, 4], np.int32)]
  for array in arrays:
    # Raw bytes (tensor_content) and value lists (int_val, float_val...).
    values = tensor_pb2.TensorProto(dtype=tf.as_dtype(
        array.dtype).as_datatype_enum, tensor_shape=tf.TensorShape(
            array.shape).as_proto())
    field = {np.int32: "int_val", np.int64: "int64_val",
             np.float32: "float_val"}[array.dtype.type]
    getattr(values, field).extend(array.reshape(-1).tolist())
    for proto in (grpc_api.tensor_proto(array), values):
      got = grpc_api.ndarray(proto)
      assert got.dtype == array.dtype and got.shape == array.shape
      assert (got == array).all()
  texts = grpc_api.ndarray(tf.make_tensor_proto(["a", "é"]))
  assert texts.tolist() == [b"a", "é".encode()]
  short = grpc_api.tensor_proto(np.ones([2, 3], np.int32))
  short.tensor_shape.dim[1].size = 4
  with pytest.raises(ValueError, match="holds 6 values, the shape"):
    grpc_api.ndarray(short)
