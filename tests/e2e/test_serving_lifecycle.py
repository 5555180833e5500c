"""`bertexp serve` over its life, each server of these tests its own: a
batching window of ten minutes means a batch runs when it is full or when
the server shuts down, never because time passed, so what must be waiting
is waiting whatever the host's speed. Requests merge into one model call;
an overloaded queue answers REST 429 and gRPC RESOURCE_EXHAUSTED; SIGTERM
answers the REST and gRPC requests in flight and refuses new ones; a numeric
version folder without its model file is not a version until the file
arrives; TLS from TF Serving's --ssl_config_file, plaintext refused."""
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import time

import grpc
import numpy as np
import pytest
import requests
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from conftest import start_server
from test_serving import TEXTS, _export

# A batch runs when it holds 4 rows or at shutdown; 4 rows may wait.
FULL_OR_SHUTDOWN = """
max_batch_size { value: 4 }
batch_timeout_micros { value: 600000000 }
max_enqueued_batches { value: 1 }
num_batch_threads { value: 1 }
"""
WAIT = 120      # seconds: the bound on waiting for a state, never a figure


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("lifecycle"))
  model_dir = _export(root)
  batching = os.path.join(root, "batching.txt")
  with open(batching, "w") as f:
    f.write(FULL_OR_SHUTDOWN)
  loaded = tf.saved_model.load(f"{model_dir}/export/1")
  reference = lambda texts: loaded.signatures["serve_text"](
      text=tf.constant(texts))["probabilities"].numpy()
  return {"root": root, "model_dir": model_dir, "batching": batching,
          "reference": reference}


def _metric(rest, name):
  """{model: value} of one of the server's Prometheus metrics."""
  text = requests.get(f"http://127.0.0.1:{rest}/monitoring/prometheus/metrics",
                      timeout=60).text
  return {line.split('model="')[1].split('"')[0]: int(line.split()[-1])
          for line in text.splitlines() if line.startswith(name + "{")}


def _wait_for(condition, what):
  deadline = time.time() + WAIT
  while not condition():
    assert time.time() < deadline, f"never happened: {what}"
    time.sleep(0.05)


def _rest(rest, texts, timeout=WAIT):
  return requests.post(f"http://127.0.0.1:{rest}/v1/models/tiny:predict",
                       json={"signature_name": "serve_text",
                             "instances": texts}, timeout=timeout)


def _grpc_request(texts):
  request = predict_pb2.PredictRequest()
  request.model_spec.name = "tiny"
  request.model_spec.signature_name = "serve_text"
  request.inputs["text"].CopyFrom(tf.make_tensor_proto(texts))
  return request


def _grpc_stub(port):
  channel = grpc.insecure_channel(f"127.0.0.1:{port}")
  return channel, prediction_service_pb2_grpc.PredictionServiceStub(channel)


def test_requests_merge_into_one_call_when_the_batch_is_full(exported):
  process, rest, _ = start_server(
      exported["model_dir"], f"--batching_parameters_file={exported['batching']}")
  try:
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
      replies = list(pool.map(lambda text: _rest(rest, [text]), TEXTS[:4]))
    for text, reply in zip(TEXTS, replies):
      assert reply.status_code == 200, reply.text
      np.testing.assert_allclose(reply.json()["predictions"][0]["probabilities"],
                                 exported["reference"]([text])[0], atol=1e-5)
    # A ten-minute window: only a full batch of 4 could have run them.
    text = requests.get(f"http://127.0.0.1:{rest}/monitoring/prometheus/metrics",
                        timeout=60).text
    assert 'bertexp_batch_calls{model="tiny",rows="4"} 1' in text
    assert "bertexp_batch_calls" not in text.replace(
        'bertexp_batch_calls{model="tiny",rows="4"} 1', "").replace(
            "# TYPE bertexp_batch_calls counter", "")
  finally:
    process.kill()


def test_overload_is_429_and_resource_exhausted_and_sigterm_answers_what_waits(
    exported):
  """Two 1-row requests wait (REST and gRPC); 3 more rows do not fit the
  queue of 4: REST 429, gRPC RESOURCE_EXHAUSTED, nothing enqueued. SIGTERM
  then runs the waiting batch and answers both, refuses a new request on
  each API, and the server exits 0."""
  process, rest, grpc_port = start_server(
      exported["model_dir"], f"--batching_parameters_file={exported['batching']}")
  channel, stub = _grpc_stub(grpc_port)
  pool = concurrent.futures.ThreadPoolExecutor(2)
  try:
    by_rest = pool.submit(_rest, rest, ["good"])
    by_grpc = pool.submit(stub.Predict, _grpc_request(["fun"]), timeout=WAIT)
    _wait_for(lambda: _metric(rest, "bertexp_waiting_rows").get("tiny") == 2,
              "two rows waiting")
    assert not by_rest.done() and not by_grpc.done()

    overload = _rest(rest, ["a", "b", "c"], timeout=60)
    assert overload.status_code == 429, overload.text
    assert "queue is full" in overload.json()["error"]
    with pytest.raises(grpc.RpcError) as refused:
      stub.Predict(_grpc_request(["a", "b", "c"]), timeout=60)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _metric(rest, "bertexp_waiting_rows")["tiny"] == 2

    process.send_signal(signal.SIGTERM)
    lines = []
    _wait_for(lambda: lines.append(process.stdout.readline()) or
              "shutting down" in lines[-1], "the shutdown line")
    with pytest.raises(requests.RequestException):
      _rest(rest, ["good"], timeout=10)
    with pytest.raises(grpc.RpcError) as late:
      stub.Predict(_grpc_request(["good"]), timeout=10)
    # grpcio refuses a call to a stopping server with one or the other,
    # depending on how far its stop has gone.
    assert late.value.code() in (grpc.StatusCode.UNAVAILABLE,
                                 grpc.StatusCode.CANCELLED), late.value

    reply = by_rest.result(timeout=WAIT)
    assert reply.status_code == 200, reply.text
    np.testing.assert_allclose(reply.json()["predictions"][0]["probabilities"],
                               exported["reference"](["good"])[0], atol=1e-5)
    np.testing.assert_allclose(
        tf.make_ndarray(by_grpc.result(timeout=WAIT).outputs["probabilities"]),
        exported["reference"](["fun"]), atol=1e-5)
    assert process.wait(WAIT) == 0
    assert "stopped" in process.stdout.read()
  finally:
    pool.shutdown(wait=False, cancel_futures=True)
    channel.close()
    process.kill()


