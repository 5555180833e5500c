"""Hyperparameter grids: lists of macro bindings ({"LEARNING_RATE": 3e-5,
...}), built from ml_collections ConfigDicts.

Named grids are the BERT paper's; a user grid is a Python file defining
`grid()` that returns a list of ConfigDicts or dicts, typically made with
`product` and `zip_axes` below, e.g.

    from bertexp.sweeps.grids import product
    def grid():
      return product(LEARNING_RATE=[5e-5, 3e-5], NUM_TRAIN_EPOCHS=[2, 3])
"""
import itertools
import os
import re
import runpy

import ml_collections

MACRO_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def product(**axes):
  """Every combination of the axes' values, first axis slowest."""
  names = list(axes)
  return [ml_collections.ConfigDict(dict(zip(names, values)))
          for values in itertools.product(*(axes[n] for n in names))]


def zip_axes(**axes):
  """The i-th values of every axis together (all axes the same length)."""
  lengths = {n: len(v) for n, v in axes.items()}
  if len(set(lengths.values())) > 1:
    raise ValueError(f"zip_axes needs equal lengths, got {lengths}")
  names = list(axes)
  return [ml_collections.ConfigDict(dict(zip(names, values)))
          for values in zip(*(axes[n] for n in names))]


def cross(*grids):
  """Every combination of one binding set from each grid."""
  result = []
  for parts in itertools.product(*grids):
    merged = {}
    for part in parts:
      merged.update(dict(part))
    result.append(ml_collections.ConfigDict(merged))
  return result


# The BERT paper (Devlin et al., 2019): §4.1 / Table 1's fine-tuning search
# (batch 32, 3 epochs), Appendix A.3's full grid, and the grid the released
# small BERTs (Turc et al., 2019) were tuned with.
NAMED = {
    "paper_table1": lambda: product(
        TRAIN_BATCH_SIZE=[32], LEARNING_RATE=[5e-5, 4e-5, 3e-5, 2e-5],
        NUM_TRAIN_EPOCHS=[3]),
    "paper_a3": lambda: product(
        TRAIN_BATCH_SIZE=[16, 32], LEARNING_RATE=[5e-5, 3e-5, 2e-5],
        NUM_TRAIN_EPOCHS=[2, 3, 4]),
    "small_bert": lambda: product(
        TRAIN_BATCH_SIZE=[8, 16, 32, 64, 128],
        LEARNING_RATE=[3e-4, 1e-4, 5e-5, 3e-5], NUM_TRAIN_EPOCHS=[4]),
}


def _run_grid_file(path):
  """The value of `grid()` in the Python file at `path`.

  Raises:
    ValueError: the file does not run, defines no grid(), or grid() fails
      (the message names the file and, for a syntax error, the line).
  """
  try:
    namespace = runpy.run_path(path)
  except SyntaxError as e:
    raise ValueError(f"{path}:{e.lineno}: not valid Python ({e.msg})") from None
  except Exception as e:  # the user's own code: name it, keep the cause
    raise ValueError(f"{path}: running it failed: {type(e).__name__}: "
                     f"{e}") from e
  if not callable(namespace.get("grid")):
    raise ValueError(f"{path}: defines no function grid() returning the "
                     "list of binding sets")
  try:
    return namespace["grid"]()
  except Exception as e:
    raise ValueError(f"{path}: grid() failed: {type(e).__name__}: {e}") from e


def load_grid(spec):
  """A named grid or the `grid()` of a Python file -> list of plain dicts."""
  if spec in NAMED:
    raw, where = NAMED[spec](), spec
  elif spec.endswith(".py"):
    if not os.path.exists(spec):
      raise FileNotFoundError(f"--grid {spec}: file not found")
    raw, where = _run_grid_file(spec), spec
  else:
    raise ValueError(f"--grid {spec!r}: not one of {sorted(NAMED)} and not a "
                     ".py file")
  if not isinstance(raw, (list, tuple)):
    raise ValueError(f"{where}: grid() must return a list of binding sets "
                     f"(dicts), got {type(raw).__name__}")
  grid = []
  for i, bindings in enumerate(raw):
    if isinstance(bindings, ml_collections.ConfigDict):
      bindings = bindings.to_dict()
    if not isinstance(bindings, dict):
      raise ValueError(f"{where}: binding set {i} is a "
                       f"{type(bindings).__name__}, expected a dict of "
                       "MACRO: value")
    for name, value in bindings.items():
      if not isinstance(name, str) or not MACRO_NAME.match(name):
        raise ValueError(f"{where}: binding set {i}: {name!r} is not a gin "
                         "macro name (UPPER_CASE, e.g. LEARNING_RATE)")
      if not isinstance(value, (bool, int, float, str)) and value is not None:
        raise ValueError(f"{where}: binding set {i}: {name}={value!r} is not "
                         "a number, string, bool or None")
    if "SEED" in bindings:
      raise ValueError(f"{where}: binding set {i} sets SEED: seeds come from "
                       "--seeds")
    grid.append(bindings)
  if not grid:
    raise ValueError(f"{where}: the grid is empty")
  if len({tuple(sorted(b.items())) for b in grid}) != len(grid):
    raise ValueError(f"{where}: the grid repeats a binding set")
  return grid
