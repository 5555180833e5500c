"""Parsing an experiment's gin files and bindings: search paths, the check
that an override names a known macro, quiet include search. Used by the CLI
and by sweeps (which parse each trial's bindings to plan it)."""
import contextlib
import logging
import os
import tokenize

from bertexp.util import private_apis

# Shipped with the package (a checkout links experiments/ and gin/ here).
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
GIN_DIR = os.path.join(PACKAGE_DIR, "gin")
EXPERIMENTS_DIR = os.path.join(PACKAGE_DIR, "experiments")


def resolve_gin_file(path):
  """A .gin file by path, else by name among the shipped ones:
  "glue/mrpc_gpu.gin" or "experiments/glue/mrpc_gpu.gin" (under
  experiments/), "runtime/gpu.gin" (under gin/). Unknown names are returned
  as given (parsing then fails naming them)."""
  if "://" in path or os.path.exists(path):
    return path
  for root in (EXPERIMENTS_DIR, GIN_DIR, PACKAGE_DIR):
    candidate = os.path.join(root, path)
    if os.path.exists(candidate):
      return candidate
  return path


def shipped_name(path):
  """"glue/mrpc_gpu.gin" for a file under the shipped experiments/ or gin/
  (however it was reached), else None."""
  real = os.path.realpath(path)
  for root in (EXPERIMENTS_DIR, GIN_DIR):
    base = os.path.realpath(root) + os.sep
    if real.startswith(base):
      return real[len(base):]
  return None


def gin_search_paths(gin_files):
  """Where `include` lines resolve: gin/, experiments/, the package and the
  folder of each given file."""
  paths = [GIN_DIR, EXPERIMENTS_DIR, PACKAGE_DIR]
  for path in gin_files:
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in paths:
      paths.append(folder)
  return paths


def _check_overrides_name_known_macros(gin_params):
  """`--gin_param=LEARNIG_RATE=3e-5` would quietly define a new macro in gin;
  here an override must name a macro the files define."""
  import difflib
  import re
  import gin
  for param in gin_params:
    match = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=", param)
    if not match:
      continue
    name = match.group(1)
    try:
      gin.query_parameter(f"%{name}")
    except ValueError:
      defined = private_apis.gin_macro_names()
      close = difflib.get_close_matches(name, defined, n=1)
      hint = f"; did you mean {close[0]}?" if close else ""
      raise ValueError(f"--gin_param {param!r}: no macro {name} in the gin "
                       f"files{hint}") from None


def _check_experiment_fields():
  """`bertexp.experiment` takes any settings field by name (see
  bertexp.settings), so gin accepts any name there: here a name that is no
  field fails at parse time, as a typo anywhere else does."""
  import gin
  from bertexp import settings
  bound = gin.get_bindings("bertexp.experiment", resolve_references=False)
  settings.check_fields(set(bound) - set(settings.EXPERIMENT_PARAMETERS))


def _check_binding(param):
  """Parses one --gin_param alone; a ValueError naming it (and, for the most
  common mistake, an unquoted string, the fix) when it does not parse."""
  import gin
  try:
    gin.parse_config(param)
  except (SyntaxError, tokenize.TokenError) as e:
    reason = str(e.args[0] if e.args else e).splitlines()[0]
    name, _, value = param.partition("=")
    if "malformed node or string" in reason:
      raise ValueError(
          f"--gin_param {param!r}: {value.strip()} is not a value gin can "
          f"read; strings need quotes: --gin_param='{name.strip()}="
          f"\"{value.strip()}\"'") from None
    raise ValueError(f"--gin_param {param!r} does not parse: {reason}") \
        from None


class _DropIncludeMisses(logging.Filter):
  """gin logs an ERROR for every search path an include is not under."""

  def filter(self, record):
    return not (record.getMessage().startswith("Path not found") or
                record.getMessage().startswith("system_path_file_exists"))


@contextlib.contextmanager
def _quiet_include_search():
  root = logging.getLogger()
  quiet = _DropIncludeMisses()
  root.addFilter(quiet)
  try:
    yield
  finally:
    root.removeFilter(quiet)


def parse_gin(gin_files, gin_params):
  """Parses files + bindings; unknown names and missing macros fail here,
  before any TensorFlow work. Returns the config text to save."""
  import gin
  from bertexp import registry  # noqa: F401  (registers the configurables)
  from bertexp.tasks import catalog
  catalog.modules_named("task")   # and the tasks other packages declare
  gin.clear_config()
  gin_files = [resolve_gin_file(path) for path in gin_files]
  for path in gin_search_paths(gin_files):
    gin.add_config_file_search_path(path)
  try:
    with _quiet_include_search():
      gin.parse_config_files_and_bindings(gin_files, None, skip_unknown=False,
                                          finalize_config=False)
    _check_overrides_name_known_macros(gin_params)
    # Finalizing runs gin's check that every %gin.REQUIRED macro was set.
    try:
      gin.parse_config_files_and_bindings(None, gin_params, skip_unknown=False,
                                          finalize_config=True)
    except (SyntaxError, tokenize.TokenError):
      for param in gin_params:
        _check_binding(param)
      raise
    _check_experiment_fields()
  except OSError as e:   # a gin file (or an include) that does not exist
    raise FileNotFoundError(str(e).split(" Searched config paths")[0]) from None
  except tokenize.TokenError as e:   # e.g. an unterminated string or bracket
    raise SyntaxError(f"malformed gin file or --gin_param ({e.args[0]})") \
        from None
  return gin.config_str()
