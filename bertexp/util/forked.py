"""Python processes that start with TensorFlow already imported.

A new Python process pays ~4 CPU-seconds to import TensorFlow before a
`bertexp` command does anything. `bertexp sweep` runs every trial, and
`bertexp launch --platform=local` every worker, as a process of its own; so
do tests. `popen(["-m", "bertexp.cli", ...], preload=...)` starts such a
process forked from a helper (the "zygote": one per process that asks,
started on first use) that imported the `preload` modules once and never ran
TensorFlow (no runtime, no thread pools to lose in a fork). The child runs
`python -m MODULE ARGS` or `python -c CODE ARGS` as a new process would: its
own pid, the given environment, working folder and standard streams,
Python's default signal handling; it is signalled, exits and reports its
exit code as a real process does (negative: the signal that ended it).

A forked child that starts such processes of its own (a sweep or launcher
started by a test) asks the zygote it came from, through a channel each
child is given: no second zygote imports TensorFlow again, and nothing of
the child's memory is in its children. A child dies with its zygote
(SIGKILL); the zygote kills the children a process asked for when that
process is gone (even killed), and all of them and exits when the process
that started it is gone, so a lost sweep or launcher leaves nothing
running. What a fresh interpreter decides
at import time from its environment (TF_ENABLE_ONEDNN_OPTS,
TF_USE_LEGACY_KERAS) the zygote decided once, from the environment of the
process that started it; the rest of a child's environment (TF_CONFIG,
thread counts, devices) is read after the fork.
"""
import atexit
import ctypes
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading

_PR_SET_PDEATHSIG = 1
# What a `bertexp train` process imports: the zygote's preload for training
# processes (names only: nothing here imports them). The registry brings
# every task and encoder (and tensorflow_text's kernels), which each child
# would otherwise load itself; none of it starts TensorFlow's runtime, so
# forking after it stays safe.
TRAINING_MODULES = ("tensorflow", "tf_keras", "orbit", "bertexp.cli",
                    "bertexp.experiment", "bertexp.registry")


def _die_with_parent():
  """Linux: this process is killed (SIGKILL) when its parent dies."""
  try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG,
                                                   signal.SIGKILL)
  except (OSError, AttributeError):
    pass


def _child(own_channel, request, fds):
  """In the forked child: becomes `python ARGV`. It ends as that program
  would end the interpreter (SystemExit's code; an exception's traceback
  and 1; death by SIGINT after an uncaught KeyboardInterrupt), through the
  interpreter's own exit: atexit handlers run, streams are flushed.
  `own_channel` is its socket to the zygote, for the processes it forks."""
  _die_with_parent()
  for target, fd in enumerate(fds):
    os.dup2(fd, target)
  for fd in fds:
    if fd > 2:
      os.close(fd)
  os.chdir(request["cwd"])
  os.environ.clear()
  os.environ.update(request["env"])
  # As `python` started from a shell: Ctrl-C is KeyboardInterrupt even if
  # the zygote's starter ignored SIGINT (an ignored signal stays ignored
  # across exec, and Python then keeps it so).
  signal.signal(signal.SIGCHLD, signal.SIG_DFL)
  signal.signal(signal.SIGINT, signal.default_int_handler)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  # This file runs as the zygote's __main__; the program's `forked` is the
  # module of that name.
  importlib.import_module(__spec__.name).inherited_channel = (
      os.getpid(), own_channel)
  how, what, *args = request["argv"]
  if how == "-m":
    sys.argv = [what] + args
    runpy.run_module(what, run_name="__main__", alter_sys=True)
  else:
    sys.argv = ["-c"] + args
    exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})  # pylint: disable=exec-used
  sys.exit(0)


