"""Processes forked with TensorFlow imported (bertexp.util.forked: sweep
trials, local launch workers, the tests' own commands) behave as new
`python` processes would: their own pid, the environment, folder and
streams they were given, exit codes, death by signal and KeyboardInterrupt
as an interpreter reports them, and TensorFlow's runtime started fresh; and
they end with the process that started them, even a killed one."""
import os
import signal
import subprocess
import time

import pytest

import forked_python

REPORT = ("import json, os, sys\n"
          "print(json.dumps({'pid': os.getpid(), 'cwd': os.getcwd(),"
          " 'argv': sys.argv, 'value': os.environ.get('FORKED_VALUE'),"
          " 'other': os.environ.get('ONLY_IN_THE_TEST')}))\n"
          "print('to stderr', file=sys.stderr)\n"
          "sys.exit(int(sys.argv[1]))\n")


def test_environment_folder_arguments_streams_and_exit_code(tmp_path,
                                                            monkeypatch):
  import json
  monkeypatch.setenv("ONLY_IN_THE_TEST", "x")
  env = {k: v for k, v in os.environ.items() if k != "ONLY_IN_THE_TEST"}
  done = forked_python.run(["-c", REPORT, "3", "more"], cwd=str(tmp_path),
                           env=dict(env, FORKED_VALUE="42"), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  report = json.loads(done.stdout)
  assert done.returncode == 3 and done.stderr == "to stderr\n"
  assert report == {"pid": report["pid"], "cwd": str(tmp_path),
                    "argv": ["-c", "3", "more"], "value": "42",
                    "other": None}
  assert report["pid"] not in (os.getpid(), forked_python.zygote().process.pid)


@pytest.mark.parametrize("signum,code", [(signal.SIGKILL, -signal.SIGKILL),
                                         (signal.SIGTERM, -signal.SIGTERM),
                                         (signal.SIGINT, -signal.SIGINT)])
def test_a_signal_ends_it_as_it_ends_an_interpreter(signum, code):
  """SIGINT raises KeyboardInterrupt in Python code; uncaught, the
  process dies of SIGINT, as `python` does."""
  process = forked_python.popen(
      ["-c", "import sys, time\nprint('up', flush=True)\ntime.sleep(60)\n"],
      stdout=subprocess.PIPE, text=True)
  assert process.stdout.readline() == "up\n"
  assert process.poll() is None
  process.send_signal(signum)
  assert process.wait(timeout=30) == code
  process.send_signal(signal.SIGTERM)            # ended: nothing happens


def test_a_module_runs_as_main_and_tensorflow_starts_in_the_child():
  """`-m` runs the module as __main__; TensorFlow, imported but never run by
  the zygote, computes in each child with a runtime of its own."""
  code = ("import sys, tensorflow as tf\n"
          "print(int(tf.reduce_sum(tf.range(int(sys.argv[1])))))\n")
  for n in (4, 10):
    done = forked_python.run(["-c", code, str(n)], stdout=subprocess.PIPE,
                             text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, f"{n * (n - 1) // 2}\n")
  done = forked_python.run(["-m", "bertexp.cli", "--help"],
                           stdout=subprocess.PIPE, text=True, timeout=120)
  assert done.returncode == 0 and "usage: bertexp" in done.stdout


def _state(pid):
  """'Z', 'S', 'R'... of process `pid`, or None once it is gone."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0]
  except FileNotFoundError:
    return None


def test_a_killed_starters_forked_children_die_with_it():
  """A `bertexp sweep` or launcher killed with SIGKILL cannot stop its
  trials or workers: its zygote sees it gone and kills them (else a trial
  trains on into a folder another sweep process resumes)."""
  starter = ("import subprocess, sys, time\n"
             "from bertexp.util import forked\n"
             "child = forked.ForkedProcess(['-c', 'import time; "
             "time.sleep(120)'], preload=())\n"
             "print(child.pid, flush=True)\n"
             "time.sleep(120)\n")
  process = forked_python.popen(["-c", starter], stdout=subprocess.PIPE,
                                text=True)
  child = int(process.stdout.readline())
  assert _state(child) not in (None, "Z")
  process.kill()
  assert process.wait(timeout=30) == -signal.SIGKILL
  deadline = time.monotonic() + 30
  while _state(child) not in (None, "Z") and time.monotonic() < deadline:
    time.sleep(0.1)
  assert _state(child) in (None, "Z")


GRANDCHILD = ("import builtins, os, sys\n"
              "print('child', os.getppid(), hasattr(builtins, 'STARTER_ONLY'),"
              " 'tensorflow' in sys.modules, flush=True)\n")


def test_a_forked_process_forks_its_children_from_its_own_zygote():
  """A forked sweep or launcher (as the tests start them) forks its trials
  or workers from the zygote it came from (TensorFlow imported, nothing of
  the starter's memory), not from a new zygote that imports it again."""
  starter = ("import builtins, os, sys\n"
             "from bertexp.util import forked\n"
             "builtins.STARTER_ONLY = True\n"
             "print('starter', os.getppid(), flush=True)\n"
             "forked.run(['-c', sys.argv[1]], preload=(), stdout=sys.stdout)\n")
  done = forked_python.run(["-c", starter, GRANDCHILD], text=True,
                           stdout=subprocess.PIPE, timeout=120)
  assert done.returncode == 0
  lines = sorted(line.split() for line in done.stdout.splitlines())
  zygote = str(forked_python.zygote().process.pid)
  assert lines == [["child", zygote, "False", "True"], ["starter", zygote]]


DEAF_STARTER = (
    "import json, os, socket\n"
    "from bertexp.util import forked\n"
    "channel = forked.zygote(()).channel\n"
    "channel.shutdown(socket.SHUT_RD)\n"
    "request = {'argv': ['-c', 'import time; time.sleep(120)'],"
    " 'env': dict(os.environ), 'cwd': os.getcwd()}\n"
    "socket.send_fds(channel, [json.dumps(request).encode()], [0, 1, 2])\n"
    "os._exit(0)\n")


def test_a_process_gone_before_the_zygote_answers_leaves_it_serving():
  """A forked process that asked for a child and stopped listening (it
  ended or was killed) before the zygote answered: the zygote's answer
  finds no reader, and it goes on forking for everyone else."""
  assert forked_python.run(["-c", DEAF_STARTER], timeout=120).returncode == 0
  done = forked_python.run(["-c", "print(7)"], stdout=subprocess.PIPE,
                           text=True, timeout=120)
  assert (done.returncode, done.stdout) == (0, "7\n")


BURN = ("import time\n"
        "while time.process_time() < 2.0:\n"
        "  pass\n")


def test_a_forked_childs_cpu_counts_the_children_it_forked():
  """The CPU seconds reported for a forked process include those of the
  children it forked (as the operating system counts waited-for children),
  though they are the zygote's children, not its own."""
  starter = ("import sys\n"
             "from bertexp.util import forked\n"
             "forked.run(['-c', sys.argv[1]], preload=())\n")
  forked_python.run(["-c", "pass"], timeout=120)     # the zygote is up
  before = forked_python.children_cpu_seconds()
  done = forked_python.run(["-c", starter, BURN], timeout=120)
  assert done.returncode == 0
  assert forked_python.children_cpu_seconds() - before >= 2.0


def test_shutdown_ends_the_zygote_quietly():
  """forked.shutdown (what `bertexp` runs before it exits) tells the zygote
  to end, which it does by itself (exit status 0, not killed after a
  timeout), and the thread reading its reports ends without an error."""
  import sys
  code = ("import time\n"
          "from bertexp.util import forked\n"
          "print(forked.run(['-c', 'print(7)'], preload=(), stdout=-1,"
          " text=True).stdout.strip())\n"
          "started = forked.zygote(())\n"
          "forked.shutdown()\n"
          "time.sleep(0.5)\n"
          "print(started.process.returncode)\n")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, timeout=120)
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ["7", "0"]
  assert done.stderr == "", done.stderr
