"""Python processes that start with TensorFlow imported, for the tests.

A new Python process pays ~4 CPU-seconds to import TensorFlow before a
`bertexp` command does anything; the suite starts many (servers, XLA runs,
sweeps, killed and resumed runs). `popen(["-m", "bertexp.cli", ...])` starts
one forked from a process (the "zygote", one per test process) that
imported TensorFlow, tf_keras and bertexp's training modules once and never
ran TensorFlow (no runtime, no thread pools to lose in a fork): the child
runs `python -m MODULE ARGS` or `python -c CODE ARGS` as a new process would
(its own pid, the given environment, working folder and standard streams,
Python's default signal handling) and is signalled, exits and reports its
exit code as a real process does.

What a fresh interpreter would decide at import time from its environment
(TF_ENABLE_ONEDNN_OPTS, TF_USE_LEGACY_KERAS) the zygote decided with the
test process's: a test of those starts `sys.executable` itself.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading

_ZYGOTE = r"""
import json, os, runpy, select, signal, socket, sys, traceback
channel = socket.socket(fileno=int(sys.argv[1]))
import tensorflow, tf_keras, orbit          # imported, never run
import bertexp, bertexp.cli, bertexp.experiment
sys.stdout.flush(); sys.stderr.flush()
children = set()

def child(request, fds):
  channel.close()
  for target, fd in enumerate(fds):
    os.dup2(fd, target)
  for fd in fds:
    if fd > 2:
      os.close(fd)
  os.chdir(request["cwd"])
  os.environ.clear()
  os.environ.update(request["env"])
  # As `python` started from a shell: Ctrl-C is KeyboardInterrupt even if
  # the test process ignored SIGINT when it started the zygote (an ignored
  # signal stays ignored across exec, and Python then keeps it so).
  signal.signal(signal.SIGCHLD, signal.SIG_DFL)
  signal.signal(signal.SIGINT, signal.default_int_handler)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  how, what, *args = request["argv"]
  code = 0
  try:
    if how == "-m":
      sys.argv = [what] + args
      runpy.run_module(what, run_name="__main__", alter_sys=True)
    else:
      sys.argv = ["-c"] + args
      exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
  except SystemExit as stop:                   # as the interpreter does
    if stop.code is None or isinstance(stop.code, int):
      code = stop.code or 0
    else:
      print(stop.code, file=sys.stderr)
      code = 1
  except KeyboardInterrupt:            # as a new interpreter: dies of SIGINT
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
  except BaseException:
    traceback.print_exc()
    code = 1
  finally:
    for stream in (sys.stdout, sys.stderr):
      try:
        stream.flush()
      except Exception:
        pass
  os._exit(code)

while True:
  ready, _, _ = select.select([channel], [], [], 0.05)
  while children:
    try:
      pid, status, usage = os.wait4(-1, os.WNOHANG)
    except ChildProcessError:
      break
    if not pid:
      break
    children.discard(pid)
    channel.sendall(json.dumps(
        {"exited": pid, "code": os.waitstatus_to_exitcode(status),
         "cpu": usage.ru_utime + usage.ru_stime}).encode())
  if not ready:
    continue
  message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 3)
  if not message:                              # the test process is gone
    for pid in children:
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    break
  pid = os.fork()
  if pid == 0:
    child(json.loads(message), fds)
  for fd in fds:
    os.close(fd)
  children.add(pid)
  channel.sendall(json.dumps({"started": pid}).encode())
