"""SIGTERM / SIGINT as a request to stop training after the current step.

    with StopOnSignals(trainer.stop_requested) as signals:
      ...train...                      # the loop checks the flag every step
    signals.received                   # e.g. signal.SIGTERM, or None

A Python signal handler runs only when the main thread is back in Python,
which during a compiled loop of thousands of steps can be an hour later. So
the handler's C part writes the signal to a pipe (`signal.set_wakeup_fd`),
and a watcher thread, blocked on that pipe, sets the TensorFlow flag at once;
the loop reads it before each step. A second signal exits at once (status
128 + signal number), without a checkpoint.
"""
import logging
import os
import re
import signal
import threading

EXIT_STATUS = 42   # "preempted, checkpoint written: run the same command again"
WORKER_LOST_STATUS = 3   # "a peer worker died or hung: restart every worker"
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RunStopped(Exception):
  """Training stopped on a signal after writing a checkpoint; the job did
  not finish: `bertexp` exits with EXIT_STATUS."""


class WorkerLost(Exception):
  """A multi-worker run lost a peer (died, stopped, or a collective timed
  out); `bertexp` exits with WORKER_LOST_STATUS."""


_TASK = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")


def worker_lost(error, *, this_task):
  """A WorkerLost naming the peer(s) the TensorFlow `error` names."""
  named = sorted({f"{job} {task}" for job, task in _TASK.findall(str(error))}
                 - {this_task})
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  reason = next((line for line in lines if "aborted" in line.lower() or
                 "unhealthy" in line.lower() or "deadline" in line.lower()),
                lines[0] if lines else type(error).__name__)
  return WorkerLost(
      f"lost contact with {', '.join(named) or 'a peer worker'} "
      f"({type(error).__name__}: {reason[:300]}). Restart every worker with "
      "the same command: the run resumes from its last checkpoint")


class StopOnSignals:
  """Context manager: SIGTERM/SIGINT set `flag` (a boolean tf.Variable)."""

  def __init__(self, flag):
    self.flag = flag
    self.received = None
    self._installed = False

  def __enter__(self):
    if threading.current_thread() is not threading.main_thread():
      logging.info("not the main thread: SIGTERM/SIGINT keep their default")
      return self
    self._read_fd, self._write_fd = os.pipe()
    os.set_blocking(self._write_fd, False)
    self._old_wakeup = signal.set_wakeup_fd(self._write_fd)
    self._old_handlers = {s: signal.signal(s, self._note) for s in SIGNALS}
    self._watcher = threading.Thread(target=self._watch, daemon=True,
                                     name="bertexp-stop-signals")
    self._watcher.start()
    self._installed = True
    return self

  def _note(self, signum, frame):
    del signum, frame   # the watcher thread has acted already

  def _watch(self):
    while True:
      try:
        data = os.read(self._read_fd, 1)
      except OSError:
        return
      if not data:
        return
      signum = data[0]
      if signum not in SIGNALS:
        continue
      if self.received is not None:
        logging.error("second %s: exiting now, without a checkpoint",
                      signal.Signals(signum).name)
        os._exit(128 + signum)
      self.received = signal.Signals(signum)
      logging.warning("%s received: stopping after the current step to "
                      "write a checkpoint", self.received.name)
      self.flag.assign(True)

  def __exit__(self, *exc):
    if not self._installed:
      return False
    for signum, handler in self._old_handlers.items():
      signal.signal(signum, handler)
    signal.set_wakeup_fd(self._old_wakeup)
    os.close(self._write_fd)   # ends the watcher's read
    self._watcher.join(timeout=5)
    os.close(self._read_fd)
    return False
