"""Distribution strategy and numerics, from gin.

    make_strategy(kind="tpu", tpu="grpc://10.0.0.2:8470")
    make_strategy(kind="mirrored", num_gpus=8)
    make_strategy(kind="multi_worker_mirrored")   # cluster from TF_CONFIG
    make_strategy(kind="mirrored", cpu_replicas=8)  # a TPU/GPU job on a laptop
    make_strategy(kind="auto")   # what the platform's environment says
"""
import contextlib
import dataclasses
import json
import logging
import os
from typing import Optional

import gin
import tensorflow as tf
import tf_keras

from bertexp.util import cluster
from bertexp.util import gpus as gpu_probe
from bertexp.util.machine import (ONEDNN_ISAS_WITHOUT_BF16,
                                  cpu_has_native_bfloat16, cpuinfo_field,
                                  onednn_enabled, onednn_isa_cap,
                                  onednn_state)

KINDS = ("default", "one_device", "mirrored", "multi_worker_mirrored", "tpu",
         "auto")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16", "auto")
# /proc/cpuinfo names of native bfloat16 matmul support: x86 AVX512-BF16 and
# AMX-BF16 ("flags"), Arm BF16 ("Features").
_MIRRORED = {}


@gin.configurable("make_strategy", module="bertexp")
@dataclasses.dataclass(frozen=True)
class StrategySettings:
  """The strategy a run trains on, bound in .gin files by its historical
  name (`bertexp.make_strategy.kind = "tpu"`); each field is
  make_strategy's argument of that name."""
  kind: str = "default"
  tpu: Optional[str] = None
  num_gpus: int = 0
  cpu_replicas: int = 0
  all_reduce: str = "nccl"
  device: Optional[str] = None
  collective_timeout_seconds: Optional[float] = None

  def build(self):
    """make_strategy with these settings."""
    return make_strategy(**dataclasses.asdict(self))


@gin.configurable("configure_numerics", module="bertexp")
@dataclasses.dataclass(frozen=True)
class NumericsSettings:
  """Precision and XLA, bound by their historical name
  (`bertexp.configure_numerics.precision = "mixed_bfloat16"`); each field
  is configure_numerics' argument of that name."""
  precision: str = "float32"
  jit_compile: bool = False
  xla_flags: Optional[str] = None

  def apply(self, strategy):
    """configure_numerics with these settings on `strategy`'s replicas."""
    return configure_numerics(self.precision, self.jit_compile,
                              strategy=strategy, xla_flags=self.xla_flags)


def make_strategy(kind="default", *, tpu=None, num_gpus=0, cpu_replicas=0,
                  all_reduce="nccl", device=None,
                  collective_timeout_seconds=None):
  """Builds a tf.distribute strategy.

  kind: one of KINDS. "tpu" needs `tpu` (a name or grpc:// address; "local"
    for a TPU VM): a missing address is an error before any other work.
    "auto": from the environment (bertexp.util.cluster): multi-worker when
    TF_CONFIG or Vertex AI's CLUSTER_SPEC names 2 or more tasks, the local
    TPU on a Cloud TPU VM (unless `tpu` is bound), else mirrored over this
    machine's GPUs (every visible one, or num_gpus / cpu_replicas when
    bound), else the default strategy.
  num_gpus: for "mirrored"; 0 mirrors on the CPU (one replica).
  cpu_replicas: for "mirrored" without GPUs: splits the CPU into this many
    logical devices, one replica each, so a multi-GPU or TPU experiment can
    be checked on any machine (same global batch, same collectives).
  all_reduce: "nccl", "hierarchical_copy" or "ring" (mirrored/multi-worker).
  device: for "one_device", e.g. "/gpu:0"; default the first GPU or the CPU.
  collective_timeout_seconds: multi_worker_mirrored: a cross-worker
    collective that does not complete in this time fails the run (a peer
    that hangs without dying). A peer that dies or stops its process is
    detected sooner by TensorFlow's heartbeats (about 10 s). None: no
    limit; set it above the slowest step (and the start-up skew between
    workers: the first collective waits for every worker).
  """
  if kind not in KINDS:
    raise ValueError(f"strategy kind {kind!r} is not one of {KINDS}")
  if kind == "auto":
    tpu = tpu or "local"
    if not cpu_replicas:
      num_gpus = num_gpus or len(tf.config.list_physical_devices("GPU"))
    kind = cluster.environment_strategy() or (
        "mirrored" if num_gpus or cpu_replicas else "default")
    logging.info("strategy from the environment: %s", kind)
  if kind == "tpu":
    return _tpu_strategy(tpu)
  if kind == "default":
    return tf.distribute.get_strategy()
  if kind == "one_device":
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.OneDeviceStrategy(
        device or ("/gpu:0" if gpus else "/cpu:0"))
  if kind == "mirrored":
    return _mirrored(_mirrored_devices(num_gpus, cpu_replicas), all_reduce,
                     num_gpus)
  return _multi_worker_strategy(all_reduce, collective_timeout_seconds)


