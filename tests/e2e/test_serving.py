"""`bertexp serve`: a real server process answering TF Serving's REST API
(requests) and gRPC API (the tensorflow-serving-api package's own stubs) for
a tiny exported classifier; its outputs equal the SavedModel's own; batching
bad requests get TF Serving's codes and the server keeps serving; a new
version is picked up without a failed request. Batching, overload, SIGTERM,
half-written versions and TLS: test_serving_lifecycle.py."""
import json
import os
import re
import shutil
import threading
import time

import grpc
import numpy as np
import pytest
import requests
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import (get_model_metadata_pb2,
                                     get_model_status_pb2, model_service_pb2_grpc,
                                     predict_pb2, prediction_service_pb2_grpc)

from bertexp import capabilities
from conftest import TINY_VOCAB, start_server, tiny_sst2_task

TEXTS = ["the movie was good", "a dull film .", "it is not fun", "very bad",
         "great !", "the plot is dull and the film is not good", "fun", "a"]
BATCHING = """
max_batch_size { value: 8 }
batch_timeout_micros { value: 1000 }
max_enqueued_batches { value: 4 }
num_batch_threads { value: 1 }
"""


def _export(root, tflite=False):
  """A tiny classifier exported as version 1 under root/model/export (and
  to root/model/tflite/ when `tflite`), its weights spread so that
  different texts get clearly different outputs."""
  import tensorflow_text  # noqa: F401
  from bertexp.serving.exporting import export
  os.makedirs(root, exist_ok=True)
  vocab = os.path.join(root, "vocab.txt")
  with open(vocab, "w") as f:
    f.write("\n".join(TINY_VOCAB) + "\n")
  task = tiny_sst2_task(root, vocab)
  tf.random.set_seed(3)
  model = task.build_model()
  for variable in model.trainable_variables:
    variable.assign(variable * 6.0)
  model_dir = os.path.join(root, "model")
  export.export_saved_model(task, model, model_dir, version=1)
  if tflite:
    _write_tflite_files(model_dir)
    _write_onnx_files(model, task, model_dir)
  return model_dir


def _write_onnx_files(model, task, model_dir):
  """What export-onnx writes, version 1: onnx/{float32,int8}/1/model.onnx."""
  from bertexp.serving.exporting import onnx_export
  proto = onnx_export.build_model_proto(model, capabilities.require(
      task, capabilities.OnnxGraph, "export-onnx").head)
  for kind in ("float32", "int8"):
    os.makedirs(f"{model_dir}/onnx/{kind}/1")
  float_path = f"{model_dir}/onnx/float32/1/model.onnx"
  with open(float_path, "wb") as f:
    f.write(proto.SerializeToString())
  onnx_export.quantize(float_path, f"{model_dir}/onnx/int8/1/model.onnx")
  assert onnx_export.save_text_packer(task, model, f"{model_dir}/onnx/float32/1")


def _write_tflite_files(model_dir, length=16):
  """model_{float,int8}.tflite with the signature export-tflite writes
  (three int32 [1, length] inputs -> probabilities): a small real TFLite
  model, for the benchmark's TFLite path (this tiny encoder's exact GELU
  needs TFLite's flex ops)."""
  spec = {name: tf.TensorSpec([1, length], tf.int32, name)
          for name in ("input_word_ids", "input_mask", "input_type_ids")}
  module = tf.Module()
  module.table = tf.Variable(tf.random.stateless_normal([25, 2], [1, 2]))

  @tf.function(input_signature=[spec])
  def classify(features):
    pooled = tf.reduce_mean(tf.gather(module.table,
                                      features["input_word_ids"]), 1)
    return {"probabilities": tf.nn.softmax(pooled, -1)}

  flatbuffer = tf.lite.TFLiteConverter.from_concrete_functions(
      [classify.get_concrete_function()], module).convert()
  os.makedirs(f"{model_dir}/tflite", exist_ok=True)
  for kind in ("float", "int8"):
    with open(f"{model_dir}/tflite/model_{kind}.tflite", "wb") as f:
      f.write(flatbuffer)


