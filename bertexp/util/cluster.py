"""Which cluster a process is part of, from what the platform that started
it sets in its environment:

    TF_CONFIG           TensorFlow's own (Kubernetes manifests of `bertexp
                        launch`, Kubeflow's TFJob, Vertex AI, a hand-written
                        script): {"cluster": {"worker": [...]}, "task": ...}
    CLUSTER_SPEC        Vertex AI custom jobs: {"cluster": {"workerpool0":
                        [...], "workerpool1": [...]}, "task": {"type":
                        "workerpool0", "index": 0}}; pool 0 is the chief
    TPU_ACCELERATOR_TYPE / TPU_NAME   a Cloud TPU VM

`environment_strategy()` names the strategy kind such a process trains
with; bertexp.make_strategy(kind="auto") uses it.
"""
import json
import os

# Vertex AI's worker pools, in order: the chief, the workers, (parameter
# servers, evaluators: not used by synchronous training).
_VERTEX_POOLS = ("chief", "worker")


def tf_config(hosts, index, task_type="worker"):
  """TF_CONFIG's JSON for task `index` of a cluster of `hosts` workers.

  Args:
    hosts: ["host:port", ...], the workers in index order.
    index: this process's position in `hosts`.
    task_type: "worker" (every task a worker; worker 0 writes MODEL_DIR).
  Returns:
    The JSON text.
  """
  return json.dumps({"cluster": {task_type: list(hosts)},
                     "task": {"type": task_type, "index": index}})


def from_cluster_spec(text):
  """TF_CONFIG's JSON for a Vertex AI CLUSTER_SPEC (its JSON text): pool 0
  as the chief, pool 1 as the workers.

  Raises:
    ValueError: not a CLUSTER_SPEC, or a pool bertexp does not train with.
  """
  try:
    spec = json.loads(text)
    pools, task = spec["cluster"], spec["task"]
  except (ValueError, KeyError, TypeError):
    raise ValueError(f"CLUSTER_SPEC is not Vertex AI's cluster spec: "
                     f"{text[:200]!r}") from None
  cluster = {}
  for number, name in enumerate(_VERTEX_POOLS):
    if pools.get(f"workerpool{number}"):
      cluster[name] = list(pools[f"workerpool{number}"])
  extra = sorted(set(pools) - {f"workerpool{n}" for n in range(2)})
  if extra:
    raise ValueError(f"CLUSTER_SPEC has worker pools {extra}: bertexp trains "
                     "with workerpool0 (chief) and workerpool1 (workers)")
  pool = task.get("type", "")
  if pool not in ("workerpool0", "workerpool1"):
    raise ValueError(f"CLUSTER_SPEC's task is in {pool!r}, not workerpool0 "
                     "or workerpool1")
  return json.dumps({"cluster": cluster, "task": {
      "type": _VERTEX_POOLS[int(pool[-1])], "index": int(task.get("index", 0))}})


def _tasks(tf_config_text):
  try:
    cluster = json.loads(tf_config_text).get("cluster", {})
  except ValueError:
    raise ValueError(f"TF_CONFIG is not JSON: {tf_config_text[:200]!r}") from None
  return sum(len(hosts) for name, hosts in cluster.items()
             if name in ("chief", "worker"))


def environment_strategy(environ=None):
  """The strategy kind the environment asks for, setting TF_CONFIG from
  CLUSTER_SPEC when only the latter is there.

  Args:
    environ: the environment (os.environ); TF_CONFIG is written into it.
  Returns:
    "multi_worker_mirrored" (a cluster of 2 or more tasks), "tpu" (a Cloud
    TPU VM) or None (one machine on its own).
  Raises:
    ValueError: a TF_CONFIG or CLUSTER_SPEC that cannot be read.
  """
  environ = os.environ if environ is None else environ
  if "TF_CONFIG" not in environ and environ.get("CLUSTER_SPEC"):
    environ["TF_CONFIG"] = from_cluster_spec(environ["CLUSTER_SPEC"])
  if environ.get("TF_CONFIG") and _tasks(environ["TF_CONFIG"]) > 1:
    return "multi_worker_mirrored"
  if environ.get("TPU_ACCELERATOR_TYPE") or environ.get("TPU_NAME"):
    return "tpu"
  return None