def _tpu_strategy(tpu):
  """TPUStrategy on the TPU at `tpu` ("local": this TPU VM's)."""
  if not tpu:
    raise ValueError("strategy kind 'tpu' needs an address: bind "
                     "bertexp.make_strategy.tpu (e.g. 'local' on a TPU VM "
                     "or 'grpc://10.0.0.2:8470')")
  resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
      tpu="" if tpu == "local" else tpu)
  if tpu != "local":
    tf.config.experimental_connect_to_cluster(resolver)
  tf.tpu.experimental.initialize_tpu_system(resolver)
  return tf.distribute.TPUStrategy(resolver)


def _mirrored_devices(num_gpus, cpu_replicas):
  """The devices a "mirrored" strategy replicates on, checked."""
  if num_gpus < 0 or cpu_replicas < 0:
    raise ValueError(f"num_gpus and cpu_replicas must be >= 0, got "
                     f"{num_gpus} and {cpu_replicas}")
  if num_gpus and cpu_replicas:
    raise ValueError("bind num_gpus or cpu_replicas, not both")
  visible = len(tf.config.list_physical_devices("GPU"))
  if num_gpus > visible:
    raise ValueError(
        f"NUM_GPUS={num_gpus} (bertexp.make_strategy.num_gpus) but "
        f"TensorFlow sees {visible} GPU(s); bind NUM_GPUS={visible} "
        "(0 runs on the CPU)")
  return ([f"/gpu:{i}" for i in range(num_gpus)] if num_gpus
          else split_cpu(cpu_replicas) if cpu_replicas else ["/cpu:0"])


def _multi_worker_strategy(all_reduce, collective_timeout_seconds):
  """MultiWorkerMirroredStrategy over TF_CONFIG's cluster."""
  if "TF_CONFIG" in os.environ:
    cluster = json.loads(os.environ["TF_CONFIG"]).get("cluster", {})
    logging.info("multi-worker cluster: %s", cluster)
  communication = (tf.distribute.experimental.CommunicationImplementation.NCCL
                   if all_reduce == "nccl" and tf.config.list_physical_devices(
                       "GPU") else
                   tf.distribute.experimental.CommunicationImplementation.AUTO)
  return tf.distribute.MultiWorkerMirroredStrategy(
      communication_options=tf.distribute.experimental.CommunicationOptions(
          implementation=communication,
          timeout_seconds=collective_timeout_seconds))


def _mirrored(devices, all_reduce, num_gpus):
  """One MirroredStrategy per device set and process.

  Two strategies over several devices in one process share collective
  instance keys, and TensorFlow aborts their all-reduces when shapes differ
  (e.g. predict after train, or 8 replicas after 2, in one Python process):
  the same device set reuses its strategy; another one is a clear error.
  """
  if len(devices) == 1:
    return tf.distribute.MirroredStrategy(devices=devices)
  key = (tuple(devices), all_reduce)
  if key not in _MIRRORED:
    if _MIRRORED:
      (other, _), = _MIRRORED.keys()
      raise ValueError(
          f"this process already runs a mirrored strategy over {len(other)} "
          f"devices; TensorFlow cannot run a second one over {len(devices)} "
          "in the same process: start a new process (e.g. a new `bertexp "
          "train`) for a different replica count")
    _MIRRORED[key] = tf.distribute.MirroredStrategy(
        devices=devices, cross_device_ops=_cross_device_ops(all_reduce,
                                                            num_gpus))
  return _MIRRORED[key]


