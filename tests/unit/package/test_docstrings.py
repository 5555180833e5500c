"""Every public module-level function and class of the package says what it
does (methods that implement a documented interface inherit its words)."""
import ast
import os

from conftest import REPO

PACKAGE = os.path.join(REPO, "bertexp")


def undocumented():
  """"path:line name" of each public top-level def or class without one."""
  found = []
  for folder, _, names in os.walk(PACKAGE):
    if os.sep + "experiments" in folder:      # users' grid files
      continue
    for name in sorted(names):
      if not name.endswith(".py"):
        continue
      path = os.path.join(folder, name)
      tree = ast.parse(open(path, encoding="utf-8").read(), path)
      found += [f"{os.path.relpath(path, PACKAGE)}:{node.lineno} {node.name}"
                for node in tree.body
                if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                and not node.name.startswith("_")
                and not ast.get_docstring(node)]
  return found


def test_public_functions_and_classes_have_docstrings():
  assert undocumented() == []
