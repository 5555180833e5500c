"""The task seam, read from the source with `ast`: the shared layers (data,
model, checkpoints, train, serving, util, the modes table and experiment.py)
never name a task. They do not import bertexp.tasks, do not mention a class
that bertexp/tasks/ defines (no isinstance on a task or head type), and do
not probe a task with hasattr/getattr: what a task can do is declared on
bertexp.tasks.base.Task, and a capability a task lacks raises there."""
import ast
import os

import pytest

from test_import_rules import PACKAGE, _modules, room

SHARED_ROOMS = ("data", "model", "checkpoints", "capabilities", "train",
                "serving", "util",
                "modes", "experiment")


def _task_class_names():
  """Every class defined in bertexp/tasks/ (tasks and their head models)."""
  names = set()
  for module, path in _modules().items():
    if room(module) == "tasks":
      tree = ast.parse(open(path, encoding="utf-8").read(), path)
      names |= {node.name for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef)}
  return names


def _names_a_task(node):
  """True for `task`, `self.task`, `student` and the like: an expression
  whose last name is a task's."""
  last = (node.id if isinstance(node, ast.Name) else
          node.attr if isinstance(node, ast.Attribute) else "")
  return last.lstrip("_") in ("task", "student", "teacher")


def seam_leaks(module, source, task_classes):
  """(module, line, what) for each place `source` names a task."""
  leaks = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      leaks += [(module, node.lineno, f"imports {a.name}") for a in node.names
                if a.name.startswith("bertexp.tasks")]
    elif isinstance(node, ast.ImportFrom) and node.module and (
        node.module.startswith("bertexp.tasks") or (
            node.module == "bertexp" and
            any(a.name == "tasks" for a in node.names))):
      leaks.append((module, node.lineno, f"imports from {node.module}"))
    elif isinstance(node, ast.Name) and node.id in task_classes:
      leaks.append((module, node.lineno, f"names {node.id}"))
    elif isinstance(node, ast.Attribute) and node.attr in task_classes:
      leaks.append((module, node.lineno, f"names {node.attr}"))
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
          node.func.id in ("hasattr", "getattr") and node.args and
          _names_a_task(node.args[0])):
      leaks.append((module, node.lineno, f"{node.func.id} probes a task"))
  return leaks


def _shared_sources():
  return {module: open(path, encoding="utf-8").read()
          for module, path in _modules().items()
          if room(module) in SHARED_ROOMS}


def test_the_shared_layers_never_name_a_task():
  task_classes = _task_class_names()
  assert {"Task", "ClassificationTask", "SpanModel"} <= task_classes
  sources = _shared_sources()
  assert {"bertexp.experiment", "bertexp.serving.exporting.predictor",
          "bertexp.serving.exporting.onnx_export",
          "bertexp.train.loop"} <= set(sources)
  leaks = [leak for module, source in sorted(sources.items())
           for leak in seam_leaks(module, source, task_classes)]
  assert leaks == []


@pytest.mark.parametrize("line,what", [
    ("from bertexp.tasks import squad", "imports from bertexp.tasks"),
    ("import bertexp.tasks.tagging.task", "imports bertexp.tasks.tagging.task"),
    ("from bertexp import tasks", "imports from bertexp"),
    ("ok = isinstance(model, SpanModel)", "names SpanModel"),
    ("ok = isinstance(task, squad.QuestionAnsweringTask)",
     "names QuestionAnsweringTask"),
    ("ok = hasattr(task, 'write_teacher_targets')", "hasattr probes a task"),
    ("n = getattr(self.task, 'num_labels', 0)", "getattr probes a task"),
])
def test_the_seam_check_catches_a_shared_layer_naming_a_task(line, what):
  module = "bertexp.serving.exporting.predictor"
  source = _shared_sources()[module] + "\n" + line + "\n"
  leaks = seam_leaks(module, source, _task_class_names())
  assert [leak[2] for leak in leaks] == [what]


def test_every_shared_room_exists():
  rooms = {room(module) for module in _modules()}
  assert set(SHARED_ROOMS) <= rooms, sorted(set(SHARED_ROOMS) - rooms)
  assert os.path.isdir(os.path.join(PACKAGE, "tasks"))


def test_prepare_subcommands_are_the_ones_the_tasks_declare(capsys):
  """`bertexp prepare <kind>` lists exactly the commands of
  bertexp/tasks/<task>/prepare.py, and the command line holds no branch per
  kind: a new task's data command is one module in tasks/."""
  from bertexp import cli
  from bertexp.tasks import prepare_command
  declared = [c.name for c in prepare_command.discover()]
  assert set(declared) == {"glue", "classification", "squad", "tagging",
                           "pretraining", "multiple_choice", "pairs"}
  with pytest.raises(SystemExit):
    cli.build_parser().parse_args(["prepare", "--help"])
  assert "{" + ",".join(declared) + "}" in capsys.readouterr().out
  squad = cli.build_parser().parse_args(
      ["prepare", "squad", "--squad_file=f", "--vocab_file=v",
       "--output_dir=o"])
  assert squad.max_seq_length == 384 and squad.doc_stride == 128
  cli_source = open(os.path.join(PACKAGE, "cli.py"), encoding="utf-8").read()
  assert "args.kind" not in cli_source and "kind ==" not in cli_source
