"""tools/suite_cpu.py: the test suite's CPU time by test and by file."""
import importlib.util
import json
import os
import subprocess
import sys

from conftest import REPO


def _load_tool(name):
  """tools/<name>.py as a module, without putting tools/ on sys.path."""
  spec = importlib.util.spec_from_file_location(
      name, os.path.join(REPO, "tools", f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


suite_cpu = _load_tool("suite_cpu")

BUSY_CHILD = ("import subprocess, sys\n"
              "def test_child_burns_cpu():\n"
              "  subprocess.run([sys.executable, '-c',"
              " 'sum(i * i for i in range(3 * 10 ** 6))'], check=True)\n"
              "def test_idle():\n"
              "  pass\n")


def test_plugin_records_own_and_child_process_cpu_per_test(tmp_path):
  (tmp_path / "test_sample.py").write_text(BUSY_CHILD)
  log = tmp_path / "cpu.jsonl"
  done = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "suite_cpu", "-p",
       "no:cacheprovider", str(tmp_path / "test_sample.py")],
      cwd=tmp_path, capture_output=True, text=True,
      env=dict(os.environ, SUITE_CPU_LOG=str(log),
               PYTHONPATH=os.path.join(REPO, "tools")))
  assert done.returncode == 0, done.stdout + done.stderr
  rows = {r["test"].split("::")[1]: r
          for r in map(json.loads, log.read_text().splitlines())}
  assert sorted(rows) == ["test_child_burns_cpu", "test_idle"]
  busy, idle = rows["test_child_burns_cpu"], rows["test_idle"]
  assert busy["children"] > 0.05 and idle["children"] == 0
  assert busy["wall"] > 0 and idle["own"] < 0.05
  # Where and when each test ran, for the timeline: one after the other.
  assert busy["worker"] == idle["worker"] == "main"
  assert idle["start"] >= busy["start"] + busy["wall"]


def test_report_sums_by_file_and_ranks_tests_by_cpu():
  rows = [{"test": "tests/a.py::one", "own": 1.0, "children": 9.0, "wall": 30},
          {"test": "tests/b.py::two", "own": 4.0, "children": 0.0, "wall": 5},
          {"test": "tests/b.py::three", "own": 3.0, "children": 0.0, "wall": 3},
          {"test": "tests/a.py::four", "own": 0.25, "children": 0.0, "wall": 1}]
  lines = suite_cpu.summarize(rows, top=2)
  assert lines[0] == "4 tests, 17 CPU-seconds (0.3 CPU-minutes)"
  files = [line.split() for line in lines[3:5]]
  assert files[0] == ["10", "59.4%", "1", "9", "2", "tests/a.py"]
  assert files[1] == ["7", "40.6%", "7", "0", "2", "tests/b.py"]
  tests = [line.split()[-1] for line in lines[-2:]]
  assert tests == ["tests/a.py::one", "tests/b.py::two"]


def test_timeline_spreads_each_tests_cpu_over_its_minutes():
  rows = [{"test": "a", "own": 60.0, "children": 0.0, "wall": 120.0,
           "start": 1000.0, "worker": "gw0"},
          {"test": "b", "own": 1.0, "children": 29.0, "wall": 30.0,
           "start": 1150.0, "worker": "gw1"},
          {"test": "old", "own": 5.0, "children": 0.0, "wall": 5.0}]
  lines = suite_cpu.timeline(rows)
  assert [line.split() for line in lines[2:]] == [
      ["0", "30"], ["1", "30"], ["2", "30"]]
  assert suite_cpu.timeline(rows[2:]) == []
