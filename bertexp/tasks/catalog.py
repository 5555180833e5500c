"""The task folders of bertexp/tasks/, found by their place: nothing
registers itself on import, and a new task is one folder.

A folder `bertexp/tasks/<task>/` may hold
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


def modules_named(name: str) -> List[Tuple[str, object]]:
  """[(task folder, its imported module `name`)] for every task folder
  that has a module of that name, in folder order."""
  found = []
  for folder in task_folders():
    dotted = f"{__package__}.{folder}.{name}"
    if importlib.util.find_spec(dotted) is not None:
      found.append((folder, importlib.import_module(dotted)))
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
