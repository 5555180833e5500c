"""Where the test suite's CPU time goes, by file and by test.

    PYTHONPATH=tools .venv/bin/python -m pytest -p suite_cpu -n 2 \
        --dist loadfile --no-loadscope-reorder tests        # records
    .venv/bin/python tools/suite_cpu.py [--top 25]           # prints the tables

`make test`'s wall time on 2 cores is bounded by the suite's CPU time, and a
test's wall time says little about its cost there: a test that waits on a
one-thread subprocess takes minutes of wall time and little CPU, while the
other pytest worker's processes take the cores. As a pytest plugin (`-p
suite_cpu`), this module appends one JSON line per test to SUITE_CPU_LOG
(default .cache/suite_cpu.jsonl, emptied by no one: delete it before a run):
the pytest process's user + system time over the test (every thread) and that
of its child processes reaped during the test. A child's time lands on the test
running when it ends, so file totals are exact, and a test that runs processes
in the background (the strategy matrix's TPU-check cells) shares its children's
time with its file's other tests. Each line also says which test process ran
the test and when it started; the report ends with the CPU-seconds of each
minute of the run, where a minute far below 120 (2 cores) is one in which the
cores idled.
"""
import argparse
import collections
import json
import math
import os
import resource
import sys
import time

import pytest

LOG = os.environ.get("SUITE_CPU_LOG", os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache",
    "suite_cpu.jsonl"))


def _cpu_seconds():
  """(this process, its reaped children): user + system seconds. The
  children include those forked by this process's zygote
  (bertexp.util.forked), which the operating system counts for the zygote
  until it ends."""
  own = resource.getrusage(resource.RUSAGE_SELF)
  children = resource.getrusage(resource.RUSAGE_CHILDREN)
  forked = sys.modules.get("bertexp.util.forked")
  return (own.ru_utime + own.ru_stime,
          children.ru_utime + children.ru_stime +
          (forked.children_cpu_seconds() if forked else 0.0))


def _worker(config):
  """The pytest-xdist worker running the tests ("gw0", ...), or "main"."""
  workerinput = getattr(config, "workerinput", None)
  return workerinput["workerid"] if workerinput else "main"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  """pytest hook: records one test's CPU (setup, call and teardown)."""
  del nextitem
  own, children = _cpu_seconds()
  start = time.time()
  yield
  own_after, children_after = _cpu_seconds()
  os.makedirs(os.path.dirname(LOG), exist_ok=True)
  with open(LOG, "a") as f:
    f.write(json.dumps({"test": item.nodeid, "own": own_after - own,
                        "children": children_after - children,
                        "wall": time.time() - start, "start": start,
                        "worker": _worker(item.config)}) + "\n")


def summarize(rows, top):
  """The report's lines: per file, then the `top` costliest tests."""
  by_file = collections.defaultdict(lambda: [0.0, 0.0, 0])
  for row in rows:
    totals = by_file[row["test"].split("::")[0]]
    totals[0] += row["own"]
    totals[1] += row["children"]
    totals[2] += 1
  total = sum(own + children for own, children, _ in by_file.values())
  lines = [f"{len(rows)} tests, {total:.0f} CPU-seconds "
           f"({total / 60:.1f} CPU-minutes)", "",
           f"{'CPU s':>8} {'share':>6} {'own':>7} {'children':>8} "
           f"{'tests':>5}  file"]
  for name, (own, children, count) in sorted(
      by_file.items(), key=lambda item: -sum(item[1][:2])):
    lines.append(f"{own + children:8.0f} {(own + children) / total:6.1%} "
                 f"{own:7.0f} {children:8.0f} {count:5d}  {name}")
  lines += ["", f"{'CPU s':>8} {'wall s':>7}  test (the {top} costliest)"]
  for row in sorted(rows, key=lambda r: -(r["own"] + r["children"]))[:top]:
    lines.append(f"{row['own'] + row['children']:8.1f} {row['wall']:7.1f}  "
                 f"{row['test']}")
  return lines


def timeline(rows, step=60):
  """Lines of CPU-seconds spent per `step` seconds of the run, by every
  test process together (each test's CPU spread evenly over its wall time):
  where the cores idled while tests waited. Rows without a start (older
  logs) are left out."""
  rows = [row for row in rows if "start" in row]
  if not rows:
    return []
  begin = min(row["start"] for row in rows)
  end = max(row["start"] + row["wall"] for row in rows)
  bins = [0.0] * max(math.ceil((end - begin) / step), 1)
  for row in rows:
    first, last = row["start"] - begin, row["start"] - begin + row["wall"]
    rate = (row["own"] + row["children"]) / max(row["wall"], 1e-9)
    for index in range(int(first // step),
                       min(int(last // step) + 1, len(bins))):
      overlap = min(last, (index + 1) * step) - max(first, index * step)
      bins[index] += rate * max(overlap, 0.0)
  return ["", f"{'minute':>6} {'CPU s':>6}  (per {step} s of the run)"] + [
      f"{index * step / 60:6.0f} {cpu:6.0f}" for index, cpu in enumerate(bins)]


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
  parser.add_argument("log", nargs="?", default=LOG)
  parser.add_argument("--top", type=int, default=25)
  args = parser.parse_args()
  with open(args.log) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  print("\n".join(summarize(rows, args.top) + timeline(rows)))


if __name__ == "__main__":
  main()
