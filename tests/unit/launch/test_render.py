"""`bertexp launch`'s renderings: the Kubernetes manifests validate against
Kubernetes' published schema (kubernetes-validate); each pod's TF_CONFIG,
as Kubernetes expands it, names every pod by the DNS name the Indexed Job
and its headless Service give, and makes the strategy multi-worker; Vertex
AI's CLUSTER_SPEC for the rendered CustomJob becomes a TF_CONFIG of one
chief and N - 1 workers; the TPU VM command runs the same `bertexp train`
on every host. (`--platform=local` trains every 2-worker cell of
tests/e2e/test_strategy_matrix.py.)"""
import json
import shlex

import gin
import kubernetes_validate
import pytest
import yaml

from bertexp import cli
from bertexp.launch import render
from bertexp.util import cluster

K8S_VERSION = "1.33"
PARAMS = ('MODEL_DIR="gs://bucket/runs/mnli"', "LEARNING_RATE=3e-05")


def _profile(**more):
  return render.LaunchProfile(**dict(dict(
      name="mnli", workers=3, gin_files=("glue/mnli_base.gin",),
      gin_params=PARAMS, gpus_per_worker=1), **more))


def _launch(*flags, capsys):
  assert cli.main(["launch", "--gin_file=glue/mnli_base.gin"] +
                  [f"--gin_param={p}" for p in PARAMS] + list(flags)) == 0
  return capsys.readouterr().out


def _expand(value, variables):
  """Kubernetes' $(VAR) expansion of an env value."""
  for name, text in variables.items():
    value = value.replace(f"$({name})", text)
  return value


def _train_command_parses(args):
  """`args` is a `bertexp train` command whose strategy comes from the
  environment; returns its parsed flags."""
  parsed = cli.build_parser().parse_args(cli.normalise_flag_spelling(args))
  assert parsed.command == "train"
  cli.parse_gin(parsed.gin_file, parsed.gin_param)
  assert gin.query_parameter("bertexp.make_strategy.kind") == "auto"
  assert gin.query_parameter("%LEARNING_RATE") == 3e-05
  return parsed


def test_kubernetes_manifests_validate_and_give_each_pod_its_tf_config(
    capsys):
  service, job = yaml.safe_load_all(_launch(
      "--platform=kubernetes", "--workers=3", "--name=mnli",
      "--gpus_per_worker=1", capsys=capsys))
  for manifest in (service, job):
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
  assert service["spec"]["clusterIP"] == "None"
  assert service["spec"]["selector"].items() <= (
      job["spec"]["template"]["metadata"]["labels"].items())
  spec = job["spec"]
  assert spec["completionMode"] == "Indexed"
  assert spec["completions"] == spec["parallelism"] == 3
  pod = spec["template"]["spec"]
  assert pod["subdomain"] == service["metadata"]["name"]
  container, = pod["containers"]
  assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
  _train_command_parses(container["args"])
  env = {e["name"]: e for e in container["env"]}
  assert list(env) == ["WORKER_INDEX", "TF_CONFIG"]    # defined before use
  assert "job-completion-index" in env["WORKER_INDEX"]["valueFrom"][
      "fieldRef"]["fieldPath"]
  # An Indexed Job's pod i is host <job>-i in the Service's subdomain.
  hosts = [f"mnli-{i}.mnli.default.svc.cluster.local:2222" for i in range(3)]
  for index in range(3):
    tf_config = json.loads(_expand(env["TF_CONFIG"]["value"],
                                   {"WORKER_INDEX": str(index)}))
    assert tf_config == {"cluster": {"worker": hosts},
                         "task": {"type": "worker", "index": index}}
    environ = {"TF_CONFIG": json.dumps(tf_config)}
    assert cluster.environment_strategy(environ) == "multi_worker_mirrored"


def test_a_broken_manifest_fails_the_schema_check():
  """The validator catches what Kubernetes would refuse (so the test above
  can fail)."""
  _, job = yaml.safe_load_all(render.kubernetes(_profile()))
  job["spec"]["completions"] = "three"
  with pytest.raises(kubernetes_validate.ValidationError):
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)