def split_cpu(replicas):
  """Names of `replicas` logical CPU devices, creating them if needed.

  TensorFlow fixes the logical devices when its runtime starts, so this must
  run before any other TensorFlow work, or the process must already have at
  least `replicas` logical CPUs (e.g. a test process that split its CPU first).
  """
  cpu = tf.config.list_physical_devices("CPU")[0]
  existing = tf.config.get_logical_device_configuration(cpu) or []
  if len(existing) < replicas:
    try:
      tf.config.set_logical_device_configuration(
          cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    except RuntimeError as error:
      raise ValueError(
          f"cpu_replicas={replicas}: TensorFlow already started with "
          f"{max(len(existing), 1)} CPU device(s) in this process; bind "
          "cpu_replicas before anything else runs TensorFlow") from error
  return [f"/cpu:{i}" for i in range(replicas)]


def _cross_device_ops(all_reduce, num_gpus):
  if num_gpus <= 1:
    return None
  if all_reduce == "nccl":
    return tf.distribute.NcclAllReduce()
  if all_reduce == "hierarchical_copy":
    return tf.distribute.HierarchicalCopyAllReduce()
  if all_reduce == "ring":
    return tf.distribute.ReductionToOneDevice()
  raise ValueError(f"all_reduce {all_reduce!r} is not nccl, "
                   "hierarchical_copy or ring")


def chief_value(strategy, value):
  """`value` as the cluster's first replica (on the chief) has it, returned
  on every worker: turns a draw each worker makes for itself into one
  cluster-wide value. All workers must call it together (a collective).

  Args:
    strategy: the run's tf.distribute strategy (any kind; one replica just
      returns `value`).
    value: an int in [0, 2**31).
  Returns:
    The chief's `value` (int).
  """
  values = strategy.experimental_distribute_values_from_function(
      lambda context: tf.constant(
          value if context.replica_id_in_sync_group == 0 else 0, tf.int32))
  return int(strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None))


@contextlib.contextmanager
def leaving_together(strategy):
  """Ends the block on every worker together: when it succeeds, a
  collective waits until every worker is done. A worker that left while
  the chief still evaluated or wrote its files stopped sending heartbeats,
  and the chief logged "StartAbort UNAVAILABLE ... The tasks have crashed"
  at the end of a successful run. A failing block is not waited for (its
  error ends the run)."""
  yield
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    chief_value(strategy, 0)
    logging.info("every worker is done")


def configure_numerics(precision="float32", jit_compile=False, strategy=None,
                       xla_flags=None):
  """Sets the Keras mixed-precision policy; returns (precision, jit_compile).

  precision: one of PRECISIONS. mixed_float16 gets dynamic loss scaling in
  the trainer; mixed_bfloat16 needs none (same exponent range as float32).
  "auto" picks what is fast on the replicas of `strategy` (auto_precision)
  and returns the precision it picked.
  xla_flags: XLA options added to the XLA_FLAGS environment variable, which
  XLA reads at its first compilation in the process (later ones ignore it).
  The TPU check sets "--xla_backend_optimization_level=0": it compiles to
  check the steps, not to run them fast, and LLVM's optimisation passes are
  a third of a tiny model's compile time; the arithmetic is the same
  (bit-identical weights, loss and gradient norm, DeBERTa and MobileBERT
  on 2 XLA replicas).
  """
  if xla_flags:
    current = os.environ.get("XLA_FLAGS", "")
    if xla_flags not in current:
      os.environ["XLA_FLAGS"] = f"{current} {xla_flags}".strip()
  if precision not in PRECISIONS:
    raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
  if precision == "auto":
    kind = device_kind(strategy or tf.distribute.get_strategy())
    precision = auto_precision(
        kind, gpu_probe.compute_capability() if kind == "GPU" else None)
    logging.info("precision auto on %s replicas: %s", kind, precision)
  if precision == "mixed_bfloat16":
    _check_onednn_computes_bfloat16(strategy)
  logging.info("TensorFlow's oneDNN CPU kernels: %s", onednn_state())
  tf_keras.mixed_precision.set_global_policy(precision)
  return precision, jit_compile