"""


class _Zygote:
  """The forking process and the thread that reads what it reports."""

  def __init__(self):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    self.process = subprocess.Popen(
        [sys.executable, "-c", _ZYGOTE, str(theirs.fileno())],
        pass_fds=[theirs.fileno()], env=dict(os.environ))
    theirs.close()
    self.channel = ours
    self.request_lock = threading.Lock()
    self.started = []
    self.started_ready = threading.Condition()
    self.exits = {}
    self.children_cpu_seconds = 0.0
    self.alive = True
    self.exit_ready = threading.Condition()
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self):
    while True:
      message = self.channel.recv(1 << 16)
      if not message:                        # the zygote died: wake waiters
        with self.exit_ready:
          self.alive = False
          self.exit_ready.notify_all()
        with self.started_ready:
          self.started_ready.notify_all()
        return
      event = json.loads(message)
      if "started" in event:
        with self.started_ready:
          self.started.append(event["started"])
          self.started_ready.notify_all()
      else:
        with self.exit_ready:
          self.exits[event["exited"]] = event["code"]
          self.children_cpu_seconds += event["cpu"]
          self.exit_ready.notify_all()

  def fork(self, argv, env, cwd, fds):
    """Starts `python ARGV` in a forked child; returns its pid."""
    request = json.dumps({"argv": list(argv), "env": env, "cwd": cwd})
    with self.request_lock:
      socket.send_fds(self.channel, [request.encode()], fds)
      with self.started_ready:
        while not self.started:
          if not self.alive or not self.started_ready.wait(timeout=120):
            raise RuntimeError("the forking process did not answer")
        return self.started.pop(0)

  def wait(self, pid, timeout):
    """The exit code of child `pid` (negative: the signal that ended it),
    or None after `timeout` seconds."""
    with self.exit_ready:
      self.exit_ready.wait_for(
          lambda: pid in self.exits or not self.alive, timeout=timeout)
      if pid not in self.exits and not self.alive:
        raise RuntimeError(f"the forking process of {pid} died")
      return self.exits.get(pid)


_zygotes = {}


def children_cpu_seconds():
  """User + system CPU seconds of this test process's forked children that
  have ended (and of the processes they waited for), which the operating
  system counts for the zygote, not for the test process."""
  zygote = _zygotes.get(os.getpid())
  return zygote.children_cpu_seconds if zygote else 0.0


_starting = threading.Lock()


def _zygote():
  """This test process's forking process (started on first use, once
  whichever threads ask)."""
  with _starting:
    if os.getpid() not in _zygotes:
      _zygotes[os.getpid()] = _Zygote()
    return _zygotes[os.getpid()]


class ForkedProcess:
  """`python ARGV` forked from the zygote (ARGV: "-m", a module and its
  arguments, or "-c", code and its arguments), with the parts of
  subprocess.Popen's interface the tests use."""

  def __init__(self, argv, *, env=None, cwd=None, stdin=None, stdout=None,
               stderr=None, text=False):
    closing, fds = [], []
    self.stdout = self.stderr = None
    read_ends = {}
    for target, stream in ((0, stdin), (1, stdout), (2, stderr)):
      if target == 2 and stream == subprocess.STDOUT:
        fds.append(fds[1])
        continue
      if stream == subprocess.PIPE:
        if target == 0:
          raise ValueError("stdin=PIPE is not supported")
        read_end, write_end = os.pipe()
        read_ends[target] = read_end
        closing.append(write_end)
        fds.append(write_end)
      elif stream is None:
        fds.append(target if target else os.open(os.devnull, os.O_RDONLY))
        if not target:
          closing.append(fds[-1])
      elif isinstance(stream, int):
        fds.append(stream)
      else:
        fds.append(stream.fileno())
    try:
      if argv[0] not in ("-m", "-c") or len(argv) < 2:
        raise ValueError(f"not -m MODULE or -c CODE: {argv[:2]}")
      self._zygote = _zygote()
      self.pid = self._zygote.fork(argv, dict(env or os.environ),
                                os.path.abspath(cwd or os.getcwd()), fds)
    finally:
      for fd in closing:
        os.close(fd)
    mode = "r" if text else "rb"
    if 1 in read_ends:
      self.stdout = open(read_ends[1], mode)
    if 2 in read_ends:
      self.stderr = open(read_ends[2], mode)
    self.args = argv
    self.returncode = None

  def poll(self):
    if self.returncode is None:
      self.returncode = self._zygote.wait(self.pid, timeout=0)
    return self.returncode

  def wait(self, timeout=None):
    if self.returncode is None:
      self.returncode = self._zygote.wait(self.pid, timeout)
      if self.returncode is None:
        raise subprocess.TimeoutExpired(self.args, timeout)
    return self.returncode

  def communicate(self, timeout=None):
    """(stdout, stderr) read to their end (each pipe by a thread of its
    own: neither fills while the other is read), then the exit awaited."""
    read = {}
    readers = [threading.Thread(target=lambda s=stream: read.update(
        {s: s.read()}), daemon=True) for stream in (self.stdout, self.stderr)
               if stream]
    for reader in readers:
      reader.start()
    for reader in readers:
      reader.join(timeout)
    self.wait(timeout)
    return read.get(self.stdout), read.get(self.stderr)

  def send_signal(self, signum):
    """As Popen's: nothing when the process has ended."""
    if self.poll() is None:
      try:
        os.kill(self.pid, signum)
      except ProcessLookupError:       # ended since (reaped by the zygote)
        pass

  def terminate(self):
    self.send_signal(signal.SIGTERM)

  def kill(self):
    self.send_signal(signal.SIGKILL)


def popen(argv, **kwargs):
  """`python ARGV` started as a ForkedProcess (keyword arguments: env, cwd,
  stdin, stdout, stderr, text, as subprocess.Popen's)."""
  return ForkedProcess(argv, **kwargs)


def run(argv, *, timeout=None, **kwargs):
  """`python ARGV` to its end: subprocess.CompletedProcess (stdout and
  stderr as `kwargs` ask, as subprocess.run's)."""
  process = ForkedProcess(argv, **kwargs)
  try:
    out, err = process.communicate(timeout)
  except BaseException:
    process.kill()
    process.wait()
    raise
  return subprocess.CompletedProcess(argv, process.returncode, out, err)
