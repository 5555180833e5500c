"""What a benchmark figure depends on: the CPU, its vector and matrix
instructions, and the thread counts, read from Linux's /proc/cpuinfo."""
import os
import platform

from bertexp.util import private_apis

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


# bfloat16 matmul instructions: AVX512-BF16, AMX-BF16, Arm BF16.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


# oneDNN's instruction-set caps (ONEDNN_MAX_CPU_ISA, or its older name
# DNNL_MAX_CPU_ISA) that leave out its bfloat16 instructions.
ONEDNN_ISAS_WITHOUT_BF16 = frozenset({
    "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
    "AVX512_CORE_VNNI"})


def onednn_isa_cap(environ=None):
  """The instruction-set cap the user set for oneDNN's kernels
  (ONEDNN_MAX_CPU_ISA, else DNNL_MAX_CPU_ISA), upper-cased; None when
  neither is set."""
  environ = os.environ if environ is None else environ
  cap = environ.get("ONEDNN_MAX_CPU_ISA") or environ.get("DNNL_MAX_CPU_ISA")
  return cap.strip().upper() if cap and cap.strip() else None


def cpu_has_native_bfloat16(cpuinfo="/proc/cpuinfo", environ=None):
  """Whether this CPU has bfloat16 matmul instructions (NATIVE_BF16_FLAGS),
  read from Linux's `cpuinfo`, and oneDNN may use them: False where that
  file is missing (macOS, Windows: unknown is treated as emulated) or where
  ONEDNN_MAX_CPU_ISA caps oneDNN below them (ONEDNN_ISAS_WITHOUT_BF16;
  TensorFlow would still send bfloat16 matmuls to oneDNN, which then has no
  kernel for them).

  Args:
    cpuinfo: Linux's cpuinfo file.
    environ: the environment to read the oneDNN cap from (os.environ).

  Returns:
    bool.
  """
  if onednn_isa_cap(environ) in ONEDNN_ISAS_WITHOUT_BF16:
    return False
  flags = cpuinfo_field(("flags", "Features"), cpuinfo)
  return bool(flags and NATIVE_BF16_FLAGS & set(flags.split()))


def onednn_enabled():
  """Whether TensorFlow runs its oneDNN CPU kernels in this process (it
  decides once, when it loads: see bertexp/__init__.py); None when this
  TensorFlow cannot say. TensorFlow has no public call for it: this asks
  the flag its own tests read."""
  return private_apis.onednn_enabled()


def onednn_state():
  """onednn_enabled() in a word: "on", "off" or "unknown"."""
  return {True: "on", False: "off", None: "unknown"}[onednn_enabled()]


def cpu_line():
  """One line naming the CPU a benchmark ran on, for its output: ratios of
  bfloat16 runs mean little without knowing whether the CPU computes
  bfloat16 natively or emulates it."""
  cpu = describe_cpu()
  native = cpu_has_native_bfloat16()
  cap = onednn_isa_cap()
  return (f"CPU: {cpu['cpu']}, {cpu['cores']} logical cores, flags: "
          f"{' '.join(cpu['flags']) or 'none of ' + ' '.join(SPEED_FLAGS)}, "
          f"bfloat16 instructions: "
          f"{'yes' if native else 'no (bfloat16 is emulated)'}, "
          f"TensorFlow's oneDNN kernels: {onednn_state()}"
          f"{f' (capped at {cap})' if cap else ''}")