def test_a_version_folder_without_its_model_file_is_not_a_version(exported):
  """Version 2 is copied in with its variables first: polls pass and
  version 1 stays the only one (no LOADING, no failed load); when
  saved_model.pb arrives, version 2 is served."""
  base = os.path.join(exported["root"], "versions")
  shutil.copytree(f"{exported['model_dir']}/export/1", f"{base}/1")
  process, rest, _ = start_server(base, "--file_system_poll_wait_seconds=0.05")
  status = lambda: [(s["version"], s["state"]) for s in requests.get(
      f"http://127.0.0.1:{rest}/v1/models/tiny", timeout=60).json()[
          "model_version_status"]]
  try:
    shutil.copytree(f"{base}/1", f"{base}/2",
                    ignore=shutil.ignore_patterns("saved_model.pb"))
    polls = _metric(rest, "bertexp_version_polls")["tiny"]
    _wait_for(lambda: _metric(rest, "bertexp_version_polls")["tiny"] >=
              polls + 3, "three polls")
    assert status() == [("1", "AVAILABLE")]
    reply = _rest(rest, ["good"])
    assert reply.status_code == 200, reply.text
    shutil.copy(f"{base}/1/saved_model.pb", f"{base}/2/saved_model.pb")
    _wait_for(lambda: status()[0] == ("2", "AVAILABLE"), "version 2 served")
    assert status() == [("2", "AVAILABLE"), ("1", "END")]
  finally:
    process.kill()


def _self_signed(folder):
  """(certificate PEM, key PEM) for localhost and 127.0.0.1, from openssl."""
  key, cert = os.path.join(folder, "key.pem"), os.path.join(folder, "cert.pem")
  subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                  "-keyout", key, "-out", cert, "-days", "2",
                  "-subj", "/CN=localhost",
                  "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                 check=True, capture_output=True)
  return open(cert).read(), open(key).read()


def test_tls_from_tf_servings_ssl_config_file_and_plaintext_refused(
    exported, tmp_path, capsys):
  cert, key = _self_signed(str(tmp_path))
  config = tmp_path / "ssl.config"
  config.write_text(f"server_key: {json.dumps(key)}\n"
                    f"server_cert: {json.dumps(cert)}\n")
  cert_file = str(tmp_path / "cert.pem")
  process, rest, grpc_port = start_server(exported["model_dir"],
                                          f"--ssl_config_file={config}")
  secure = grpc.secure_channel(
      f"127.0.0.1:{grpc_port}",
      grpc.ssl_channel_credentials(root_certificates=cert.encode()),
      options=[("grpc.ssl_target_name_override", "localhost")])
  plain, plain_stub = _grpc_stub(grpc_port)
  url = f"{rest}/v1/models/tiny:predict"
  body = {"signature_name": "serve_text", "instances": ["good"]}
  try:
    reply = requests.post(f"https://127.0.0.1:{url}", json=body,
                          verify=cert_file, timeout=60)
    assert reply.status_code == 200, reply.text
    np.testing.assert_allclose(reply.json()["predictions"][0]["probabilities"],
                               exported["reference"](["good"])[0], atol=1e-5)
    with pytest.raises(requests.RequestException):
      requests.post(f"http://127.0.0.1:{url}", json=body, timeout=30)
    response = prediction_service_pb2_grpc.PredictionServiceStub(
        secure).Predict(_grpc_request(["fun"]), timeout=60)
    np.testing.assert_allclose(
        tf.make_ndarray(response.outputs["probabilities"]),
        exported["reference"](["fun"]), atol=1e-5)
    with pytest.raises(grpc.RpcError) as refused:
      plain_stub.Predict(_grpc_request(["fun"]), timeout=30)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    # Still serving after the plaintext attempts.
    assert requests.post(f"https://127.0.0.1:{url}", json=body,
                         verify=cert_file, timeout=60).status_code == 200
  finally:
    secure.close()
    plain.close()
    process.kill()

  from bertexp import cli
  config.write_text(f"server_cert: {json.dumps(cert)}\n")
  assert cli.main(["serve", exported["model_dir"],
                   f"--ssl_config_file={config}"]) == 2
  error = capsys.readouterr().err.strip()
  assert error.endswith(f"{config}: server_key must hold the PEM text itself "
                        "(-----BEGIN ...), as in TF Serving's SSLConfig")
  assert "\n" not in error
