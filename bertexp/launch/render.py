"""One experiment, one launch profile, what each platform needs to run it on
N workers (`bertexp launch`):

    kubernetes   a headless Service and an Indexed Job: pod i is
                 <name>-i.<name>, and its TF_CONFIG names every pod and
                 its own index (from the Job's completion index)
    vertex       a Vertex AI CustomJob (the REST body): worker pool 0 the
                 chief, pool 1 the other workers; Vertex AI sets their
                 CLUSTER_SPEC and TF_CONFIG
    tpu-vm       the gcloud command that runs the experiment on every host
                 of a Cloud TPU VM

Every worker runs the same `bertexp train` with the strategy resolved from
its environment (`bertexp.make_strategy.kind="auto"`), so the .gin file
needs no edit for the platform.
"""
import dataclasses
import json
import os
import re
import shlex
from typing import Optional, Tuple

import yaml

from bertexp import gin_setup

AUTO_STRATEGY = 'bertexp.make_strategy.kind="auto"'
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class LaunchProfile:
  """How an experiment is launched (`bertexp launch`'s flags, typed).

  Attributes:
    name: the job's name (a DNS label: lower case, digits, '-').
    workers: processes training together (1 or more).
    gin_files, gin_params: the experiment, as `bertexp train` takes it.
    mode: `bertexp train --mode`.
    image: the container image with bertexp installed (deploy/Dockerfile).
    port: the port the workers' collectives listen on.
    namespace: Kubernetes namespace.
    gpus_per_worker: GPUs each worker asks for (Kubernetes, Vertex AI).
    machine_type, accelerator_type: Vertex AI's machine of each worker.
    tpu_name, zone: the Cloud TPU VM.
  Raises:
    ValueError: a name that is not a DNS label, fewer than 1 worker, or a
      gin file that is neither here nor shipped (the workers run the same
      files: the image is built from this checkout or package).
  """
  name: str
  workers: int
  gin_files: Tuple[str, ...]
  gin_params: Tuple[str, ...] = ()
  mode: str = "train_and_eval"
  image: str = "bertexp:latest"
  port: int = 2222
  namespace: str = "default"
  gpus_per_worker: int = 0
  machine_type: str = "n1-standard-8"
  accelerator_type: Optional[str] = None
  tpu_name: Optional[str] = None
  zone: Optional[str] = None

  def __post_init__(self):
    if not _DNS_LABEL.match(self.name):
      raise ValueError(f"--name={self.name!r}: a job name is lower-case "
                       "letters, digits and '-', starting with a letter "
                       "(at most 40)")
    if self.workers < 1:
      raise ValueError(f"--workers={self.workers}: at least 1")
    for path in self.gin_files:
      if "://" not in path and not os.path.exists(
          gin_setup.resolve_gin_file(path)):
        raise ValueError(f"--gin_file={path}: no such file here nor among "
                         "the shipped experiments and gin fragments; every "
                         "worker would fail at its start")

  def train_args(self):
    """`bertexp train`'s arguments on every worker."""
    return (["train"] + [f"--gin_file={f}" for f in self.gin_files] +
            [f"--gin_param={p}" for p in self.gin_params] +
            [f"--gin_param={AUTO_STRATEGY}", f"--mode={self.mode}"])

  def hosts(self):
    """Each Kubernetes pod's address, in index order."""
    return [f"{self.name}-{i}.{self.name}.{self.namespace}.svc.cluster.local:"
            f"{self.port}" for i in range(self.workers)]


def _labels(profile):
  """A new dict each time: YAML then writes no anchors."""
  return {"app.kubernetes.io/name": "bertexp", "bertexp/job": profile.name}


def kubernetes(profile):
  """The Service and Job manifests, as one YAML text (kubectl apply -f)."""
  service = {
      "apiVersion": "v1", "kind": "Service",
      "metadata": {"name": profile.name, "namespace": profile.namespace,
                   "labels": _labels(profile)},
      "spec": {"clusterIP": "None", "selector": {"bertexp/job": profile.name},
               "ports": [{"name": "collectives", "port": profile.port}]}}
  cluster = json.dumps({"worker": profile.hosts()})
  container = {
      "name": "bertexp", "image": profile.image, "command": ["bertexp"],
      "args": profile.train_args(),
      "ports": [{"containerPort": profile.port, "name": "collectives"}],
      "env": [
          {"name": "WORKER_INDEX", "valueFrom": {"fieldRef": {
              "fieldPath": "metadata.annotations['batch.kubernetes.io/"
                           "job-completion-index']"}}},
          # Kubernetes expands $(WORKER_INDEX): each pod its own index.
          {"name": "TF_CONFIG", "value": f'{{"cluster": {cluster}, "task": '
                                         '{"type": "worker", "index": '
                                         '$(WORKER_INDEX)}}'}]}
  if profile.gpus_per_worker:
    container["resources"] = {"limits": {
        "nvidia.com/gpu": profile.gpus_per_worker}}
  job = {
      "apiVersion": "batch/v1", "kind": "Job",
      "metadata": {"name": profile.name, "namespace": profile.namespace,
                   "labels": _labels(profile)},
      "spec": {
          "completionMode": "Indexed", "completions": profile.workers,
          "parallelism": profile.workers,
          # A lost worker fails the step for all: the Job restarts the pods
          # and bertexp resumes from MODEL_DIR's last checkpoint.
          "backoffLimit": 6,
          "template": {
              "metadata": {"labels": _labels(profile)},
              "spec": {"subdomain": profile.name,
                       "restartPolicy": "OnFailure",
                       "containers": [container]}}}}
  return yaml.safe_dump_all([service, job], sort_keys=False)


def vertex(profile):
  """The Vertex AI CustomJob (REST body, JSON text): pool 0 one chief, pool 1
  the other workers."""
  machine = {"machineType": profile.machine_type}
  if profile.accelerator_type:
    machine.update(acceleratorType=profile.accelerator_type,
                   acceleratorCount=max(1, profile.gpus_per_worker))
  container = {"imageUri": profile.image, "command": ["bertexp"],
               "args": profile.train_args()}
  pools = [{"machineSpec": machine, "replicaCount": 1,
            "containerSpec": container}]
  if profile.workers > 1:
    pools.append({"machineSpec": machine, "replicaCount": profile.workers - 1,
                  "containerSpec": container})
  return json.dumps({"displayName": profile.name,
                     "jobSpec": {"workerPoolSpecs": pools}}, indent=2) + "\n"


def tpu_vm(profile):
  """The gcloud command that runs the experiment on every host of the TPU
  VM (its worker count is the slice's hosts, not --workers)."""
  if not (profile.tpu_name and profile.zone):
    raise ValueError("--platform=tpu-vm needs --tpu_name and --zone")
  train = shlex.join(["bertexp"] + profile.train_args())
  return shlex.join([
      "gcloud", "compute", "tpus", "tpu-vm", "ssh", profile.tpu_name,
      f"--zone={profile.zone}", "--worker=all", f"--command={train}"]) + "\n"


RENDERERS = {"kubernetes": kubernetes, "vertex": vertex, "tpu-vm": tpu_vm}
