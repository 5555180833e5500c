"""MultiWorkerMirroredStrategy: 2 worker processes on localhost (TF_CONFIG)
train to the same weights as one process over the same global batch."""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, TINY_CONFIG
from test_train import _setup


def _free_ports(n):
  sockets = [socket.socket() for _ in range(n)]
  for s in sockets:
    s.bind(("localhost", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def _command(tmp_path, paths, runtime, model_dir):
  gin_file = tmp_path / f"exp_{runtime}.gin"
  gin_file.write_text(f"include 'tasks/classification.gin'\n"
                      f"include 'runtime/{runtime}.gin'\n")
  values = dict(paths, MODEL_DIR=model_dir)
  params = [f'{k}="{v}"' for k, v in values.items()] + [
      "TRAIN_BATCH_SIZE=8", "EVAL_BATCH_SIZE=6", "TRAIN_STEPS=3", "STEPS_PER_LOOP=1", "SEED=3",
      "bertexp.ClassificationTask.shuffle_buffer_size=0",
      "bertexp.ClassificationTask.dropout_rate=0.0"]
  return [sys.executable, "-m", "bertexp.cli", "train", f"--gin_file={gin_file}",
          "--mode=train_and_eval"] + [f"--gin_param={p}" for p in params]


def _weights(model_dir):
  path = tf.train.latest_checkpoint(model_dir)
  assert path and path.endswith("ckpt-3"), path
  return {name: tf.train.load_variable(path, name)
          for name, _ in tf.train.list_variables(path)
          if name.startswith("model/")}


def test_two_workers_equal_one_process(tmp_path):
  config = tmp_path / "cfg.json"
  config.write_text(json.dumps(dict(TINY_CONFIG, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)))
  vocab = tmp_path / "vocab.txt"
  from conftest import TINY_VOCAB
  vocab.write_text("\n".join(TINY_VOCAB) + "\n")
  paths = _setup(str(tmp_path / "exp"), str(vocab), str(config))
  paths.pop("MODEL_DIR")
  env = dict(os.environ, PYTHONPATH=REPO, TF_USE_LEGACY_KERAS="1")
  single = str(tmp_path / "single")
  subprocess.run(_command(tmp_path, paths, "cpu", single), env=env,
                 check=True, cwd=REPO, capture_output=True)
  ports = _free_ports(2)
  cluster = {"worker": [f"localhost:{p}" for p in ports]}
  multi = str(tmp_path / "multi")
  workers = []
  for index in range(2):
    worker_env = dict(env, TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": index}}))
    workers.append(subprocess.Popen(
        _command(tmp_path, paths, "multi_worker_gpu", multi), env=worker_env,
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  for worker in workers:
    output, _ = worker.communicate(timeout=300)
    assert worker.returncode == 0, output[-3000:]
  ours, theirs = _weights(multi), _weights(single)
  assert ours.keys() == theirs.keys() and len(ours) > 10
  for name in ours:
    np.testing.assert_allclose(ours[name], theirs[name], atol=2e-6, err_msg=name)
  initial = tf.train.load_variable(paths["INIT_CHECKPOINT"],
                                   "encoder/pooler/kernel/.ATTRIBUTES/VARIABLE_VALUE")
  assert not np.allclose(initial, ours["model/encoder/pooler/kernel/.ATTRIBUTES/VARIABLE_VALUE"])
  # Evaluation covers the whole eval set on every worker, with equal metrics.
  multi_eval = json.load(open(os.path.join(multi, "training_summary.json")))["eval_metrics"]
  single_eval = json.load(open(os.path.join(single, "training_summary.json")))["eval_metrics"]
  assert multi_eval["num_examples"] == single_eval["num_examples"] == 16
  assert multi_eval["loss"] == pytest.approx(single_eval["loss"], abs=1e-5)
  assert multi_eval["accuracy"] == single_eval["accuracy"]
  # The second worker wrote only into its private folder.
  assert os.path.isdir(os.path.join(multi, "workers", "worker_1"))
