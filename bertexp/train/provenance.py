"""What a run was made of, for the Training Summary: seed, numerics, hashes
of the init checkpoint / vocab / data files, versions and the git commit.
Two runs with equal provenance and a fixed seed give identical results on
the CPU (bertexp.experiment.deterministic)."""
import functools
import importlib.metadata
import os
import subprocess

import tensorflow as tf

from bertexp import capabilities
from bertexp.checkpoints import run_dir
from bertexp.train import strategy as strategy_lib
from bertexp.util import fileio

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=None)
def _sha256_cached(path, size, mtime):
  del size, mtime                     # the cache key: a changed file re-hashes
  return fileio.sha256(path)


def file_sha256(path):
  """The SHA-256 of a file (cached by path, size and modification time)."""
  stat = tf.io.gfile.stat(path)
  return _sha256_cached(path, stat.length, stat.mtime_nsec)


def checkpoint_sha256(checkpoint):
  """One hash over a checkpoint's index and data shards."""
  prefix = run_dir.resolve(checkpoint, intact=False)
  files = sorted(tf.io.gfile.glob(prefix + ".index") +
                 tf.io.gfile.glob(prefix + ".data-*"))
  return {"checkpoint": prefix,
          "sha256": {os.path.basename(f): file_sha256(f) for f in files}}


def git_commit():
  """HEAD of the bertexp checkout ("+dirty" with local changes), or None."""
  try:
    head = subprocess.run(["git", "-C", _REPO, "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", _REPO, "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True,
                           text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None
  return head + ("+dirty" if dirty else "")


def versions():
  """{package: version} of bertexp and the TensorFlow packages it runs on."""
  found = {}
  for package in ("bertexp", "tensorflow", "tf-keras", "tensorflow-text"):
    try:
      found[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      found[package] = None
  return found


def record(task, *, init_checkpoint, seed, deterministic, cpu_threads,
           precision):
  """What a run's numbers depend on besides its gin config (for
  training_summary.json); `precision` is the one the run used ("auto"
  resolved)."""
  files = (capabilities.find(task, capabilities.TrainingData) or
           capabilities.TrainingData()).files()
  return {
      "seed": seed, "deterministic": deterministic, "cpu_threads": cpu_threads,
      "precision": precision,
      # oneDNN and Eigen kernels round differently: the same seed gives other
      # float results with the other one.
      "onednn": strategy_lib.onednn_enabled(),
      "init_checkpoint": (checkpoint_sha256(init_checkpoint)
                          if init_checkpoint else None),
      "vocab_file": ({"path": files["vocab_file"],
                      "sha256": file_sha256(files["vocab_file"])}
                     if files.get("vocab_file") else None),
      "data_files": {path: file_sha256(path) for path in files["data_files"]
                     if path and tf.io.gfile.exists(path)},
      "versions": versions(),
      "git_commit": git_commit(),
  }