class _Requests:
  """The zygote's books: which process (by its channel) asked for which
  child, and the CPU seconds of the ended children each one asked for,
  counted for it when it ends (as the operating system counts a process's
  waited-for children for it)."""

  def __init__(self, starter):
    self.children = {starter: set()}     # channel -> the pids it asked for
    self.own_channel = {}                # pid -> the channel it was given
    self.ended_cpu = {}                  # channel -> its ended children's

  def add(self, channel, pid, own_channel):
    self.children[channel].add(pid)
    self.children[own_channel] = set()
    self.own_channel[pid] = own_channel

  def drop(self, channel):
    """Forgets a closed channel (its ended children's CPU seconds stay
    until its process is reaped: it may close first); returns the pids it
    asked for."""
    return self.children.pop(channel)

  def ended(self, pid, cpu):
    """(the channel that asked for `pid`, or None; its CPU seconds with
    those of the children it asked for that ended before it)."""
    cpu += self.ended_cpu.pop(self.own_channel.pop(pid, None), 0.0)
    for channel, children in self.children.items():
      if pid in children:
        children.discard(pid)
        self.ended_cpu[channel] = self.ended_cpu.get(channel, 0.0) + cpu
        return channel, cpu
    return None, cpu


def _report_exits(requests):
  """Reaps the children that ended; tells the process that asked for each
  one its exit code and CPU seconds."""
  while True:
    try:
      pid, status, usage = os.wait4(-1, os.WNOHANG)
    except ChildProcessError:
      return
    if not pid:
      return
    channel, cpu = requests.ended(pid, usage.ru_utime + usage.ru_stime)
    if channel:
      _send(channel, {"exited": pid, "code": os.waitstatus_to_exitcode(status),
                      "cpu": cpu})


def _send(channel, event):
  """Sends `event` to a process that may have ended since it asked (its
  closed channel is then seen and handled by the zygote's loop)."""
  try:
    channel.sendall(json.dumps(event).encode())
  except OSError:
    pass


def _kill(pids):
  for pid in pids:
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass


def _fork(request, fds, channels):
  """Forks the child `request` asks for; returns its pid and the zygote's
  end of a new channel through which the child can ask for children of
  its own (forked from here, not from a zygote it would start)."""
  ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
  pid = os.fork()
  if pid == 0:
    for channel in [ours, *channels]:
      channel.close()
    _child(theirs, json.loads(request), fds)
  theirs.close()
  for fd in fds:
    os.close(fd)
  return pid, ours


def serve(channel_fd, preload):
  """The zygote: imports `preload`, then forks a child per request read
  from the socket `channel_fd`, or from the channel of a child it forked,
  until the socket closes.

  A channel that closes (its process ended, even killed) takes the
  children started through it with it (SIGKILL).

  Args:
    channel_fd: a SOCK_SEQPACKET socket to the starting process.
    preload: module names to import before the first fork.
  """
  starter = socket.socket(fileno=channel_fd)
  # Ctrl-C's SIGINT reaches the terminal's whole process group: the
  # children handle it (a trial checkpoints); the zygote, whose death would
  # kill them mid-step, ends only when its starter does.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  for module in preload:
    importlib.import_module(module)
  sys.stdout.flush()
  sys.stderr.flush()
  requests = _Requests(starter)
  while True:
    ready, _, _ = select.select(list(requests.children), [], [], 0.05)
    _report_exits(requests)
    for channel in ready:
      message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 3)
      if not message:                  # that process is gone
        _kill(requests.drop(channel))
        channel.close()
        if channel is starter:
          for children in requests.children.values():
            _kill(children)
          return
        continue
      pid, own_channel = _fork(message, fds, requests.children)
      requests.add(channel, pid, own_channel)
      _send(channel, {"started": pid})


class _Zygote:
  """The starter's side: the zygote process and the thread that reads what
  it reports."""

  def __init__(self, preload, channel=None):
    """A new zygote importing `preload`; or, given `channel`, the zygote
    this process was forked from (self.process None)."""
    self.process = None
    if channel is None:
      channel, theirs = socket.socketpair(socket.AF_UNIX,
                                          socket.SOCK_SEQPACKET)
      self.process = subprocess.Popen(
          [sys.executable, "-m", __name__, str(theirs.fileno()),
           ",".join(preload)], pass_fds=[theirs.fileno()],
          env=dict(os.environ))
      theirs.close()
    self.channel = channel
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
          if not self.alive or not self.started_ready.wait(timeout=300):
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

  def close(self):
    """Ends the zygote (a shared one: the children started through this
    channel) and reaps it."""
    # Shut down, not just closed: the reading thread's recv then returns
    # the end of the stream (a closed socket would raise in it).
    self.channel.shutdown(socket.SHUT_RDWR)
    if self.process:
      try:
        self.process.wait(timeout=30)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()
    self.channel.close()


