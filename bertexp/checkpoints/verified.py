"""Checkpoints that are verified when written and when read.

    manager = VerifiedCheckpointManager(checkpoint, model_dir, ...)
    path = latest_intact_checkpoint(model_dir)        # eval / predict / export
    prepare_model_dir(model_dir)                      # before training resumes

Every save first checks that every variable is finite (a checkpoint with a
NaN or Inf is never written: the rotation keeps only good ones), then writes
`ckpt-N.manifest.json` with the size and CRC-32 of each of the checkpoint's
files. Reading walks back from the newest checkpoint: a damaged one
(truncated or missing data file, missing index, manifest mismatch) is
reported with its file name and skipped; an unreadable `checkpoint` state
file is rebuilt from the files present. Checkpoints exist but none is
intact: an error, never a silent start from scratch.
"""
import logging
import re
import zlib

import tensorflow as tf

from bertexp.checkpoints import run_files
from bertexp.util import fileio

_NUMBERED = re.compile(r"ckpt-(\d+)\.index$")


class CheckpointError(ValueError):
  """No intact checkpoint where checkpoints exist."""


def _crc32(path, chunk_bytes=1 << 22):
  crc = 0
  with tf.io.gfile.GFile(path, "rb") as f:
    for chunk in iter(lambda: f.read(chunk_bytes), b""):
      crc = zlib.crc32(chunk, crc)
  return crc


def checkpoint_files(prefix):
  """The files of checkpoint `prefix`: its index and data shards."""
  return sorted([prefix + ".index"] + tf.io.gfile.glob(prefix + ".data-*"))


def manifest_path(prefix):
  """The manifest file of checkpoint `prefix`."""
  return prefix + ".manifest.json"


def write_manifest(prefix):
  """Sizes and CRC-32s of the checkpoint's files, read back from storage."""
  files = {}
  for path in checkpoint_files(prefix):
    files[path.rsplit("/", 1)[-1]] = {
        "bytes": tf.io.gfile.stat(path).length, "crc32": _crc32(path)}
  fileio.write_json(manifest_path(prefix), {"files": files})


def _manifest_entries(manifest):
  """{file name: {"bytes": int, "crc32": int}} of a manifest's JSON value.

  Raises:
    ValueError: any other shape (named by the caller with the file).
  """
  files = manifest.get("files") if isinstance(manifest, dict) else None
  if not isinstance(files, dict):
    raise ValueError("no 'files' object")
  for name, want in files.items():
    if not (isinstance(want, dict) and all(
        isinstance(want.get(key), int) and not isinstance(want.get(key), bool)
        for key in ("bytes", "crc32"))):
      raise ValueError(f"files.{name}: expected integer 'bytes' and 'crc32'")
  return files


def problem(prefix):
  """None if checkpoint `prefix` is intact, else what is wrong with it."""
  index = prefix + ".index"
  if not tf.io.gfile.exists(index):
    return f"{index} is missing"
  folder = prefix.rsplit("/", 1)[0]
  if tf.io.gfile.exists(manifest_path(prefix)):
    try:
      expected = _manifest_entries(fileio.read_json(manifest_path(prefix)))
    except (ValueError, KeyError, TypeError) as e:
      return f"{manifest_path(prefix)} is unreadable ({e})"
    for name, want in sorted(expected.items()):
      path = fileio.join(folder, name)
      if not tf.io.gfile.exists(path):
        return f"{path} is missing"
      size = tf.io.gfile.stat(path).length
      if size != want["bytes"]:
        return f"{path} has {size} bytes, {want['bytes']} were written"
      if _crc32(path) != want["crc32"]:
        return f"{path} does not match its checksum"
    return None
  # No manifest (written by an older version, or the run died between the
  # checkpoint and its manifest): read every tensor; the bundle format
  # checks each tensor's own checksum.
  try:
    # A reader on the prefix itself: tf.train.load_checkpoint takes a prefix
    # on ram:// (where a prefix of files reads as a folder) for a directory.
    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except (tf.errors.OpError, ValueError) as e:
    first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e)
    return f"{prefix} cannot be read ({first_line})"
  return None


def numbered_checkpoints(model_dir):
  """Prefixes of MODEL_DIR's ckpt-N checkpoints, newest first, from the
  files present (the `checkpoint` state file may be the damaged part)."""
  found = []
  for index in tf.io.gfile.glob(run_files.checkpoint(model_dir,
                                                     "ckpt-*.index")):
    match = _NUMBERED.search(index)
    if match:
      found.append((int(match.group(1)), index[:-len(".index")]))
  return [prefix for _, prefix in sorted(found, reverse=True)]


