"""Distribution strategy and numerics, from gin.

    make_strategy(kind="tpu", tpu="grpc://10.0.0.2:8470")
    make_strategy(kind="mirrored", num_gpus=8)
    make_strategy(kind="multi_worker_mirrored")   # cluster from TF_CONFIG
"""
import json
import logging
import os

import gin
import tensorflow as tf
import tf_keras

KINDS = ("default", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


@gin.configurable(module="bertexp")
def make_strategy(kind="default", *, tpu=None, num_gpus=0,
                  all_reduce="nccl", device=None):
  """Builds a tf.distribute strategy.

  kind: one of KINDS. "tpu" needs `tpu` (a name or grpc:// address; "local"
    for a TPU VM): a missing address is an error before any other work.
  num_gpus: for "mirrored"; 0 mirrors on the CPU (one replica).
  all_reduce: "nccl", "hierarchical_copy" or "ring" (mirrored/multi-worker).
  device: for "one_device", e.g. "/gpu:0"; default the first GPU or the CPU.
  """
  if kind not in KINDS:
    raise ValueError(f"strategy kind {kind!r} is not one of {KINDS}")
  if kind == "tpu":
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
  if kind == "default":
    return tf.distribute.get_strategy()
  if kind == "one_device":
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.OneDeviceStrategy(
        device or ("/gpu:0" if gpus else "/cpu:0"))
  if kind == "mirrored":
    if num_gpus < 0:
      raise ValueError(f"num_gpus must be >= 0, got {num_gpus}")
    devices = ([f"/gpu:{i}" for i in range(num_gpus)] if num_gpus
               else ["/cpu:0"])
    return tf.distribute.MirroredStrategy(
        devices=devices, cross_device_ops=_cross_device_ops(all_reduce,
                                                            num_gpus))
  # multi_worker_mirrored
  if "TF_CONFIG" in os.environ:
    cluster = json.loads(os.environ["TF_CONFIG"]).get("cluster", {})
    logging.info("multi-worker cluster: %s", cluster)
  communication = (tf.distribute.experimental.CommunicationImplementation.NCCL
                   if all_reduce == "nccl" and tf.config.list_physical_devices(
                       "GPU") else
                   tf.distribute.experimental.CommunicationImplementation.AUTO)
  return tf.distribute.MultiWorkerMirroredStrategy(
      communication_options=tf.distribute.experimental.CommunicationOptions(
          implementation=communication))


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


@gin.configurable(module="bertexp")
def configure_numerics(precision="float32", jit_compile=False):
  """Sets the Keras mixed-precision policy; returns jit_compile for the trainer.

  mixed_float16 gets dynamic loss scaling in the trainer; mixed_bfloat16
  needs none (same exponent range as float32).
  """
  if precision not in PRECISIONS:
    raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
  tf_keras.mixed_precision.set_global_policy(precision)
  return precision, jit_compile
