"""`bertexp benchmark-serving`: latency and throughput of an export, in
process, through `bertexp serve` (gRPC and REST; gRPC again with request
batching on), and of its TFLite files.

    bertexp benchmark-serving runs/demo --output_json=serving.json

Every path gets the same token ids (batch 1, `lengths` tokens, ids drawn
with a fixed seed). Latency: after `warmup` calls, `calls` calls one after
another; p50/p90/p99 in milliseconds. Throughput: 1, 4 and 16 concurrent
clients, each calling in a loop for `seconds`; requests per second. The CPU,
its instruction sets, the thread counts and the versions head the output.
TFLite files take their own fixed sequence length (the export's
max_seq_length), so their rows say which length they ran.
"""
import concurrent.futures
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time

import tensorflow as tf

from bertexp.serving import versions as versions_lib
from bertexp.serving.timing import latency, token_ids
from bertexp.util import fileio, machine

NAMES = ("input_word_ids", "input_mask", "input_type_ids")


def throughput(make_call, inputs, *, clients, seconds):
  """Requests per second of `clients` threads calling in a loop; each
  thread gets its own `make_call()` (a TFLite interpreter, an HTTP
  session)."""
  calls = [make_call() for _ in range(clients)]
  for call in calls:
    call(inputs)
  counts = [0] * clients
  barrier = threading.Barrier(clients)

  def loop(i):
    barrier.wait()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
      calls[i](inputs)
      counts[i] += 1

  start = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(clients) as pool:
    list(pool.map(loop, range(clients)))
  return {"clients": clients, "requests": sum(counts),
          "requests_per_second": sum(counts) / (time.perf_counter() - start)}


# -- the paths measured -------------------------------------------------------
def savedmodel_path(export_dir):
  """make_call for the SavedModel's serving_default, in this process."""
  import tensorflow_text  # noqa: F401
  signature = tf.saved_model.load(export_dir).signatures["serving_default"]

  def make_call():
    return lambda inputs: signature(**{k: tf.constant(v) for k, v in
                                       inputs.items()})
  return make_call


def grpc_path(port, model_name):
  """make_call for Predict through `bertexp serve`'s gRPC API."""
  import grpc
  from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
  channel = grpc.insecure_channel(f"127.0.0.1:{port}")
  stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

  def call(inputs):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    for name, value in inputs.items():
      request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return stub.Predict(request, timeout=60)
  return lambda: call


def rest_path(port, model_name):
  """make_call for :predict through `bertexp serve`'s REST API."""
  import requests
  url = f"http://127.0.0.1:{port}/v1/models/{model_name}:predict"

  def make_call():
    session = requests.Session()

    def call(inputs):
      reply = session.post(url, data=json.dumps(
          {"inputs": {k: v.tolist() for k, v in inputs.items()}}), timeout=60)
      reply.raise_for_status()
      return reply
    return call
  return make_call


def tflite_path(path):
  """(make_call, its fixed sequence length) for a TFLite file."""
  content = fileio.read_bytes(path)

  def make_call():
    runner = tf.lite.Interpreter(model_content=content).get_signature_runner()
    return lambda inputs: runner(**inputs)
  length = tf.lite.Interpreter(model_content=content).get_input_details()[0][
      "shape"][1]
  return make_call, int(length)


class ServerProcess:
  """`bertexp serve` on free ports, in its own process, for the duration of
  a `with` block."""

  def __init__(self, export_folder, model_name, *flags):
    self.command = [sys.executable, "-m", "bertexp.cli", "serve",
                    export_folder, f"--model_name={model_name}",
                    "--rest_port=0", "--grpc_port=0", "--host=127.0.0.1",
                    *flags]

  def __enter__(self):
    self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                    text=True)
    line = self.process.stdout.readline()
    match = re.search(r"REST port (\d+), gRPC port (\d+)", line)
    if not match:
      self.process.kill()
      raise RuntimeError(f"bertexp serve did not start: {line!r}")
    self.rest_port, self.grpc_port = int(match[1]), int(match[2])
    return self

  def __exit__(self, *exc):
    self.process.terminate()
    self.process.wait(60)


# -- the whole benchmark -------------------------------------------------------
def environment():
  """The CPU, threads and versions a figure depends on."""
  import grpc
  return dict(machine.describe_cpu(), tensorflow=tf.__version__,
              grpcio=grpc.__version__,
              intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
              inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads())


def _paths(path, servers, tflite_files):
  """{name: (make_call, fixed length or None)}."""
  paths = {}
  if path is not None:
    paths["savedmodel"] = (savedmodel_path(path), None)
  if servers is not None:
    plain, batching = servers
    paths["grpc"] = (grpc_path(plain.grpc_port, "bench"), None)
    paths["rest"] = (rest_path(plain.rest_port, "bench"), None)
    paths["grpc-batching"] = (grpc_path(batching.grpc_port, "bench"), None)
  for name, file in tflite_files.items():
    paths[name] = tflite_path(file)
  return paths


