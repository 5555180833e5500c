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
              HUGGINGFACE_FILES: functions adding files of its own to
              such a folder (to_huggingface.export_huggingface).
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

  Raises:
    ValueError: two tasks declare a head on the same layer name.
  """
  heads, owner = [], {}
  for folder, module in modules_named("task"):
    for head in getattr(module, "HUGGINGFACE_HEADS", ()):
      if head.layer in owner:
        raise ValueError(f"Hugging Face head {head.layer!r}: declared by "
                         f"{owner[head.layer]} and {folder}")
      owner[head.layer] = folder
      heads.append(head)
  return tuple(heads)


def huggingface_files():
  """Every task's HUGGINGFACE_FILES, in folder order."""
  return tuple(files for _, module in modules_named("task")
               for files in getattr(module, "HUGGINGFACE_FILES", ()))
