"""Small enough to read: no class in bertexp/ over 300 lines and no function
over 60 lines of code (its docstring aside), read with `ast`."""
import ast

from test_import_rules import _modules

MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 60


def _code_lines(node):
  """A definition's lines, less its docstring's."""
  lines = node.end_lineno - node.lineno + 1
  first = node.body[0] if node.body else None
  if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
      and isinstance(first.value.value, str)):
    lines -= first.end_lineno - first.lineno + 1
  return lines


def oversized(module, source):
  """(module, name, lines) of each class or function over its limit."""
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.ClassDef):
      lines = node.end_lineno - node.lineno + 1
      if lines > MAX_CLASS_LINES:
        found.append((module, node.name, lines))
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      if _code_lines(node) > MAX_FUNCTION_LINES:
        found.append((module, node.name, _code_lines(node)))
  return found


def test_no_class_over_300_lines_nor_function_over_60():
  found = [item for module, path in sorted(_modules().items())
           for item in oversized(module, open(path, encoding="utf-8").read())]
  assert found == []


def test_the_size_check_catches_a_long_function_and_a_long_class():
  body = "".join(f"  x{i} = {i}\n" for i in range(60))
  source = (f'def long():\n  """A docstring\n\n  of lines."""\n{body}'
            f"class Big:\n" + "".join(f"  y{i} = {i}\n" for i in range(300)))
  assert [name for _, name, _ in oversized("m", source)] == ["long", "Big"]
  shorter = f'def fits():\n  """A docstring\n\n  of lines."""\n{body[:-9]}'
  assert oversized("m", shorter) == []
