"""`bertexp serve`: an export behind TF Serving's REST and gRPC APIs.

    bertexp serve runs/demo                       # REST :8501, gRPC :8500
    curl -d '{"signature_name": "serve_text", "instances": ["a fine film"]}' \
        localhost:8501/v1/models/demo:predict

SIGTERM (or Ctrl-C) stops accepting requests, lets those in flight finish,
and exits 0. `--ssl_config_file` (TF Serving's SSLConfig) puts both ports
behind TLS (see tls.py).
"""
import concurrent.futures
import logging
import signal
import threading

from bertexp.serving.server.model_server import ModelServer, Models
from bertexp.serving.server.rest_api import make_app


# The largest request body: the gRPC server's message limit, and REST's.
MAX_REQUEST_BYTES = 64 << 20


def serve(models, *, rest_port=8501, grpc_port=8500, host="0.0.0.0",
          batching=None, poll_seconds=1.0, max_text_bytes=65536,
          max_request_bytes=MAX_REQUEST_BYTES, grpc_threads=16,
          grace_seconds=30.0, tls=None):
  """Serves until SIGTERM or SIGINT.

  Args:
    models: [(name, base path)]: the name in request paths and model specs;
      a MODEL_DIR or a folder of version folders.
    rest_port, grpc_port: 0 picks a free port (printed); None turns the API
      off.
    host: the address to listen on.
    batching: BatchingParameters (each model batches its own requests), or
      None (one model call per request).
    poll_seconds: how often new versions are looked for (0: never).
    max_text_bytes: the longest text a string input may hold.
    max_request_bytes: the largest request body (REST: refused with 413
      from its Content-Length before it is read; gRPC: the largest message).
    grpc_threads: concurrent gRPC requests.
    grace_seconds: how long requests in flight may take at shutdown.
    tls: a tls.TlsConfig: both ports speak TLS only; None: plaintext.
  Returns:
    0 after a clean shutdown.
  Raises:
    FileNotFoundError: no version to serve.
    ValueError: no API turned on.
  """
  if rest_port is None and grpc_port is None:
    raise ValueError("turn on at least one of --rest_port and --grpc_port")
  server = Models([ModelServer(path, name, batching=batching,
                               max_text_bytes=max_text_bytes)
                   for name, path in models])
  server.start_polling(poll_seconds)
  stopped = threading.Event()
  previous = {sig: signal.signal(sig, lambda *_: stopped.set())
              for sig in (signal.SIGTERM, signal.SIGINT)}
  grpc_server = http_server = rest_thread = None
  try:
    if grpc_port is not None:
      grpc_server, grpc_port = _start_grpc(server, host, grpc_port,
                                           grpc_threads, max_request_bytes,
                                           tls)
    if rest_port is not None:
      http_server, rest_thread = _start_rest(server, host, rest_port,
                                             max_request_bytes, tls)
      rest_port = http_server.server_port
    served = "; ".join(
        f"{name} version {server.status(name)[0][0]} from "
        f"{server.get(name).folder}" for name in server.names)
    print(f"serving {served}: REST port {rest_port}, gRPC port {grpc_port}"
          f"{' (TLS)' if tls else ''}"
          f"{', batching ' + str(batching) if batching else ''}", flush=True)
    stopped.wait()
  finally:
    if http_server is not None:
      http_server.shutdown()              # no new connections
    if grpc_server is not None:
      grpc_server.stop(grace_seconds)     # no new RPCs; waits for the rest
    print("shutting down: new requests refused, finishing those in flight",
          flush=True)
    finished = server.drain(grace_seconds)
    if rest_thread is not None:
      # werkzeug's serve_forever ends with server_close(), which joins the
      # request threads: their replies are written when it returns.
      rest_thread.join(grace_seconds)
    if grpc_server is not None:
      grpc_server.wait_for_termination(grace_seconds)
    for sig, handler in previous.items():
      signal.signal(sig, handler)
  if not finished:
    logging.warning("requests still in flight after %.0f s", grace_seconds)
  print("stopped", flush=True)
  return 0


def set_threads(intra_op, inter_op):
  """TF Serving's --tensorflow_intra_op_parallelism and
  --tensorflow_inter_op_parallelism: the threads one model call may use
  (ONNX models take the intra-op count too). Call before the first model
  loads.

  Args:
    intra_op, inter_op: thread counts; 0 keeps the runtime's default (one
      per core).
  Raises:
    ValueError: a negative count.
  """
  import tensorflow as tf
  for flag, value in (("intra_op", intra_op), ("inter_op", inter_op)):
    if value < 0:
      raise ValueError(f"--tensorflow_{flag}_parallelism {value}: expected "
                       "0 (one thread per core) or more")
  tf.config.threading.set_intra_op_parallelism_threads(intra_op)
  tf.config.threading.set_inter_op_parallelism_threads(inter_op)


def _start_grpc(server, host, port, threads, max_request_bytes, tls):
  import grpc
  from bertexp.serving.server import grpc_api
  grpc_server = grpc.server(
      concurrent.futures.ThreadPoolExecutor(max_workers=threads),
      options=[("grpc.max_receive_message_length", max_request_bytes),
               ("grpc.max_send_message_length", 64 << 20)])
  grpc_api.add_services(grpc_server, server)
  address = f"{host}:{port}"
  bound = (grpc_server.add_secure_port(address, tls.grpc_credentials()) if tls
           else grpc_server.add_insecure_port(address))
  if not bound:
    raise OSError(f"gRPC: cannot listen on {host}:{port}")
  grpc_server.start()
  return grpc_server, bound


def _start_rest(server, host, port, max_request_bytes, tls):
  from werkzeug.serving import make_server
  # No line per request (TF Serving logs none either); errors still log.
  logging.getLogger("werkzeug").setLevel(logging.WARNING)
  http_server = make_server(host, port, make_app(server, max_request_bytes),
                            threaded=True,
                            ssl_context=tls.ssl_context() if tls else None)
  # Keep the request threads joinable, so shutdown waits for their replies.
  http_server.daemon_threads = False
  http_server.block_on_close = True
  thread = threading.Thread(target=http_server.serve_forever, daemon=True,
                            name="rest")
  thread.start()
  return http_server, thread
