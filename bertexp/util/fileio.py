"""File access through tf.io.gfile, so gs://, ram:// and local paths all work.

Writers go to a temporary name first and rename at the end: a failure never
leaves a half-written file under the final name.
"""
import contextlib
import hashlib
import json
import os
import uuid

import tensorflow as tf


def join(*parts):
  # os.path.join would mangle "gs://" on Windows; posix join is what gfile wants.
  """Joins path parts with "/" (what tf.io.gfile wants, gs:// included)."""
  return "/".join([parts[0].rstrip("/")] + [p.strip("/") for p in parts[1:]])


def read_bytes(path):
  """The file's bytes (any tf.io.gfile path)."""
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"{path}: file not found")
  with tf.io.gfile.GFile(path, "rb") as f:
    return f.read()


def read_text(path):
  """The file's text (UTF-8); a clear error for bytes that are not UTF-8."""
  data = read_bytes(path)
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise ValueError(f"{path}:{line}: not UTF-8 text (byte {e.start}: "
                     f"{e.reason})") from None


def read_json(path):
  """A JSON file's value.

  Raises:
    ValueError: the file is not valid JSON (named, with the parser's reason).
  """
  try:
    return json.loads(read_text(path))
  except (json.JSONDecodeError, RecursionError) as e:
    raise ValueError(f"{path}: not valid JSON ({e})") from None


def sha256(path, chunk_bytes=1 << 22):
  """Hex SHA-256 of a file, streamed (checkpoints can be gigabytes)."""
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"{path}: file not found")
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    for chunk in iter(lambda: f.read(chunk_bytes), b""):
      digest.update(chunk)
  return digest.hexdigest()


def makedirs(path):
  """Creates `path` and its parents (no error when it exists)."""
  tf.io.gfile.makedirs(path)


def temp_name(path):
  """A unique sibling name for writing `path` before renaming it into place."""
  return f"{path}.tmp-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def atomic_path(path):
  """Yields a temporary path; renames it to `path` only if the block succeeds."""
  parent = os.path.dirname(path)
  if parent:
    tf.io.gfile.makedirs(parent)
  tmp = temp_name(path)
  try:
    yield tmp
    tf.io.gfile.rename(tmp, path, overwrite=True)
  finally:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.remove(tmp)


@contextlib.contextmanager
def atomic_folder(output_dir):
  """Yields a temporary folder to write files into; when the block succeeds
  they are renamed into `output_dir` (created if needed). Whatever fails,
  nothing half-written is left behind."""
  tmp = temp_name(output_dir.rstrip("/"))
  tf.io.gfile.makedirs(tmp)
  try:
    yield tmp
    tf.io.gfile.makedirs(output_dir)
    for name in tf.io.gfile.listdir(tmp):
      name = name.rstrip("/")
      tf.io.gfile.rename(join(tmp, name), join(output_dir, name), overwrite=True)
  finally:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.rmtree(tmp)


def write_text(path, text):
  """Writes `text` to `path` atomically (a temporary file, then a rename)."""
  with atomic_path(path) as tmp:
    with tf.io.gfile.GFile(tmp, "w") as f:
      f.write(text)


def remove_if_present(paths):
  """Removes each of `paths` that exists (what a failed write left)."""
  for path in paths:
    if tf.io.gfile.exists(path):
      tf.io.gfile.remove(path)


def write_json(path, value):
  """Writes `value` as indented, key-sorted JSON, atomically."""
  write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")
