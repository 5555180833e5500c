"""One line naming the CPU a benchmark ran on, for its output: ratios of
bfloat16 runs mean little without knowing whether the CPU computes bfloat16
natively (AVX512-BF16, AMX, Arm BF16) or emulates it."""
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bertexp.train import strategy  # noqa: E402


def cpu_model(cpuinfo="/proc/cpuinfo"):
  """The CPU's model name from Linux's cpuinfo, else platform's guess."""
  return (strategy.cpuinfo_field(("model name",), cpuinfo) or
          platform.processor() or platform.machine())


def cpu_line():
  native = strategy.cpu_has_native_bfloat16()
  return (f"CPU: {cpu_model()}, {os.cpu_count()} logical cores, bfloat16 "
          f"instructions: {'yes' if native else 'no (bfloat16 is emulated)'}, "
          f"TensorFlow's oneDNN kernels: {strategy.onednn_state()}")
