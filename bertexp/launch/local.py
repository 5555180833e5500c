"""`bertexp launch --platform=local`: the N worker processes of a launch
profile on this machine, each with the TF_CONFIG a cluster would give it
(localhost ports instead of pod names): a real multi-worker run. The
workers fork from one process that imported TensorFlow (bertexp.util.forked)
and die with the launcher.
"""
import os
import socket
import subprocess
import sys
import threading

from bertexp.util import cluster
from bertexp.util import forked


def free_ports(count):
  """`count` ports nothing listens on now."""
  sockets = [socket.socket() for _ in range(count)]
  try:
    for s in sockets:
      s.bind(("localhost", 0))
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def _relay(index, stream, out, lock):
  """Copies a worker's output to `out`, each line prefixed with its index."""
  for line in stream:
    with lock:
      out.write(f"[worker {index}] {line}")
      out.flush()


def run(profile, out=None):
  """Starts the profile's workers, relays their output, waits for all.

  A worker that fails stops the others (they would wait for it).

  Args:
    profile: the bertexp.launch.render.LaunchProfile.
    out: where the prefixed output goes (sys.stdout).
  Returns:
    0 when every worker succeeded, else the first failing worker's exit
    code.
  """
  out = out or sys.stdout
  hosts = [f"localhost:{port}" for port in free_ports(profile.workers)]
  lock, workers, relays = threading.Lock(), [], []
  try:
    for index in range(profile.workers):
      env = dict(os.environ, TF_CONFIG=cluster.tf_config(hosts, index))
      env.pop("CLUSTER_SPEC", None)
      process = forked.ForkedProcess(
          ["-m", "bertexp.cli", *profile.train_args()],
          preload=forked.TRAINING_MODULES, env=env, text=True,
          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
      workers.append(process)
      relay = threading.Thread(target=_relay, daemon=True, args=(
          index, process.stdout, out, lock))
      relay.start()
      relays.append(relay)
    return _wait(workers)
  finally:
    for process in workers:
      if process.poll() is None:
        process.terminate()
      process.wait()
    for relay in relays:
      relay.join()


def _wait(workers):
  """The first nonzero exit code among the workers (the others then
  stopped), or 0."""
  pending = list(workers)
  while pending:
    for process in list(pending):
      try:
        code = process.wait(timeout=0.5)
      except subprocess.TimeoutExpired:
        continue
      pending.remove(process)
      if code != 0:
        return code
  return 0