def _export_regression(root, vocab):
  """A tiny regression model (ClassificationTask on float scores) exported
  as version 1 under root/regression/export."""
  from bertexp.serving.exporting import export
  from bertexp.tasks.classification import task as classification
  from bertexp import cli
  table = "sentence\tscore\n" + "".join(
      f"{s}\t{2.0 + i / 10}\n" for i, s in enumerate(TEXTS[:6]))
  with open(os.path.join(root, "scores.tsv"), "w") as f:
    f.write(table)
  data = os.path.join(root, "scores_data")
  assert cli.main(["prepare", "classification", "--task_name=scores",
                   "--regression", f"--train_file={root}/scores.tsv",
                   f"--eval_file={root}/scores.tsv",
                   "--text_columns=sentence", "--label_column=score",
                   f"--vocab_file={vocab}", f"--output_dir={data}",
                   "--max_seq_length=16"]) == 0
  task = classification.ClassificationTask(
      bert_config_file=os.path.join(root, "config_0.0.json"),
      meta_data_path=f"{data}/scores_meta_data",
      train_data_path=f"{data}/scores_train.tf_record")
  tf.random.set_seed(4)
  model = task.build_model()
  for variable in model.trainable_variables:       # outputs spread apart
    variable.assign(variable * 6.0)
  model_dir = os.path.join(root, "regression")
  export.export_saved_model(task, model, model_dir, version=1)
  return model_dir


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("serving"))
  model_dir = _export(root, tflite=True)
  regression_dir = _export_regression(root, os.path.join(root, "vocab.txt"))
  batching = os.path.join(root, "batching.txt")
  with open(batching, "w") as f:
    f.write(BATCHING)
  config = os.path.join(root, "models.config")     # TF Serving's format
  with open(config, "w") as f:
    f.write('model_config_list { config { name: "tiny" base_path: "model" '
            'model_platform: "tensorflow" } config { name: "scores" '
            f'base_path: "{regression_dir}" }} config {{ name: "tiny_onnx" '
            'base_path: "model/onnx/float32" } }\n')
  process, rest, grpc_port = start_server(
      None, f"--model_config_file={config}",
      f"--batching_parameters_file={batching}",
      "--file_system_poll_wait_seconds=0.2", "--max_text_bytes=200",
      "--tensorflow_intra_op_parallelism=1",
      "--tensorflow_inter_op_parallelism=2")
  loaded = tf.saved_model.load(f"{model_dir}/export/1")
  regression = tf.saved_model.load(f"{regression_dir}/export/1")
  channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
  yield {"process": process, "url": f"http://127.0.0.1:{rest}/v1/models/tiny",
         "grpc_port": grpc_port,
         "base": f"http://127.0.0.1:{rest}", "model_dir": model_dir,
         "loaded": loaded, "channel": channel, "root": root,
         "regression": regression}
  channel.close()
  if process.poll() is None:          # the SIGTERM test did not run
    process.kill()


def _reference(served, texts):
  out = served["loaded"].signatures["serve_text"](text=tf.constant(texts))
  return {k: v.numpy() for k, v in out.items()}


def _predict_text(served, texts, **extra):
  body = {"signature_name": "serve_text", "instances": texts, **extra}
  return requests.post(f"{served['url']}:predict", json=body, timeout=60)


def test_rest_rows_and_columns_equal_the_savedmodel(served):
  expected = _reference(served, TEXTS)
  spread = np.ptp(expected["probabilities"][:, 1])
  assert spread > 1e-3, spread     # rows are told apart at 1e-5 (100x)
  reply = _predict_text(served, TEXTS)
  assert reply.status_code == 200, reply.text
  rows = reply.json()["predictions"]
  np.testing.assert_allclose([r["probabilities"] for r in rows],
                             expected["probabilities"], atol=1e-5)
  assert [r["label"] for r in rows] == [l.decode() for l in expected["label"]]
  # Columns, token ids, on serving_default.
  ids = served["loaded"].signatures["serving_default"]
  tokens = {"input_word_ids": [[2, 5, 6, 7, 8, 3], [2, 11, 20, 12, 16, 3]],
            "input_mask": [[1] * 6] * 2, "input_type_ids": [[0] * 6] * 2}
  expected_ids = ids(**{k: tf.constant(v, tf.int32)
                        for k, v in tokens.items()})
  reply = requests.post(f"{served['url']}:predict", json={"inputs": tokens},
                        timeout=60)
  assert reply.status_code == 200, reply.text
  np.testing.assert_allclose(reply.json()["outputs"]["probabilities"],
                             expected_ids["probabilities"].numpy(), atol=1e-5)


