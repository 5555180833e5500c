"""`bertexp train --mode=plan`: what a run would need, with nothing built.

The device, replica count, precision and recompute setting come from the
run's MachineSettings (the strategy, numerics and encoder settings the
experiment read from gin), without building the strategy, so no
accelerator is touched; the model shape from the task's config files. See
bertexp.model.memory_plan for the formula.
"""
import dataclasses
import json
import os

import gin

from bertexp import capabilities
from bertexp.model import encoders
from bertexp.model import memory_plan
from bertexp.train import strategy as strategy_lib
from bertexp.util import gpus as gpu_probe

GB = memory_plan.GB


@dataclasses.dataclass(frozen=True)
class MachineSettings:
  """What a run is built on besides its schedule: the experiment reads them
  from gin once and hands them to the runtime and to the plan."""
  strategy: strategy_lib.StrategySettings
  numerics: strategy_lib.NumericsSettings
  encoder: encoders.EncoderSettings


def _workers():
  cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
  return max(1, len(cluster.get("worker", [])) + len(cluster.get("chief", [])))


def _precision(precision, device_name):
  """`precision`, "auto" resolved for the plan's device."""
  if precision != "auto":
    return precision
  kind = device_name.split()[0]
  resolved = strategy_lib.auto_precision(
      kind, gpu_probe.compute_capability() if kind == "GPU" else None)
  return f"{resolved} (auto)"


def _resident_bytes():
  try:
    with open("/proc/self/status") as status:
      for line in status:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return 0


def device(strategy, tpu_type, tpu_cores, device_memory_gb):
  """(description, replicas, device bytes or None, runtime bytes) of the
  StrategySettings `strategy`."""
  kind, gpus = strategy.kind, strategy.num_gpus
  given = device_memory_gb * GB if device_memory_gb else None
  if kind == "tpu":
    return (f"TPU {tpu_type} core", tpu_cores,
            given or memory_plan.tpu_memory_bytes(tpu_type), 0)
  replicas = max(1, gpus or strategy.cpu_replicas or 1)
  if kind == "multi_worker_mirrored":
    replicas = _workers() * max(1, gpus)
  if gpus:
    return "GPU", replicas, given or gpu_probe.memory_bytes(), 0
  # Simulated CPU replicas share the machine's memory.
  return ("CPU (all replicas share it)", replicas,
          given or memory_plan.cpu_memory_bytes() // replicas,
          _resident_bytes())


@gin.configurable(module="bertexp")
def memory_report(task, machine, *, train_batch_size, accumulation_steps,
                  tpu_type="v3", tpu_cores=8, device_memory_gb=None):
  """The memory plan of training `task` on `machine` (MachineSettings): a
  dict of figures and the lines --mode=plan prints. tpu_type / tpu_cores
  describe the TPU a "tpu" strategy will get; device_memory_gb overrides
  the device's memory."""
  config, seq, head = capabilities.require(
      task, capabilities.MemoryPlan, "--mode=plan").model_shape()
  name, replicas, device_bytes, runtime = device(
      machine.strategy, tpu_type, tpu_cores, device_memory_gb)
  precision = _precision(machine.numerics.precision, name)
  recompute = machine.encoder.recompute
  mixed = not precision.startswith("float32")
  per_replica = max(1, train_batch_size // replicas)
  micro = max(1, per_replica // accumulation_steps)
  plan = memory_plan.estimate(config, seq_length=seq, micro_batch=micro,
                              head=head, recompute=recompute,
                              accumulation_steps=accumulation_steps,
                              mixed_precision=mixed, runtime_bytes=runtime)
  lines = [f"memory per replica ({replicas} replica(s); micro-batch {micro} x "
           f"sequence {seq}; {precision}; recompute "
           f"{'on' if recompute else 'off'}; gradient_accumulation_steps "
           f"{accumulation_steps}):"]
  lines += [f"  {label:<32} {value}" for label, value in plan.rows()]
  report = {"plan_total_bytes": plan.total_bytes, "parameters": plan.parameters,
            "device": name, "device_bytes": device_bytes}
  if device_bytes is None:
    lines.append(f"  device: {name}, memory unknown: bind "
                 "bertexp.memory_report.device_memory_gb")
    return report, lines
  fits = plan.total_bytes <= device_bytes
  report["fits"] = fits
  lines.append(f"  device: {name} with {device_bytes / GB:.1f} GiB: "
               f"{'fits' if fits else 'does NOT fit'}")
  smallest = memory_plan.smallest_fitting(
      config, seq_length=seq, batch_per_replica=per_replica, head=head,
      device_bytes=device_bytes, mixed_precision=mixed, runtime_bytes=runtime)
  for with_recompute, k in smallest.items():
    label = "with" if with_recompute else "without"
    report[f"smallest_accumulation_{label}_recompute"] = k
    lines.append(f"  smallest gradient_accumulation_steps that fits {label} "
                 f"recompute: {k if k else 'none (batch 1 does not fit)'}")
  return report, lines