_zygotes = {}
_starting = threading.Lock()
# (pid, socket) in a process forked by a zygote: its channel to that
# zygote, which then forks this process's children too.
inherited_channel = None


def zygote(preload):
  """This process's zygote (once whichever threads ask): the one it was
  forked from, if any; else started on first use, importing the first
  caller's `preload`."""
  global inherited_channel
  with _starting:
    if os.getpid() not in _zygotes:
      channel = None
      if inherited_channel and inherited_channel[0] == os.getpid():
        channel, inherited_channel = inherited_channel[1], None
      _zygotes[os.getpid()] = _Zygote(preload, channel)
      atexit.register(shutdown)
    return _zygotes[os.getpid()]


def shutdown():
  """Ends this process's zygote, if it started one, killing any child still
  running, and reaps it (its children's CPU time then counts for this
  process). At exit it runs by itself; a process that leaves with
  os._exit calls it first."""
  with _starting:
    started = _zygotes.pop(os.getpid(), None)
  if started:
    started.close()


def children_cpu_seconds():
  """User + system CPU seconds of this process's forked children that have
  ended (and of the processes they waited for or forked), which the
  operating system counts for the zygote, not for this process."""
  started = _zygotes.get(os.getpid())
  return started.children_cpu_seconds if started else 0.0


def _stream_fds(stdin, stdout, stderr):
  """(the child's fds 0-2, fds to close here once it has them, {1 or 2:
  the read end of a pipe}) for Popen-style stream arguments."""
  closing, fds, read_ends = [], [], {}
  for target, stream in ((0, stdin), (1, stdout), (2, stderr)):
    if target == 2 and stream == subprocess.STDOUT:
      fds.append(fds[1])
    elif stream == subprocess.PIPE:
      if target == 0:
        raise ValueError("stdin=PIPE is not supported")
      read_ends[target], write_end = os.pipe()
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
  return fds, closing, read_ends


class ForkedProcess:
  """`python ARGV` forked from this process's zygote, with the parts of
  subprocess.Popen's interface a caller needs.

  Args:
    argv: ["-m", module, *arguments] or ["-c", code, *arguments].
    preload: modules the zygote imports before it forks (once per process:
      the first call's).
    env, cwd, stdin, stdout, stderr, text: as subprocess.Popen's (stdin
      cannot be a pipe).
  Raises:
    ValueError: argv is not -m MODULE or -c CODE.
    RuntimeError: the zygote did not start the process.
  """

  def __init__(self, argv, *, preload, env=None, cwd=None, stdin=None,
               stdout=None, stderr=None, text=False):
    if argv[0] not in ("-m", "-c") or len(argv) < 2:
      raise ValueError(f"not -m MODULE or -c CODE: {argv[:2]}")
    fds, closing, read_ends = _stream_fds(stdin, stdout, stderr)
    try:
      self._zygote = zygote(preload)
      self.pid = self._zygote.fork(argv, dict(env or os.environ),
                                   os.path.abspath(cwd or os.getcwd()), fds)
    finally:
      for fd in closing:
        os.close(fd)
    mode = "r" if text else "rb"
    self.stdout = open(read_ends[1], mode) if 1 in read_ends else None
    self.stderr = open(read_ends[2], mode) if 2 in read_ends else None
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


def run(argv, *, preload, timeout=None, **kwargs):
  """`python ARGV` forked (ForkedProcess's arguments) and run to its end.

  Returns:
    subprocess.CompletedProcess (stdout and stderr as `kwargs` ask).
  """
  process = ForkedProcess(argv, preload=preload, **kwargs)
  try:
    out, err = process.communicate(timeout)
  except BaseException:
    process.kill()
    process.wait()
    raise
  return subprocess.CompletedProcess(argv, process.returncode, out, err)


if __name__ == "__main__":
  serve(int(sys.argv[1]), [m for m in sys.argv[2].split(",") if m])
