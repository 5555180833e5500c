"""The package's import direction, read from the source with `ast`.

Rooms, lowest first (a module may import from its own room and from rooms
below it, never above):

    util | modes <- data <- model <- checkpoints <- tasks <- settings | train
         | serving <- experiment <- cli | gin_setup | registry | sweeps
         | launch <- experiments/

`train` and `serving` are one level apart from each other: neither imports
the other, and tasks import neither. Imports inside functions count too (a
lazy import is still a dependency). No two modules may import each other,
directly or through others.
"""
import ast
import os

import pytest

from conftest import REPO

PACKAGE = os.path.join(REPO, "bertexp")

RANK = {"util": 0, "modes": 0, "data": 1, "model": 2, "checkpoints": 3, "capabilities": 3, "tasks": 4,
        "settings": 5,
        "train": 5, "serving": 5, "experiment": 6,
        "cli": 7, "gin_setup": 7, "registry": 7, "sweeps": 7, "launch": 7,
        "__init__": 7,
        "experiments": 8}   # shipped grid files: users of the sweeps API
FACE = {"cli", "gin_setup", "registry", "sweeps", "launch", "__init__"}


def _modules():
  """{dotted module name: path} for every .py file of the package."""
  found = {}
  for folder, _, names in os.walk(PACKAGE):
    for name in names:
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3]
        dotted = rel.replace(os.sep, ".")
        found[dotted[:-len(".__init__")] if dotted.endswith(".__init__")
              else dotted] = path
  return found


def _imports(path, modules):
  """The bertexp modules `path` imports (at any depth in the file)."""
  tree = ast.parse(open(path, encoding="utf-8").read(), path)
  targets = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      targets.update(a.name for a in node.names if a.name.startswith("bertexp"))
    elif isinstance(node, ast.ImportFrom) and node.module and (
        node.module.startswith("bertexp")):
      for alias in node.names:
        full = f"{node.module}.{alias.name}"
        targets.add(full if full in modules else node.module)
  return targets - {"bertexp"}


def room(module):
  """'bertexp.train.loop' -> 'train'; 'bertexp' -> '__init__'."""
  parts = module.split(".")
  return parts[1] if len(parts) > 1 else "__init__"


def import_graph():
  modules = _modules()
  return {m: _imports(p, modules) for m, p in modules.items()}


def direction_violations(graph):
  """(importer, imported, why) for each import that points the wrong way."""
  bad = []
  for importer, targets in sorted(graph.items()):
    source = room(importer)
    for target in sorted(targets):
      dest = room(target)
      if dest not in RANK:
        bad.append((importer, target, f"room {dest!r} has no rank"))
      elif RANK[dest] > RANK[source]:
        bad.append((importer, target, f"{source} may not import {dest}"))
      elif (RANK[dest] == RANK[source] and dest != source and
            not (source in FACE and dest in FACE)):
        bad.append((importer, target, f"{source} and {dest} are siblings"))
  return bad


def cycles(graph):
  """Each import cycle once, as a list of modules."""
  found, state, stack = [], {}, []

  def visit(node):
    state[node] = "open"
    stack.append(node)
    for nxt in sorted(graph.get(node, ())):
      if state.get(nxt) == "open":
        found.append(stack[stack.index(nxt):] + [nxt])
      elif nxt not in state:
        visit(nxt)
    stack.pop()
    state[node] = "done"

  for node in sorted(graph):
    if node not in state:
      visit(node)
  return found


def test_every_room_of_the_package_has_a_rank():
  rooms = {room(m) for m in import_graph()}
  assert rooms <= set(RANK), sorted(rooms - set(RANK))


def test_imports_point_down_only():
  assert direction_violations(import_graph()) == []


def task_folder(module):
  """'bertexp.tasks.squad.data' -> 'squad'; None outside a task folder."""
  parts = module.split(".")
  return parts[2] if len(parts) > 3 and parts[1] == "tasks" else None


def task_folder_crossings(graph):
  """(importer, imported) where one task's folder imports another's: each
  task stands alone on the shared tasks/ modules (base, prepare_command,
  text_serving), so a task can be added or removed as one folder."""
  return [(importer, target) for importer, targets in sorted(graph.items())
          for target in sorted(targets)
          if task_folder(importer) and task_folder(target) and
          task_folder(importer) != task_folder(target)]


def test_task_folders_import_no_other_task_folder():
  assert task_folder_crossings(import_graph()) == []
  graph = import_graph()
  graph["bertexp.tasks.distillation.task"] = set(
      graph["bertexp.tasks.distillation.task"]) | {"bertexp.tasks.squad.task"}
  assert task_folder_crossings(graph) == [
      ("bertexp.tasks.distillation.task", "bertexp.tasks.squad.task")]


def test_no_import_cycles():
  assert cycles(import_graph()) == []


@pytest.mark.parametrize("importer,imported", [
    ("bertexp.tasks.squad.task", "bertexp.train.loop"),          # task -> train
    ("bertexp.tasks.squad.task", "bertexp.serving.exporting.export"),  # -> serving
    ("bertexp.data.pipeline", "bertexp.tasks.squad.scoring"),  # data -> tasks
    ("bertexp.train.loop", "bertexp.serving.exporting.export"),   # siblings
    ("bertexp.util.fileio", "bertexp.model.modeling"),      # util -> model
])
def test_the_rules_catch_an_upward_import(importer, imported):
  graph = import_graph()
  graph[importer] = set(graph[importer]) | {imported}
  assert [v[:2] for v in direction_violations(graph)] == [(importer, imported)]


def test_the_cycle_check_catches_a_cycle():
  graph = import_graph()
  graph["bertexp.util.fileio"] = set(graph["bertexp.util.fileio"]) | {
      "bertexp.util.extras"}
  graph["bertexp.util.extras"] = set(graph["bertexp.util.extras"]) | {
      "bertexp.util.fileio"}
  assert cycles(graph)


PRIVATE_NAMES = ("gin.config._", "tf.__internal__", "tensorflow.python",
                 "tensorflow_text.python", "_pywrap_")


def test_private_apis_of_other_libraries_only_in_one_module():
  """gin, TensorFlow and tensorflow_text internals are reached only through
  bertexp/util/private_apis.py, where each use says why."""
  found = []
  for module, path in _modules().items():
    if module == "bertexp.util.private_apis":
      continue
    text = open(path, encoding="utf-8").read()
    found += [(module, name) for name in PRIVATE_NAMES if name in text]
  assert found == []