def test_second_model_of_the_config_serves_regression_values(served):
  expected = served["regression"].signatures["serve_text"](
      text=tf.constant(TEXTS))["value"].numpy()
  assert np.ptp(expected) > 0.01
  reply = requests.post(f"{served['base']}/v1/models/scores:predict", json={
      "signature_name": "serve_text", "instances": TEXTS}, timeout=60)
  assert reply.status_code == 200, reply.text
  np.testing.assert_allclose(reply.json()["predictions"], expected, atol=1e-5)
  stub = prediction_service_pb2_grpc.PredictionServiceStub(served["channel"])
  request = predict_pb2.PredictRequest()
  request.model_spec.name = "scores"
  request.model_spec.signature_name = "serve_text"
  request.inputs["text"].CopyFrom(tf.make_tensor_proto(TEXTS[:3]))
  np.testing.assert_allclose(tf.make_ndarray(
      stub.Predict(request, timeout=60).outputs["value"]), expected[:3],
                             atol=1e-5)


def test_grpc_predict_metadata_and_status_with_tf_serving_stubs(served):
  stub = prediction_service_pb2_grpc.PredictionServiceStub(served["channel"])
  request = predict_pb2.PredictRequest()
  request.model_spec.name = "tiny"
  request.model_spec.signature_name = "serve_text"
  request.inputs["text"].CopyFrom(tf.make_tensor_proto(TEXTS[:4]))
  response = stub.Predict(request, timeout=60)
  np.testing.assert_allclose(
      tf.make_ndarray(response.outputs["probabilities"]),
      _reference(served, TEXTS[:4])["probabilities"], atol=1e-5)
  assert response.model_spec.version.value >= 1

  meta = get_model_metadata_pb2.GetModelMetadataRequest()
  meta.model_spec.name = "tiny"
  meta.metadata_field.append("signature_def")
  signatures = get_model_metadata_pb2.SignatureDefMap()
  stub.GetModelMetadata(meta, timeout=60).metadata["signature_def"].Unpack(
      signatures)
  assert set(signatures.signature_def["serve_text"].inputs) == {"text"}
  assert set(signatures.signature_def["serving_default"].inputs) == {
      "input_word_ids", "input_mask", "input_type_ids"}
  rest_meta = requests.get(f"{served['url']}/metadata", timeout=60).json()
  assert set(rest_meta["metadata"]["signature_def"]["signature_def"]) >= {
      "serve_text", "serving_default"}     # and __saved_model_init_op

  status = model_service_pb2_grpc.ModelServiceStub(
      served["channel"]).GetModelStatus(
          get_model_status_pb2.GetModelStatusRequest(
              model_spec=request.model_spec), timeout=60)
  states = {s.version: s.state for s in status.model_version_status}
  available = get_model_status_pb2.ModelVersionStatus.State.Value("AVAILABLE")
  assert available in states.values()
  rest_status = requests.get(served["url"], timeout=60).json()
  assert any(s["state"] == "AVAILABLE"
             for s in rest_status["model_version_status"])


