"""`bertexp benchmark-serving`: latency and throughput of an export, in
process, through `bertexp serve` (gRPC and REST; gRPC again with request
batching on, and both with one thread per model call), and of its TFLite
and ONNX files (export-tflite, export-onnx; the int8 ONNX model through the
server too).

    bertexp benchmark-serving runs/demo --output_json=serving.json

Every path gets the same token ids (batch 1, `lengths` tokens, ids drawn
with a fixed seed). Latency: after `warmup` calls, `calls` calls one after
another; p50/p90/p99 in milliseconds. Throughput: 1, 4 and 16 concurrent
clients, each calling in a loop for `seconds`; requests per second. The CPU,
its instruction sets, the thread counts and the versions head the output.
TFLite files take their own fixed sequence length (the export's
max_seq_length), so their rows say which length they ran. Batch rows: one
in-process call with 1 row and with as many rows as the most clients,
which bounds what request batching can gain on this host.
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

from bertexp.checkpoints import run_files
from bertexp.serving.benchmarks.timing import latency, token_ids
from bertexp.serving.exporting import versions as versions_lib
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
  from bertexp.serving.server.grpc_api import tensor_proto
  channel = grpc.insecure_channel(f"127.0.0.1:{port}")
  stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

  def call(inputs):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    for name, value in inputs.items():
      request.inputs[name].CopyFrom(tensor_proto(value))
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


def onnx_path(path):
  """make_call for an ONNX model (export-onnx's) in ONNX Runtime, in this
  process; one session shared by every client, as a server would."""
  from bertexp.serving.exporting import onnx_export  # needs the [onnx] extra
  session = onnx_export.session(fileio.read_bytes(path))

  def make_call():
    return lambda inputs: onnx_export.run(session, inputs)
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


# The servers measured: {name: `bertexp serve` flags}. Without and with
# batching, each with the default threads (every model call may use every
# core) and with one thread per call (what serves most under concurrent
# load on few cores); gRPC row names are "grpc-" + the server's name.
SERVERS = {
    "plain": (),
    "batching": ("--enable_batching",),
    "1-thread": ("--tensorflow_intra_op_parallelism=1",),
    "batching-1-thread": ("--enable_batching",
                          "--tensorflow_intra_op_parallelism=1"),
}


def _paths(path, servers, files):
  """{name: (make_call, fixed length or None)}."""
  paths = {}
  if path is not None:
    paths["savedmodel"] = (savedmodel_path(path), None)
  for name, file in files.items():
    if name.startswith("onnx"):
      paths[name] = (onnx_path(file), None)
  for name, server in (servers or {}).items():
    row = "grpc" if name == "plain" else f"grpc-{name}"
    paths[row] = (grpc_path(server.grpc_port, "bench"), None)
    if name == "plain":
      paths["rest"] = (rest_path(server.rest_port, "bench"), None)
  for name, file in files.items():
    if name.startswith("tflite"):
      paths[name] = tflite_path(file)
  return paths


class _Servers:
  """The SERVERS on the SavedModel, and one on the int8 ONNX model when
  there is one (`onnx_folder`, its versions folder)."""

  def __init__(self, folder, onnx_folder=None):
    self._servers = {name: ServerProcess(folder, "bench", *flags)
                     for name, flags in SERVERS.items()}
    if onnx_folder:
      self._servers["onnx-int8"] = ServerProcess(onnx_folder, "bench")

  def __enter__(self):
    return {name: server.__enter__()
            for name, server in self._servers.items()}

  def __exit__(self, *exc):
    for server in self._servers.values():
      server.__exit__(*exc)


def batch_scaling(make_call, inputs, *, rows, calls, warmup):
  """p50 of one call with `rows` copies of the row in `inputs`: what
  request batching can gain is bounded by 1-row time x rows / this."""
  import numpy as np
  batch = {k: np.repeat(v, rows, axis=0) for k, v in inputs.items()}
  return dict(rows=rows, **latency(make_call(), batch, calls=calls,
                                   warmup=warmup))


def vocab_size(export_dir):
  """The export's vocabulary size: rows of its word embedding table (100
  when no variable is named so: ids below 100 exist in any BERT)."""
  import tensorflow_text  # noqa: F401
  loaded = tf.saved_model.load(export_dir)
  # Exports save the model's variables as `model_variables` (older ones
  # saved the Keras model as `model`).
  variables = getattr(loaded, "model_variables", None) or getattr(
      getattr(loaded, "model", None), "variables", [])
  sizes = [v.shape[0] for v in variables if "word_embeddings" in v.name]
  return int(sizes[0]) if sizes else 100


def run(target, *, lengths=(16, 128), clients=(1, 4, 16), calls=200,
        warmup=20, seconds=3.0, throughput_tokens=16, server=True):
  """Measures every path of `target`.

  Args:
    target: a MODEL_DIR / export folder / SavedModel folder (the SavedModel
      in process and through the server, the run's tflite/*.tflite files,
      its onnx/ models in process and the int8 one through the server), a
      .tflite or .onnx file, or an ONNX versions folder.
    lengths: token counts of the latency rows.
    clients: concurrent clients of the throughput rows.
    calls, warmup: latency calls measured, and before them.
    seconds: each throughput measurement's duration.
    throughput_tokens: the token count of the throughput rows.
    server: also measure through `bertexp serve` (the SERVERS, and the
      int8 ONNX model's).
  Returns:
    {"environment": ..., "latency": [rows], "throughput": [rows],
     "batch": [rows]}: "batch" has the in-process paths' p50 at 1 row and
    at max(clients) rows per call (the most a batching server could merge
    from those clients).
  Raises:
    FileNotFoundError: no export or TFLite file there.
  """
  export_dir, files, vocab = _targets(target)
  report = {"environment": environment(), "latency": [], "throughput": [],
            "batch": []}
  folder = export_dir and os.path.dirname(export_dir.rstrip("/"))
  onnx_folder = files.get("onnx-int8") and os.path.dirname(os.path.dirname(
      files["onnx-int8"]))
  with (_Servers(folder, onnx_folder) if server and export_dir
        else contextlib.nullcontext()) as servers:
    for name, (make_call, fixed) in _paths(export_dir, servers,
                                            files).items():
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
      if name == "savedmodel" or name.startswith("onnx"):
        for rows in sorted({1, max(clients)}):
          report["batch"].append(dict(
              path=name, tokens=throughput_tokens, **batch_scaling(
                  make_call, token_ids(throughput_tokens, vocab), rows=rows,
                  calls=max(calls // 4, 1), warmup=max(warmup // 4, 1))))
  return report


def _targets(target):
  """(SavedModel folder or None, {path name: .tflite / model.onnx file},
  vocabulary size) of a benchmark target: a .tflite or .onnx file, an ONNX
  version folder, or a MODEL_DIR / export folder / SavedModel folder with
  the run's tflite/ and onnx/ files beside it."""
  target = str(target)
  if target.endswith(".tflite"):
    return None, {"tflite": target}, 30522
  if target.endswith(".onnx"):
    return None, {"onnx": target}, 100
  export_dir = versions_lib.resolve_export_dir(target)
  if not tf.io.gfile.exists(fileio.join(export_dir, "saved_model.pb")):
    return None, {"onnx": fileio.join(export_dir, "model.onnx")}, 100
  files = {}
  run_dir = export_dir.rstrip("/").rsplit("/", 2)[0]    # MODEL_DIR
  for kind in ("float", "int8"):
    candidate = run_files.tflite(run_dir, f"model_{kind}.tflite")
    if tf.io.gfile.exists(candidate):
      files[f"tflite-{kind}"] = candidate
  for kind in ("float32", "int8"):
    folder = run_files.onnx(run_dir, kind)
    found = tf.io.gfile.isdir(folder) and versions_lib.list_versions(folder)
    if found:
      files[f"onnx-{kind}"] = fileio.join(found[max(found)], "model.onnx")
  return export_dir, files, vocab_size(export_dir)


def table(report):
  """The report as text: environment, latency rows, throughput rows."""
  env = report["environment"]
  lines = [f"CPU: {env['cpu']}, {env['cores']} logical cores, "
           f"{' '.join(env['flags']) or 'no AVX2/AVX-512/AMX'}; TensorFlow "
           f"{env['tensorflow']}, grpcio {env['grpcio']}, intra-op threads "
           f"{env['intra_op_threads'] or 'default'}, inter-op "
           f"{env['inter_op_threads'] or 'default'}",
           "", f"{'path':<16}{'tokens':>7}{'p50 ms':>9}{'p90 ms':>9}"
           f"{'p99 ms':>9}   (batch 1)"]
  for row in report["latency"]:
    lines.append(f"{row['path']:<16}{row['tokens']:>7}{row['p50_ms']:>9.2f}"
                 f"{row['p90_ms']:>9.2f}{row['p99_ms']:>9.2f}")
  lines += ["", f"{'path':<16}{'tokens':>7}{'clients':>9}{'requests/s':>12}"]
  for row in report["throughput"]:
    lines.append(f"{row['path']:<16}{row['tokens']:>7}{row['clients']:>9}"
                 f"{row['requests_per_second']:>12.1f}")
  if report.get("batch"):
    lines += ["", f"{'path':<16}{'tokens':>7}{'rows':>6}{'p50 ms':>9}"
              f"{'ms/row':>8}   (one call, in process)"]
    for row in report["batch"]:
      lines.append(f"{row['path']:<16}{row['tokens']:>7}{row['rows']:>6}"
                   f"{row['p50_ms']:>9.2f}{row['p50_ms'] / row['rows']:>8.2f}")
  return "\n".join(lines)