def test_vertex_custom_job_has_a_chief_pool_and_a_worker_pool(capsys):
  job = json.loads(_launch("--platform=vertex", "--workers=4", "--name=mnli",
                           "--accelerator_type=NVIDIA_L4",
                           "--gpus_per_worker=2", capsys=capsys))
  chief, workers = job["jobSpec"]["workerPoolSpecs"]
  assert chief["replicaCount"] == 1 and workers["replicaCount"] == 3
  for pool in (chief, workers):
    assert pool["machineSpec"] == {"machineType": "n1-standard-8",
                                   "acceleratorType": "NVIDIA_L4",
                                   "acceleratorCount": 2}
    _train_command_parses(pool["containerSpec"]["args"])
  # What Vertex AI sets in the third replica of pool 1.
  spec = {"cluster": {"workerpool0": ["cmle-training-workerpool0-0:2222"],
                      "workerpool1": [f"cmle-training-workerpool1-{i}:2222"
                                      for i in range(3)]},
          "environment": "cloud", "task": {"type": "workerpool1", "index": 2}}
  environ = {"CLUSTER_SPEC": json.dumps(spec)}
  assert cluster.environment_strategy(environ) == "multi_worker_mirrored"
  tf_config = json.loads(environ["TF_CONFIG"])
  assert tf_config["cluster"] == {"chief": spec["cluster"]["workerpool0"],
                                  "worker": spec["cluster"]["workerpool1"]}
  assert tf_config["task"] == {"type": "worker", "index": 2}


def test_one_vertex_worker_is_a_chief_alone():
  job = json.loads(render.vertex(_profile(workers=1)))
  assert [p["replicaCount"] for p in job["jobSpec"]["workerPoolSpecs"]] == [1]


def test_tpu_vm_command_runs_the_experiment_on_every_host(capsys):
  words = shlex.split(_launch("--platform=tpu-vm", "--tpu_name=v4-32",
                              "--zone=us-central2-b", capsys=capsys))
  assert words[:7] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "v4-32",
                       "--zone=us-central2-b"]
  assert "--worker=all" in words
  command = shlex.split(words[-1].split("=", 1)[1])
  assert command[0] == "bertexp"
  _train_command_parses(command[1:])
  assert cluster.environment_strategy(
      {"TPU_ACCELERATOR_TYPE": "v4-32"}) == "tpu"


@pytest.mark.parametrize("environ,message", [
    ({"CLUSTER_SPEC": "{"}, "not Vertex AI's cluster spec"),
    ({"CLUSTER_SPEC": json.dumps({"cluster": {"workerpool0": ["a:1"],
                                              "workerpool2": ["b:1"]},
                                  "task": {"type": "workerpool0"}})},
     "workerpool2"),
    ({"TF_CONFIG": "not json"}, "TF_CONFIG is not JSON"),
])
def test_unreadable_cluster_environments_are_named(environ, message):
  with pytest.raises(ValueError, match=message):
    cluster.environment_strategy(environ)


def test_one_process_alone_has_no_cluster_strategy():
  one = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]},
                                  "task": {"type": "worker", "index": 0}})}
  assert cluster.environment_strategy(one) is None
  assert cluster.environment_strategy({}) is None


@pytest.mark.parametrize("change,message", [
    (dict(name="MNLI_run"), "a job name is lower-case"),
    (dict(workers=0), "at least 1"),
    (dict(gin_files=("glue/mnli_base.gin", "glue/nonexist.gin")),
     "^--gin_file=glue/nonexist.gin: no such file here nor among the shipped"),
])
def test_bad_profiles_are_clear_errors(change, message):
  with pytest.raises(ValueError, match=message):
    _profile(**change)


def test_tpu_vm_needs_its_name_and_zone():
  with pytest.raises(ValueError, match="needs --tpu_name and --zone"):
    render.tpu_vm(_profile())


def test_launch_starts_without_loading_tensorflow(tmp_path):
  """`bertexp launch` only renders or starts other processes: a new
  process runs it (its file written through bertexp's file access) without
  TensorFlow's ~3 CPU-seconds of import, which every worker it starts pays
  anyway."""
  import subprocess
  import sys
  output = tmp_path / "job.yaml"
  code = ("import sys; from bertexp import cli; status = cli.main(sys.argv[1:]); "
          "print('TENSORFLOW', 'tensorflow' in sys.modules); sys.exit(status)")
  done = subprocess.run(
      [sys.executable, "-c", code, "launch", "--platform=kubernetes",
       "--gin_file=glue/mnli_base.gin", f"--output={output}"],
      capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stdout + done.stderr
  assert "TENSORFLOW False" in done.stdout, done.stdout
  assert len(list(yaml.safe_load_all(output.read_text()))) == 2
