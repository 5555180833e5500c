"""What a benchmark figure depends on: the CPU, its vector and matrix
instructions, and the thread counts, read from Linux's /proc/cpuinfo."""
import os
import platform

# The instruction sets that decide which precision and runtime is fast.
SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16",
               "amx_int8", "asimd", "bf16", "i8mm")


def cpuinfo_field(keys, cpuinfo="/proc/cpuinfo"):
  """The value of the first line of Linux's `cpuinfo` whose key is one of
  `keys` (x86 says "flags", Arm "Features"); None where there is no such line
  or no such file."""
  try:
    with open(cpuinfo) as info:
      for line in info:
        key, _, value = line.partition(":")
        if key.strip() in keys:
          return value.strip()
  except OSError:
    pass
  return None


def describe_cpu(cpuinfo="/proc/cpuinfo"):
  """{"cpu": model name, "cores": logical cores, "flags": [the SPEED_FLAGS
  this CPU has]}."""
  flags = set((cpuinfo_field(("flags", "Features"), cpuinfo) or "").split())
  return {"cpu": (cpuinfo_field(("model name",), cpuinfo) or
                  platform.processor() or platform.machine()),
          "cores": os.cpu_count(),
          "flags": [f for f in SPEED_FLAGS if f in flags]}
