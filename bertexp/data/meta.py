"""The `_meta_data` JSON that `bertexp prepare` writes beside its TFRecords,
read with its fields checked: a hand-edited or foreign file is a ValueError
naming the file and the field, never a KeyError in the middle of a run.
"""
from bertexp.util import fileio

# The label id of rows prepared without labels (unlabelled text a
# distillation teacher labels): `prepare classification` without
# --label_column.
UNLABELLED = -1


def _is_count(value, minimum):
  return isinstance(value, int) and not isinstance(value, bool) and \
      value >= minimum


def read_meta_data(path, *, positive=(), counts=(), strings=(), flags=()):
  """The meta data at `path`, checked.

  Args:
    path: the `_meta_data` file.
    positive: fields that must be present, integers >= 1.
    counts: fields that, when present, must be integers >= 0.
    strings: fields that must be present, non-empty strings.
    flags: fields that, when present, must be true or false.

  Returns:
    The JSON object (a dict).

  Raises:
    ValueError: not JSON, not an object, or a field missing or of the wrong
      type (the message names the file and the field).
  """
  meta = fileio.read_json(path)
  if not isinstance(meta, dict):
    raise ValueError(f"{path}: expected a JSON object (bertexp prepare's "
                     "meta data)")
  for key in (*positive, *strings):
    if key not in meta:
      raise ValueError(f"{path}: missing field {key!r}")
  for key in positive:
    if not _is_count(meta[key], 1):
      raise ValueError(f"{path}: field {key!r} must be a positive integer, "
                       f"got {meta[key]!r}")
  for key in counts:
    if key in meta and not _is_count(meta[key], 0):
      raise ValueError(f"{path}: field {key!r} must be a non-negative "
                       f"integer, got {meta[key]!r}")
  for key in strings:
    if not isinstance(meta[key], str) or not meta[key]:
      raise ValueError(f"{path}: field {key!r} must be a non-empty string, "
                       f"got {meta[key]!r}")
  for key in flags:
    if key in meta and not isinstance(meta[key], bool):
      raise ValueError(f"{path}: field {key!r} must be true or false, got "
                       f"{meta[key]!r}")
  return meta


def split_sizes(meta, path):
  """meta['split_sizes'] ({split: count}; {} when absent), checked."""
  sizes = meta.get("split_sizes", {})
  if not isinstance(sizes, dict) or not all(
      _is_count(v, 0) for v in sizes.values()):
    raise ValueError(f"{path}: split_sizes must map split names to counts")
  return sizes
