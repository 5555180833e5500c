"""A task package as another distribution ships it: written to a folder,
declaring its task package through the "bertexp.tasks" entry point, and
installed by pip into a folder of its own (put it on sys.path to use it)."""
import os
import subprocess
import sys


def pyproject(distribution, entry_point, package, top):
  """pyproject.toml of `distribution` whose entry point `entry_point`
  names the task package `package` (dotted), in the top-level package
  `top`."""
  return f"""[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "{distribution}"
version = "0.1.0"

[project.entry-points."bertexp.tasks"]
{entry_point} = "{package}"

[tool.setuptools.packages.find]
include = ["{top}*"]
"""


def install(root, files):
  """Writes {relative path: text} under root/source, installs it with pip
  into root/site and returns that folder.

  Raises:
    AssertionError: pip failed (its output in the message).
  """
  source = os.path.join(root, "source")
  for name, text in files.items():
    path = os.path.join(source, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      f.write(text)
  site = os.path.join(root, "site")
  done = subprocess.run(
      [sys.executable, "-m", "pip", "install", "-q", "--no-deps",
       "--no-build-isolation", "--target", site, source],
      capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stdout + done.stderr
  return site
