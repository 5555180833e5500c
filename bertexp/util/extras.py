"""Packages only some uses need, with a one-line message naming the install
command when one is missing."""
import importlib


class MissingDependency(ImportError):
  """A package is not installed; the message says how to install it."""


def require(module, install, purpose):
  """Imports `module`, or raises MissingDependency: `purpose` needs it,
  `install` is the pip command that provides it."""
  try:
    return importlib.import_module(module)
  except ImportError as e:
    raise MissingDependency(f"{purpose} needs {module}: {install} "
                            f"(import failed: {e})") from e
