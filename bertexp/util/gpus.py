"""The one probe of the machine's GPU: what `nvidia-smi` says of the first
GPU this process may use (the first of CUDA_VISIBLE_DEVICES, else GPU 0).

It starts no TensorFlow runtime and touches no accelerator, so `--mode=plan`
and the strategy's precision choice read the same answer, and a machine
without NVIDIA's driver simply has no GPU here.
"""
import os
import shutil
import subprocess
from typing import Optional, Tuple


def _first_visible():
  """nvidia-smi's --id for the first visible GPU ("0" when unrestricted);
  None when CUDA_VISIBLE_DEVICES hides every GPU."""
  visible = os.environ.get("CUDA_VISIBLE_DEVICES")
  if visible is None:
    return "0"
  first = visible.split(",")[0].strip()
  return first if first and first != "-1" else None


def query(field: str) -> Optional[str]:
  """`field` (e.g. "memory.total", "compute_cap") of the first visible GPU,
  as nvidia-smi prints it; None without nvidia-smi, a visible GPU or an
  answer."""
  device = _first_visible()
  if device is None or not shutil.which("nvidia-smi"):
    return None
  try:
    out = subprocess.run(["nvidia-smi", f"--id={device}",
                          f"--query-gpu={field}",
                          "--format=csv,noheader,nounits"], check=True,
                         capture_output=True, text=True, timeout=20).stdout
  except (OSError, subprocess.SubprocessError):
    return None
  return out.split()[0] if out.split() else None


def memory_bytes() -> Optional[int]:
  """The first visible GPU's memory in bytes, or None."""
  mib = query("memory.total")
  return int(mib) * 1024 ** 2 if mib and mib.isdigit() else None


def compute_capability() -> Optional[Tuple[int, int]]:
  """(major, minor) compute capability of the first visible GPU, or None."""
  major, _, minor = (query("compute_cap") or "").partition(".")
  return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None
