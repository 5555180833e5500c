"""The one GPU probe (bertexp.util.gpus) that the strategy's precision
choice and --mode=plan share. This machine has no NVIDIA driver, so an
`nvidia-smi` script on PATH answers as the driver's tool does (its flags
and CSV output), and records which GPU it was asked about."""
import os
import stat

import pytest

from bertexp.util import gpus

FAKE_NVIDIA_SMI = """#!/bin/sh
echo "$@" >> "{log}"
case "$*" in
  *memory.total*) echo "16384" ;;
  *compute_cap*) echo "8.0" ;;
esac
"""


@pytest.fixture
def nvidia_smi(tmp_path, monkeypatch):
  log = tmp_path / "calls.txt"
  tool = tmp_path / "bin" / "nvidia-smi"
  tool.parent.mkdir()
  tool.write_text(FAKE_NVIDIA_SMI.format(log=log))
  tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
  monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
  monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
  return log


def test_memory_and_capability_of_the_first_gpu(nvidia_smi):
  assert gpus.memory_bytes() == 16 * 1024 ** 3
  assert gpus.compute_capability() == (8, 0)
  assert nvidia_smi.read_text().split("\n")[0].split()[0] == "--id=0"


def test_the_first_visible_gpu_is_the_one_asked_about(nvidia_smi, monkeypatch):
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
  assert gpus.compute_capability() == (8, 0)
  assert nvidia_smi.read_text().split()[0] == "--id=3"


def test_no_visible_gpu_or_no_driver_is_none(nvidia_smi, monkeypatch):
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
  assert gpus.memory_bytes() is None and gpus.compute_capability() is None
  assert not nvidia_smi.exists()                # never asked
  monkeypatch.setenv("PATH", os.path.dirname(os.__file__))   # no driver tool
  monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
  assert gpus.memory_bytes() is None and gpus.compute_capability() is None
