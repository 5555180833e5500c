"""The task folders of bertexp/tasks/, found by their place, and the task
packages other distributions declare: nothing registers itself on import,
and a new task is one folder.

A package installed with pip declares its tasks through the entry point
group "bertexp.tasks", each naming a package laid out as a task folder:

    [project.entry-points."bertexp.tasks"]
    my_task = "my_package.my_task"       # my_package/my_task/{task,prepare}.py

A folder `bertexp/tasks/<task>/` (or such a package) may hold
  prepare.py  COMMANDS: its `bertexp prepare` subcommands (prepare_command);
  task.py     the gin-registered task, and HUGGINGFACE_HEADS: how the heads
              it trains go to transformers (to_huggingface.HeadMapping);
              HUGGINGFACE_FILES: files of its own for such a folder
              (to_huggingface.ExtraFiles); both name their task, and a
              run gets only its own tasks'.
"""
import importlib
import importlib.util
import pkgutil
from typing import List, Tuple


def task_folders() -> List[str]:
  """The names of the task folders, sorted."""
  from bertexp import tasks
  return sorted(info.name for info in pkgutil.iter_modules(tasks.__path__)
                if info.ispkg)


ENTRY_POINTS = "bertexp.tasks"


def task_packages() -> List[Tuple[str, str]]:
  """[(name, dotted package)]: bertexp's task folders in folder order, then
  the packages installed distributions declare under ENTRY_POINTS, by
  name."""
  from importlib import metadata
  shipped = [(folder, f"{__package__}.{folder}") for folder in task_folders()]
  declared = sorted((point.name, point.value) for point in
                    metadata.entry_points(group=ENTRY_POINTS))
  return shipped + declared


def modules_named(name: str) -> List[Tuple[str, object]]:
  """[(task name, its imported module `name`)] for every task package
  (task_packages) that has a module of that name.

  Raises:
    ValueError: a declared package cannot be found (naming its entry
      point).
  """
  found = []
  for task, package in task_packages():
    try:
      present = importlib.util.find_spec(f"{package}.{name}") is not None
    except ModuleNotFoundError as e:
      raise ValueError(f"entry point {ENTRY_POINTS}:{task} = {package!r}: "
                       f"cannot be imported ({e})") from None
    if present:
      found.append((task, importlib.import_module(f"{package}.{name}")))
  return found


def huggingface_heads():
  """Every task's HUGGINGFACE_HEADS, in folder order.

  Heads of different tasks may share a layer name (a run's checkpoint is
  read only for its own tasks' heads).

  Raises:
    ValueError: two folders declare a head of the same task and layer.
  """
  heads, owner = [], {}
  for folder, module in modules_named("task"):
    for head in getattr(module, "HUGGINGFACE_HEADS", ()):
      key = (head.task, head.layer)
      if key in owner:
        raise ValueError(f"Hugging Face head {head.layer!r} of {head.task}: "
                         f"declared by {owner[key]} and {folder}")
      owner[key] = folder
      heads.append(head)
  return tuple(heads)


def huggingface_files():
  """Every task's HUGGINGFACE_FILES, in folder order."""
  return tuple(files for _, module in modules_named("task")
               for files in getattr(module, "HUGGINGFACE_FILES", ()))