class _Servers:
  """`bertexp serve` twice: without batching and with TF Serving's batching
  defaults (`--enable_batching`)."""

  def __init__(self, folder):
    self._servers = [ServerProcess(folder, "bench"),
                     ServerProcess(folder, "bench", "--enable_batching")]

  def __enter__(self):
    return [server.__enter__() for server in self._servers]

  def __exit__(self, *exc):
    for server in self._servers:
      server.__exit__(*exc)


def vocab_size(export_dir):
  """The export's vocabulary size: rows of its word embedding table (100
  when no variable is named so: ids below 100 exist in any BERT)."""
  import tensorflow_text  # noqa: F401
  loaded = tf.saved_model.load(export_dir)
  model = getattr(loaded, "model", None)
  sizes = [v.shape[0] for v in getattr(model, "variables", [])
           if "word_embeddings" in v.name]
  return int(sizes[0]) if sizes else 100


def run(target, *, lengths=(16, 128), clients=(1, 4, 16), calls=200,
        warmup=20, seconds=3.0, throughput_tokens=16, server=True):
  """Measures every path of `target`.

  Args:
    target: a MODEL_DIR / export folder / SavedModel folder (the SavedModel
      in process, through the server, and the run's tflite/*.tflite files)
      or a .tflite file.
    lengths: token counts of the latency rows.
    clients: concurrent clients of the throughput rows.
    calls, warmup: latency calls measured, and before them.
    seconds: each throughput measurement's duration.
    throughput_tokens: the token count of the throughput rows.
    server: also measure through `bertexp serve` (gRPC and REST; gRPC
      again with request batching on).
  Returns:
    {"environment": ..., "latency": [rows], "throughput": [rows]}.
  Raises:
    FileNotFoundError: no export or TFLite file there.
  """
  export_dir, tflite_files, vocab = None, {}, 30522
  if str(target).endswith(".tflite"):
    tflite_files["tflite"] = target
  else:
    export_dir = versions_lib.resolve_export_dir(target)
    vocab = vocab_size(export_dir)
    run_dir = export_dir.rstrip("/").rsplit("/", 2)[0]    # MODEL_DIR
    for kind in ("float", "int8"):
      candidate = fileio.join(run_dir, "tflite", f"model_{kind}.tflite")
      if tf.io.gfile.exists(candidate):
        tflite_files[f"tflite-{kind}"] = candidate
  report = {"environment": environment(), "latency": [], "throughput": []}
  folder = export_dir and os.path.dirname(export_dir.rstrip("/"))
  with (_Servers(folder) if server and export_dir
        else contextlib.nullcontext()) as servers:
    for name, (make_call, fixed) in _paths(export_dir, servers,
                                            tflite_files).items():
      for length in ([fixed] if fixed else lengths):
        report["latency"].append(dict(
            path=name, tokens=length, **latency(
                make_call(), token_ids(length, vocab), calls=calls,
                warmup=warmup)))
      for count in clients:
        report["throughput"].append(dict(
            path=name, tokens=fixed or throughput_tokens, **throughput(
                make_call, token_ids(fixed or throughput_tokens, vocab),
                clients=count, seconds=seconds)))
  return report


def table(report):
  """The report as text: environment, latency rows, throughput rows."""
  env = report["environment"]
  lines = [f"CPU: {env['cpu']}, {env['cores']} logical cores, "
           f"{' '.join(env['flags']) or 'no AVX2/AVX-512/AMX'}; TensorFlow "
           f"{env['tensorflow']}, grpcio {env['grpcio']}, intra-op threads "
           f"{env['intra_op_threads'] or 'default'}, inter-op "
           f"{env['inter_op_threads'] or 'default'}",
           "", f"{'path':<14}{'tokens':>7}{'p50 ms':>9}{'p90 ms':>9}"
           f"{'p99 ms':>9}   (batch 1)"]
  for row in report["latency"]:
    lines.append(f"{row['path']:<14}{row['tokens']:>7}{row['p50_ms']:>9.2f}"
                 f"{row['p90_ms']:>9.2f}{row['p99_ms']:>9.2f}")
  lines += ["", f"{'path':<14}{'tokens':>7}{'clients':>9}{'requests/s':>12}"]
  for row in report["throughput"]:
    lines.append(f"{row['path']:<14}{row['tokens']:>7}{row['clients']:>9}"
                 f"{row['requests_per_second']:>12.1f}")
  return "\n".join(lines)
