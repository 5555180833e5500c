"""One training process per MODEL_DIR.

    with WriterLock(model_dir):        # ValueError when a live process holds it
      ...train...

Two processes training into one MODEL_DIR (a job restarted while its old copy
still runs, the same command typed twice) would both write ckpt-N files and
metrics rows, and a resumed run could pick either's checkpoint. The chief
therefore holds `MODEL_DIR/writer.lock` (JSON: host, pid, start time, a token
and the time it was last renewed) while it trains:

- a second process is refused at start with one line naming the holder;
- a lock whose holder is gone is taken over with a warning: on the same host
  when its pid no longer runs; on any host when the holder stopped renewing
  it for `lease_seconds` (the holder renews it every `lease_seconds / 4`
  from a background thread);
- evaluation, predict and export read without the lock; the other workers
  of a multi-worker run write under MODEL_DIR/workers/ and take none.

The lock is made with an exclusive create on local disks; object stores
(gs://) have no exclusive create, so there two starts within the same few
milliseconds could both win: the lease still stops every later one.
"""
import datetime
import errno
import json
import logging
import os
import socket
import threading
import time
import uuid

import tensorflow as tf

from bertexp.checkpoints import run_files
from bertexp.util import fileio

LOCK_NAME = "writer.lock"


def _pid_running(pid):
  """True/False when this host can tell whether `pid` runs, else None."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  except (OSError, OverflowError, TypeError):
    return None
  return True


def _is_local(path):
  return "://" not in path


def _create_exclusive(path, text):
  """Writes `text` to a new file `path`; False when `path` already exists."""
  if _is_local(path):
    try:
      descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError as e:
      if e.errno == errno.EEXIST:
        return False
      raise
    with os.fdopen(descriptor, "w") as f:
      f.write(text)
    return True
  # Object stores have no exclusive create: write, then read back whether
  # our text is the one that landed.
  if tf.io.gfile.exists(path):
    return False
  fileio.write_text(path, text)
  return fileio.read_text(path) == text


class WriterLock:
  """Holds MODEL_DIR's writer lock while a `with` block runs (see module)."""

  def __init__(self, model_dir, *, lease_seconds=120.0):
    """Args:
      model_dir: the run folder.
      lease_seconds: how long a holder on another host may go without
        renewing before its lock is taken over.
    """
    self.path = run_files.writer_lock(model_dir, LOCK_NAME)
    self.lease_seconds = float(lease_seconds)
    self.record = {"host": socket.gethostname(), "pid": os.getpid(),
                   "started": datetime.datetime.now(datetime.timezone.utc)
                   .isoformat(timespec="seconds"),
                   "token": uuid.uuid4().hex}
    self._stop = threading.Event()
    self._renewer = None

  def _text(self):
    return json.dumps(dict(self.record, renewed=time.time()), sort_keys=True)

  def _holder(self):
    """The lock file's record, or None when there is none (or it is gone)."""
    try:
      value = json.loads(fileio.read_text(self.path))
    except (tf.errors.NotFoundError, FileNotFoundError):
      return None
    except (ValueError, tf.errors.OpError):
      return {}                        # unreadable: treated as abandoned
    return value if isinstance(value, dict) else {}

  def _abandoned(self, holder):
    """Why `holder`'s lock may be taken over, or None while it is alive.

    On this host a holder whose pid no longer runs is gone at once; any
    holder is gone once it has not renewed for lease_seconds (another host,
    or a pid that was reused).
    """
    if not holder:
      return "the lock file is unreadable"
    if (holder.get("host") == self.record["host"] and
        _pid_running(holder.get("pid")) is False):
      return f"its process {holder.get('pid')} is gone"
    renewed = holder.get("renewed")
    if not isinstance(renewed, (int, float)):
      return "it carries no renewal time"
    age = time.time() - renewed
    if age > self.lease_seconds:
      return (f"it was last renewed {age:.0f} s ago (lease "
              f"{self.lease_seconds:.0f} s)")
    return None

  def acquire(self):
    """Takes the lock, or takes over an abandoned one.

    Raises:
      ValueError: a live process holds it (one line naming host, pid and
        start time).
    """
    fileio.makedirs(self.path.rsplit("/", 1)[0])
    for _ in range(3):
      if _create_exclusive(self.path, self._text()):
        self._start_renewing()
        return self
      holder = self._holder()
      if holder is None:
        continue                       # released meanwhile: try again
      why = self._abandoned(holder)
      if why is None:
        raise ValueError(
            f"{self.path.rsplit('/', 1)[0]} is being trained by another "
            f"process (host {holder.get('host')}, pid {holder.get('pid')}, "
            f"started {holder.get('started')}; lock {self.path}): wait for it "
            "to end or stop it, or use another MODEL_DIR")
      logging.warning("taking over %s from host %s pid %s: %s", self.path,
                      holder.get("host"), holder.get("pid"), why)
      try:
        tf.io.gfile.remove(self.path)
      except tf.errors.NotFoundError:
        pass
    raise ValueError(f"{self.path}: could not take the lock (other processes "
                     "keep taking it)")

  def _start_renewing(self):
    def renew():
      while not self._stop.wait(self.lease_seconds / 4):
        try:
          if (self._holder() or {}).get("token") != self.record["token"]:
            logging.error("%s was taken over by another process", self.path)
            return
          fileio.write_text(self.path, self._text())
        except tf.errors.OpError as e:      # storage hiccup: try next time
          logging.warning("could not renew %s: %s", self.path, e)
    self._renewer = threading.Thread(target=renew, daemon=True,
                                     name="bertexp-writer-lock")
    self._renewer.start()

  def release(self):
    """Stops renewing and removes the lock if it is still ours."""
    self._stop.set()
    if self._renewer is not None:
      self._renewer.join(timeout=5)
    if (self._holder() or {}).get("token") == self.record["token"]:
      try:
        tf.io.gfile.remove(self.path)
      except tf.errors.NotFoundError:
        pass

  def __enter__(self):
    return self.acquire()

  def __exit__(self, *exc):
    self.release()
    return False
