"""File access for local paths and for every file system TensorFlow reads
(gs://, ram://, ...): local paths through Python's own calls, others through
tf.io.gfile. TensorFlow is imported only for a path with a scheme, so the
commands that only start processes or read and write small files (launch,
results) start without it.

Writers go to a temporary name first and rename at the end: a failure never
leaves a half-written file under the final name.
"""
import contextlib
import hashlib
import json
import os
import shutil
import uuid


class _LocalFiles:
  """The subset of tf.io.gfile this module uses, on the local disk."""

  exists = staticmethod(os.path.exists)
  listdir = staticmethod(os.listdir)
  remove = staticmethod(os.remove)
  rmtree = staticmethod(shutil.rmtree)

  @staticmethod
  def GFile(path, mode):  # pylint: disable=invalid-name
    return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))

  @staticmethod
  def makedirs(path):
    os.makedirs(path, exist_ok=True)

  @staticmethod
  def rename(source, target, overwrite=False):
    if not overwrite and os.path.exists(target):
      raise FileExistsError(f"{target}: exists")
    os.replace(source, target)


def _files(path):
  """tf.io.gfile for a path with a scheme (gs://...), else _LocalFiles."""
  if "://" in str(path):
    import tensorflow as tf
    return tf.io.gfile
  return _LocalFiles


def join(*parts):
  # os.path.join would mangle "gs://" on Windows; posix join is what gfile wants.
  """Joins path parts with "/" (what tf.io.gfile wants, gs:// included)."""
  return "/".join([parts[0].rstrip("/")] + [p.strip("/") for p in parts[1:]])


def read_bytes(path):
  """The file's bytes (any tf.io.gfile path)."""
  files = _files(path)
  if not files.exists(path):
    raise FileNotFoundError(f"{path}: file not found")
  with files.GFile(path, "rb") as f:
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
  files = _files(path)
  if not files.exists(path):
    raise FileNotFoundError(f"{path}: file not found")
  digest = hashlib.sha256()
  with files.GFile(path, "rb") as f:
    for chunk in iter(lambda: f.read(chunk_bytes), b""):
      digest.update(chunk)
  return digest.hexdigest()


def makedirs(path):
  """Creates `path` and its parents (no error when it exists)."""
  _files(path).makedirs(path)


def temp_name(path):
  """A unique sibling name for writing `path` before renaming it into place."""
  return f"{path}.tmp-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def atomic_path(path):
  """Yields a temporary path; renames it to `path` only if the block succeeds."""
  files = _files(path)
  parent = os.path.dirname(path)
  if parent:
    files.makedirs(parent)
  tmp = temp_name(path)
  try:
    yield tmp
    files.rename(tmp, path, overwrite=True)
  finally:
    if files.exists(tmp):
      files.remove(tmp)


@contextlib.contextmanager
def atomic_folder(output_dir):
  """Yields a temporary folder to write files into; when the block succeeds
  they are renamed into `output_dir` (created if needed). Whatever fails,
  nothing half-written is left behind."""
  files = _files(output_dir)
  tmp = temp_name(output_dir.rstrip("/"))
  files.makedirs(tmp)
  try:
    yield tmp
    files.makedirs(output_dir)
    for name in files.listdir(tmp):
      name = name.rstrip("/")
      files.rename(join(tmp, name), join(output_dir, name), overwrite=True)
  finally:
    if files.exists(tmp):
      files.rmtree(tmp)


def write_text(path, text):
  """Writes `text` to `path` atomically (a temporary file, then a rename)."""
  with atomic_path(path) as tmp:
    with _files(tmp).GFile(tmp, "w") as f:
      f.write(text)


@contextlib.contextmanager
def removed_on_failure(companions):
  """Yields a list the block appends each file it writes to; when the block
  fails, each of them and its `companions(path)` (files written beside it)
  are removed, and the error goes on.

  Args:
    companions: path -> [paths of the files written with it].
  """
  written = []
  try:
    yield written
  except BaseException:
    remove_if_present([f for path in written
                       for f in (path, *companions(path))])
    raise


def remove_if_present(paths):
  """Removes each of `paths` that exists (what a failed write left)."""
  for path in paths:
    files = _files(path)
    if files.exists(path):
      files.remove(path)


def write_json(path, value):
  """Writes `value` as indented, key-sorted JSON, atomically."""
  write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")