def test_onnx_model_is_served_with_the_savedmodels_outputs(served):
  tokens = {"input_word_ids": [[2, 5, 6, 7, 8, 3], [2, 11, 20, 12, 16, 3],
                               [2, 9, 10, 3, 0, 0]],
            "input_mask": [[1] * 6, [1] * 6, [1, 1, 1, 1, 0, 0]],
            "input_type_ids": [[0] * 6] * 3}
  want = served["loaded"].signatures["serving_default"](
      **{k: tf.constant(v, tf.int32) for k, v in tokens.items()})
  assert np.ptp(want["probabilities"].numpy()[:, 1]) > 1e-3     # 100 x tol
  url = f"{served['base']}/v1/models/tiny_onnx"
  reply = requests.post(f"{url}:predict", json={"inputs": tokens}, timeout=60)
  assert reply.status_code == 200, reply.text
  np.testing.assert_allclose(reply.json()["outputs"]["probabilities"],
                             want["probabilities"].numpy(), atol=1e-5)
  assert reply.json()["outputs"]["label"] == [
      l.decode() for l in want["label"].numpy()]
  stub = prediction_service_pb2_grpc.PredictionServiceStub(served["channel"])
  request = predict_pb2.PredictRequest()
  request.model_spec.name = "tiny_onnx"
  for name, value in tokens.items():
    request.inputs[name].CopyFrom(tf.make_tensor_proto(value, tf.int32))
  response = stub.Predict(request, timeout=60)
  np.testing.assert_allclose(tf.make_ndarray(response.outputs["probabilities"]),
                             want["probabilities"].numpy(), atol=1e-5)
  meta = requests.get(f"{url}/metadata", timeout=60).json()
  signature = meta["metadata"]["signature_def"]["signature_def"][
      "serving_default"]
  assert set(signature["inputs"]) == set(tokens)
  assert set(signature["outputs"]) == {"probabilities", "label"}
  # An id past the vocabulary and a signature it lacks: errors, still up.
  bad = dict(tokens, input_word_ids=[[2, 5, 6, 7, 99, 3]] * 3)
  reply = requests.post(f"{url}:predict", json={"inputs": bad}, timeout=60)
  assert reply.status_code == 400 and "out of range" in reply.json()["error"]
  reply = requests.post(f"{url}:predict", json={
      "signature_name": "serve_tokens", "instances": ["good"]}, timeout=60)
  assert reply.status_code == 400 and \
      "['serve_text', 'serving_default']" in reply.json()["error"]
  assert requests.post(f"{url}:predict", json={"inputs": tokens},
                       timeout=60).status_code == 200


def test_onnx_model_serves_raw_text_as_the_savedmodel_does(served):
  texts = TEXTS[:4] + ["an unseen word: zyxwv, and a very long " * 4]
  want = _reference(served, texts)
  assert np.ptp(want["probabilities"][:, 1]) > 1e-3               # 100 x tol
  reply = requests.post(f"{served['base']}/v1/models/tiny_onnx:predict",
                        json={"signature_name": "serve_text",
                              "instances": texts}, timeout=60)
  assert reply.status_code == 200, reply.text
  got = reply.json()["predictions"]
  np.testing.assert_allclose([row["probabilities"] for row in got],
                             want["probabilities"], atol=1e-5)
  assert [row["label"] for row in got] == [
      label.decode() for label in want["label"]]
  meta = requests.get(f"{served['base']}/v1/models/tiny_onnx/metadata",
                      timeout=60).json()["metadata"]["signature_def"]
  assert set(meta["signature_def"]["serve_text"]["inputs"]) == {"text"}
  reply = requests.post(f"{served['base']}/v1/models/tiny_onnx:predict",
                        json={"signature_name": "serve_text",
                              "instances": ["  "]}, timeout=60)
  assert reply.status_code == 400 and "empty text" in reply.json()["error"]


