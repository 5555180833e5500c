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

_MACRO = re.compile(r"^[A-Z][A-Z0-9_]*$")


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


def load_grid(spec):
  """A named grid or the `grid()` of a Python file -> list of plain dicts."""
  if spec in NAMED:
    raw, where = NAMED[spec](), spec
  elif spec.endswith(".py"):
    if not os.path.exists(spec):
      raise FileNotFoundError(f"--grid {spec}: file not found")
    namespace = runpy.run_path(spec)
    if not callable(namespace.get("grid")):
      raise ValueError(f"{spec}: defines no function grid() returning the "
                       "list of binding sets")
    raw, where = namespace["grid"](), spec
  else:
    raise ValueError(f"--grid {spec!r}: not one of {sorted(NAMED)} and not a "
                     ".py file")
  grid = []
  for i, bindings in enumerate(raw):
    bindings = (bindings.to_dict() if isinstance(bindings, ml_collections.ConfigDict)
                else dict(bindings))
    for name, value in bindings.items():
      if not _MACRO.match(name):
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