def _state_file_problem(model_dir):
  path = run_files.checkpoint_state(model_dir)
  if not tf.io.gfile.exists(path):
    return f"{path} is missing"
  try:
    state = tf.train.get_checkpoint_state(model_dir)
  except Exception as e:   # a text-proto parse error of any kind
    return f"{path} is unreadable ({type(e).__name__})"
  if state is None or not state.model_checkpoint_path:
    return f"{path} names no checkpoint"
  return None


def latest_intact_checkpoint(model_dir, *, intact_only_from=None):
  """The newest intact ckpt-N of `model_dir` (each damaged newer one is
  logged), None when there is no checkpoint at all; CheckpointError when
  checkpoints exist and none is intact. `intact_only_from`: the prefixes to
  consider (default: all, newest first)."""
  candidates = (numbered_checkpoints(model_dir) if intact_only_from is None
                else intact_only_from)
  damaged = []
  for prefix in candidates:
    why = problem(prefix)
    if why is None:
      return prefix
    logging.warning("damaged checkpoint: %s; trying an older one", why)
    damaged.append(why)
  if damaged:
    raise CheckpointError(
        f"{model_dir}: no intact checkpoint ({'; '.join(damaged)}). Restore the"
        " files, or start over in a new MODEL_DIR")
  return None


def prepare_model_dir(model_dir):
  """Before training resumes: damaged checkpoints newer than the newest
  intact one are moved to MODEL_DIR/damaged/ (kept for inspection) and the
  `checkpoint` state file is rebuilt if it is unreadable or names a
  damaged checkpoint, so TensorFlow's CheckpointManager resumes from the
  intact one. Returns that checkpoint (or None)."""
  candidates = numbered_checkpoints(model_dir)
  latest = latest_intact_checkpoint(model_dir)
  if latest is None:
    return None
  for prefix in candidates[:candidates.index(latest)]:
    quarantine = run_files.damaged(model_dir)
    fileio.makedirs(quarantine)
    for path in tf.io.gfile.glob(prefix + ".*"):
      tf.io.gfile.rename(path, fileio.join(quarantine, path.rsplit("/", 1)[-1]),
                         overwrite=True)
    logging.warning("moved the damaged checkpoint %s to %s", prefix, quarantine)
  kept = candidates[candidates.index(latest):]
  state_problem = _state_file_problem(model_dir)
  state = None if state_problem else tf.train.get_checkpoint_state(model_dir)
  if state_problem or not state.model_checkpoint_path.endswith(
      latest.rsplit("/", 1)[-1]):
    if state_problem:
      logging.warning("%s: rebuilt from the checkpoint files", state_problem)
    # Names relative to MODEL_DIR: a moved or copied run folder resolves.
    name = lambda prefix: prefix.rstrip("/").rsplit("/", 1)[-1]
    tf.compat.v1.train.update_checkpoint_state(
        model_dir, name(latest),
        all_model_checkpoint_paths=[name(p) for p in reversed(kept)])
  return latest


def nonfinite_variables(variables):
  """Names of the variables holding a NaN or an Inf."""
  return [v.name for v in variables if v.dtype.is_floating and not bool(
      tf.reduce_all(tf.math.is_finite(v)))]


class VerifiedCheckpointManager(tf.train.CheckpointManager):
  """tf.train.CheckpointManager that never writes a non-finite variable and
  writes a manifest after each checkpoint (see the module docstring)."""

  def __init__(self, checkpoint, directory, *, checked_variables,
               hold_periodic_saves=lambda: False, **kwargs):
    """hold_periodic_saves() True: interval saves are skipped (e.g. during
    a run of skipped steps, which would push good checkpoints out of the
    rotation); explicit saves (check_interval=False) still happen."""
    super().__init__(checkpoint, directory, **kwargs)
    self._checked_variables = list(checked_variables)
    self._hold = hold_periodic_saves

  def save(self, checkpoint_number=None, check_interval=True, options=None):
    if check_interval and self._hold():
      return None
    bad = nonfinite_variables(self._checked_variables)
    if bad:
      logging.error("checkpoint NOT written: non-finite values in %s",
                    ", ".join(bad[:5]) + (" ..." if len(bad) > 5 else ""))
      return None
    path = super().save(checkpoint_number=checkpoint_number,
                        check_interval=check_interval, options=options)
    if path:
      write_manifest(path)
      self._remove_orphan_manifests()
    return path

  def _remove_orphan_manifests(self):
    for manifest in tf.io.gfile.glob(fileio.join(self.directory,
                                                 "ckpt-*.manifest.json")):
      prefix = manifest[:-len(".manifest.json")]
      if not tf.io.gfile.exists(prefix + ".index"):
        tf.io.gfile.remove(manifest)