@pytest.mark.parametrize("body, status, message", [
    ("{not json", 400, "JSON Parse error"),
    ('{"instances": ' + "[" * 100000 + "]" * 100000 + "}", 400,
     "JSON Parse error: nested too deep"),
    (json.dumps({"instances": ["good"], "signature_name": "nope"}), 400,
     "\"nope\" not found"),
    (json.dumps({"signature_name": "serve_text"}), 400, "exactly one of"),
    (json.dumps({"signature_name": "serve_text", "instances": [""]}), 400,
     "empty text"),
    (json.dumps({"signature_name": "serve_text", "instances": ["a" * 201]}),
     400, "more than the server's limit of 200"),
    (json.dumps({"signature_name": "serve_text", "instances": [3]}), 400,
     "expected string"),
    (json.dumps({"signature_name": "serve_text",
                 "instances": ["good"] * 9}), 400,
     "larger than maximum input batch size 8"),
    (json.dumps({"inputs": {"input_word_ids": [[1.5, 2]],
                            "input_mask": [[1, 1]],
                            "input_type_ids": [[0, 0]]}}), 400,
     "input_word_ids: expected int32"),
    (json.dumps({"inputs": {"input_word_ids": [1, 2], "input_mask": [1, 1],
                            "input_type_ids": [0, 0]}}), 400,
     "got shape [2]"),
    (json.dumps({"inputs": {"input_word_ids": [[1, 2]]}}), 400,
     "missing ['input_mask', 'input_type_ids']"),
])
def test_bad_rest_request_is_answered_and_the_server_keeps_serving(
    served, body, status, message):
  reply = requests.post(f"{served['url']}:predict", data=body, timeout=60)
  assert reply.status_code == status, reply.text
  assert message in reply.json()["error"]
  assert _predict_text(served, ["good"]).status_code == 200
  assert served["process"].poll() is None


def test_a_body_above_the_limit_is_refused_before_it_is_read(served):
  """A request declaring a 100 MB body (above the 64 MB default) gets 413
  at once, with nothing of the body sent; the server keeps serving."""
  import socket
  import urllib.parse
  address = urllib.parse.urlsplit(served["base"])
  with socket.create_connection((address.hostname, address.port),
                                timeout=60) as client:
    client.sendall(b"POST /v1/models/tiny:predict HTTP/1.1\r\n"
                   b"Host: localhost\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 100000000\r\n\r\n{")
    reply = b""
    while chunk := client.recv(65536):     # the server closes when done
      reply += chunk
    reply = reply.decode()
  assert reply.startswith("HTTP/1.1 413"), reply[:200]
  assert "more than the server's limit of 67108864" in reply
  assert _predict_text(served, ["good"]).status_code == 200
  assert served["process"].poll() is None


def test_unknown_model_version_and_grpc_errors(served):
  assert requests.get(f"{served['base']}/v1/models/other",
                      timeout=60).status_code == 404
  reply = requests.post(f"{served['base']}/v1/models/tiny/versions/99:predict",
                        json={"instances": ["good"]}, timeout=60)
  assert reply.status_code == 404 and "Specific(tiny, 99)" in \
      reply.json()["error"]
  stub = prediction_service_pb2_grpc.PredictionServiceStub(served["channel"])
  request = predict_pb2.PredictRequest()
  request.model_spec.name = "tiny"
  request.model_spec.signature_name = "serve_text"
  request.inputs["text"].CopyFrom(tf.make_tensor_proto([1.0, 2.0]))
  with pytest.raises(grpc.RpcError) as error:
    stub.Predict(request, timeout=60)
  assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
  assert "input text: expected string" in error.value.details()
  request.model_spec.name = "other"
  with pytest.raises(grpc.RpcError) as error:
    stub.Predict(request, timeout=60)
  assert error.value.code() == grpc.StatusCode.NOT_FOUND
  # Raw int32 bytes that do not fill the declared shape [1, 6].
  short = predict_pb2.PredictRequest()
  short.model_spec.name = "tiny"
  for name in ("input_word_ids", "input_mask", "input_type_ids"):
    short.inputs[name].CopyFrom(tensor_pb2.TensorProto(
        dtype=types_pb2.DT_INT32, tensor_content=np.ones(5, np.int32).tobytes(),
        tensor_shape={"dim": [{"size": 1}, {"size": 6}]}))
  with pytest.raises(grpc.RpcError) as error:
    stub.Predict(short, timeout=60)
  assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
  assert "tensor_content holds 5 values" in error.value.details()
  assert requests.get(served["url"], timeout=60).status_code == 200