def _check_onednn_computes_bfloat16(strategy):
  """Raises ValueError where bfloat16 would run on CPU replicas through
  oneDNN kernels capped below bfloat16 (ONEDNN_MAX_CPU_ISA): TensorFlow
  still hands them bfloat16 matmuls, and the process dies on a segfault."""
  cap = onednn_isa_cap()
  if (cap in ONEDNN_ISAS_WITHOUT_BF16 and onednn_enabled() and
      device_kind(strategy or tf.distribute.get_strategy()) == "CPU"):
    raise ValueError(
        f"precision mixed_bfloat16 on CPU with oneDNN capped at {cap} "
        "(ONEDNN_MAX_CPU_ISA or DNNL_MAX_CPU_ISA): that cap leaves "
        "TensorFlow's oneDNN kernels without bfloat16 ones (AVX512_CORE_BF16 "
        "or above has them); unset it, or use precision float32")


def auto_precision(kind, gpu_capability=None):
  """The precision "auto" picks for replicas of `kind` ("TPU", "GPU", "CPU").

  TPU: mixed_bfloat16. GPU: mixed_bfloat16 from compute capability 8.0
  (Ampere), mixed_float16 on 7.x (Volta/Turing tensor cores), float32 below
  or when unknown. CPU: mixed_bfloat16 when it computes bfloat16 natively
  (cpu_has_native_bfloat16), else float32: emulated bfloat16 is no faster
  (MiniLM's forward and backward pass 4 % slower than float32 on an AMD EPYC
  without bfloat16 instructions) and rounds every matmul input.
  """
  if kind == "TPU":
    return "mixed_bfloat16"
  if kind == "GPU":
    if gpu_capability is not None and tuple(gpu_capability) >= (8, 0):
      return "mixed_bfloat16"
    if gpu_capability is not None and tuple(gpu_capability) >= (7, 0):
      return "mixed_float16"
    return "float32"
  return "mixed_bfloat16" if cpu_has_native_bfloat16() else "float32"


def device_kind(strategy):
  """"TPU", "GPU" or "CPU": what the replicas of `strategy` run on."""
  names = " ".join(_replica_devices(strategy)).upper()
  for kind in ("TPU", "GPU"):
    if kind in names:
      return kind
  return "CPU"


def _replica_devices(strategy):
  if strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
    # The default strategy has no device list: TensorFlow places on a GPU
    # when it sees one.
    return [d.name for d in tf.config.list_logical_devices("GPU")]
  return list(strategy.extended.worker_devices)


def padding_multiple(strategy, setting="auto"):
  """Dynamic padding's multiple for `strategy` (see pipeline.trimmed_length).

  "auto": 8 when the replicas are GPUs (tensor cores want lengths that are
  multiples of 8), else 1 — the exact longest sequence: the trim happens in
  the graph with dynamic shapes, nothing is retraced per length, so on a CPU
  any rounding only adds padded work (measured by tools/bench_vs_hf.py).
  An int is used as given; None or 0 turns dynamic padding off. TPUs keep
  static shapes whatever this says (the trainer's rule).
  """
  if setting != "auto":
    if setting is not None and (type(setting) is not int or setting < 0):
      raise ValueError(f"pad_to_multiple_of={setting!r}: expected \"auto\", "
                       "a positive int, or None/0 (no dynamic padding)")
    return setting or None
  return 8 if device_kind(strategy) == "GPU" else 1
