"""deploy/: the Kubeflow TFJob manifest's command is a valid bertexp command,
and the TF_CONFIG the training operator injects into its pods gives
bertexp's strategy factory the cluster the manifest asks for. (Two workers
training together over TF_CONFIG are run in test_strategy_matrix.py.)"""
import json
import os
import subprocess
import sys

import gin
import yaml

from bertexp import cli
from conftest import REPO

DEPLOY = os.path.join(REPO, "deploy")


def _tfjob():
  with open(os.path.join(DEPLOY, "kubeflow_tfjob.yaml")) as f:
    return yaml.safe_load(f)


def _operator_tf_config(job, index, port=2222, namespace="default"):
  """What the Kubeflow training operator sets in worker `index`'s pod."""
  name = job["metadata"]["name"]
  replicas = job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"]
  return {"cluster": {"worker": [f"{name}-worker-{i}.{namespace}.svc:{port}"
                                 for i in range(replicas)]},
          "task": {"type": "worker", "index": index}}


def test_tfjob_command_parses_as_a_multi_worker_run():
  job = _tfjob()
  assert job["kind"] == "TFJob"
  worker = job["spec"]["tfReplicaSpecs"]["Worker"]
  assert worker["replicas"] == 2
  container = worker["template"]["spec"]["containers"][0]
  assert container["name"] == "tensorflow"   # the operator's port/TF_CONFIG target
  args = cli.normalise_flag_spelling(container["args"])
  parsed = cli.build_parser().parse_args(args)
  assert parsed.command == "train"
  cli.parse_gin(parsed.gin_file, parsed.gin_param)
  assert gin.query_parameter("bertexp.make_strategy.kind") == "multi_worker_mirrored"
  assert gin.query_parameter("%MODEL_DIR").startswith("gs://")


def test_injected_tf_config_makes_the_strategy_of_the_manifest():
  """Each worker's TF_CONFIG as the operator injects it (host names made
  local ports: nothing else changes) through the manifest's gin files into
  bertexp.make_strategy, both workers at once in their own processes: 2
  replicas in sync; worker 0 writes MODEL_DIR, worker 1 under workers/."""
  import socket
  job = _tfjob()
  container = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"][
      "containers"][0]
  ports = []
  for _ in range(2):
    with socket.socket() as s:
      s.bind(("localhost", 0))
      ports.append(s.getsockname()[1])
  script = (
      "import json, sys\n"
      "import tensorflow as tf\n"
      "from bertexp import cli, experiment\n"
      "from bertexp.train import strategy\n"
      "args = cli.build_parser().parse_args(json.loads(sys.argv[1]))\n"
      "cli.parse_gin(args.gin_file, args.gin_param)\n"
      "s = strategy.make_strategy()\n"
      "print(json.dumps([isinstance(s, tf.distribute.MultiWorkerMirroredStrategy),\n"
      "                  s.num_replicas_in_sync,\n"
      "                  experiment.worker_model_dir(s, 'gs://b/runs/mnli')]))\n")
  workers = []
  for index in range(2):
    config = _operator_tf_config(job, index=index)
    assert config["cluster"]["worker"][index].startswith(
        f"bertexp-mnli-worker-{index}.")
    config["cluster"]["worker"] = [f"localhost:{p}" for p in ports]
    workers.append(subprocess.Popen(
        [sys.executable, "-c", script, json.dumps(container["args"])],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, TF_CONFIG=json.dumps(config), PYTHONPATH=REPO,
                 TF_CPP_MIN_LOG_LEVEL="3")))
  results = []
  try:
    for worker in workers:
      out, err = worker.communicate(timeout=300)
      assert worker.returncode == 0, err[-3000:]
      results.append(json.loads(out.strip().splitlines()[-1]))
  finally:
    for worker in workers:
      worker.kill()
  assert results == [[True, 2, "gs://b/runs/mnli"],
                     [True, 2, "gs://b/runs/mnli/workers/worker_1"]]


def test_tf_serving_files_parse_with_tf_serving_protos_and_bertexp_serve():
  """deploy/tf_serving: models.config is a valid ModelServerConfig (TF
  Serving's own proto) naming the folder run_tf_serving.sh mounts, and the
  batching file reads the same in `bertexp serve`."""
  from google.protobuf import text_format
  from tensorflow_serving.config import model_server_config_pb2
  from bertexp.serving.server.batching import BatchingParameters
  folder = os.path.join(DEPLOY, "tf_serving")
  with open(os.path.join(folder, "models.config")) as f:
    config = text_format.Parse(f.read(),
                               model_server_config_pb2.ModelServerConfig())
  (model,) = config.model_config_list.config
  with open(os.path.join(folder, "run_tf_serving.sh")) as f:
    script = f.read()
  assert f'/export:{model.base_path}:ro' in script
  assert "--batching_parameters_file=/config/batching_parameters.txt" in script
  assert BatchingParameters.from_file(os.path.join(
      folder, "batching_parameters.txt")) == BatchingParameters(
          max_batch_size=32, batch_timeout_micros=2000,
          max_enqueued_batches=100, num_batch_threads=2)