def test_new_version_is_served_without_a_failed_request(served):
  export = os.path.join(served["model_dir"], "export")
  failures, versions, stop = [], set(), threading.Event()
  stub = prediction_service_pb2_grpc.PredictionServiceStub(served["channel"])

  def client():
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "tiny"
    request.model_spec.signature_name = "serve_text"
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(["good"]))
    while not stop.is_set():
      try:
        versions.add(stub.Predict(request, timeout=60).model_spec.version.value)
      except grpc.RpcError as e:
        failures.append(e.details())

  thread = threading.Thread(target=client)
  thread.start()
  try:
    time.sleep(0.5)
    shutil.copytree(f"{export}/1", f"{export}/2.tmp-copy")   # then renamed,
    os.rename(f"{export}/2.tmp-copy", f"{export}/2")         # as exports are
    deadline = time.time() + 60
    while 2 not in versions and time.time() < deadline:
      time.sleep(0.2)
  finally:
    stop.set()
    thread.join()
  assert not failures, failures[:3]
  assert versions == {1, 2}
  status = requests.get(served["url"], timeout=60).json()
  assert [(s["version"], s["state"]) for s in
          status["model_version_status"]] == [("2", "AVAILABLE"),
                                              ("1", "END")]


def test_negative_thread_count_is_a_one_line_error(served, capsys):
  from bertexp import cli
  assert cli.main(["serve", served["model_dir"],
                   "--tensorflow_intra_op_parallelism=-1"]) == 2
  assert "--tensorflow_intra_op_parallelism -1: expected 0" in \
      capsys.readouterr().err


def test_benchmark_measures_every_path_with_its_environment(served):
  from bertexp.serving.benchmarks import benchmark
  port = lambda name: int(re.search(r":(\d+)", served[name])[1])
  report = benchmark.run(served["model_dir"], lengths=(8, 24), clients=(1, 3),
                         calls=6, warmup=1, seconds=0.2, throughput_tokens=8,
                         server=False)
  paths = {"grpc": benchmark.grpc_path(served["grpc_port"], "tiny"),
           "rest": benchmark.rest_path(port("base"), "tiny")}
  for name, make_call in paths.items():
    report["latency"].append(dict(path=name, tokens=8, **benchmark.latency(
        make_call(), benchmark.token_ids(8, 25), calls=6, warmup=1)))
    report["throughput"].append(dict(path=name, tokens=8, **benchmark.throughput(
        make_call, benchmark.token_ids(8, 25), clients=3, seconds=0.2)))
  # TFLite files run at their fixed length (max_seq_length 16).
  assert [(r["path"], r["tokens"]) for r in report["latency"]] == [
      ("savedmodel", 8), ("savedmodel", 24), ("onnx-float32", 8),
      ("onnx-float32", 24), ("onnx-int8", 8), ("onnx-int8", 24),
      ("tflite-float", 16), ("tflite-int8", 16), ("grpc", 8), ("rest", 8)]
  for row in report["latency"]:
    assert row["calls"] == 6 and 0 < row["p50_ms"] <= row["p90_ms"] <= \
        row["p99_ms"], row
  assert [(r["path"], r["clients"]) for r in report["throughput"]] == [
      ("savedmodel", 1), ("savedmodel", 3), ("onnx-float32", 1),
      ("onnx-float32", 3), ("onnx-int8", 1), ("onnx-int8", 3),
      ("tflite-float", 1),
      ("tflite-float", 3), ("tflite-int8", 1), ("tflite-int8", 3),
      ("grpc", 3), ("rest", 3)]
  assert all(r["requests"] >= r["clients"] for r in report["throughput"])
  # One in-process call with 1 row and with as many rows as the most clients.
  assert [(r["path"], r["rows"]) for r in report["batch"]] == [
      (path, rows) for path in ("savedmodel", "onnx-float32", "onnx-int8")
      for rows in (1, 3)]
  env = report["environment"]
  assert env["cpu"] and env["tensorflow"] == tf.__version__
  text = benchmark.table(report)
  assert env["cpu"] in text and "p99 ms" in text and "requests/s" in text
  assert "ms/row" in text
  # The ids the benchmark sends are valid for the export (25-word vocab).
  ids = benchmark.token_ids(24, benchmark.vocab_size(
      f"{served['model_dir']}/export/1"))["input_word_ids"]
  assert ids.max() < 25 and ids.shape == (1, 24)
