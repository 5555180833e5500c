"""Gin's text without gin: a run's written gin files (config.gin,
operative_config.gin) read without parsing them (what another command needs
from a finished run), and error messages without gin's additions."""
import re
from typing import Dict, Set


def string_macros(text: str) -> Dict[str, str]:
  """{NAME: value} of the string macros (`NAME = 'value'`) of gin text,
  the last binding of a name winning. gin writes a value too long for one
  line after `NAME = \\` on the next line; those are read too."""
  unwrapped = re.sub(r"\\\n\s*", "", text)
  return dict(re.findall(r"^\s*(\w+)\s*=\s*['\"](.*?)['\"]\s*$", unwrapped,
                         flags=re.M))


def user_message(error: BaseException) -> str:
  """The error's own message, without the line gin appends to errors raised
  inside a configurable ("In call to configurable 'experiment' (<function
  ... at 0x...>)")."""
  return str(error).split("\n  In call to configurable")[0]


def references(text: str) -> Set[str]:
  """The configurables gin text refers to (`@bertexp.ClassificationTask()`
  -> "bertexp.ClassificationTask"), as written."""
  return set(re.findall(r"@([\w.]+)\(\)", text))


def binds(text: str, parameter: str) -> bool:
  """Whether gin `text` binds `parameter` ("experiment.task"), with or
  without a module before it."""
  return re.search(r"^\s*([\w.]*\.)?" + re.escape(parameter) + r"\s*=", text,
                   re.M) is not None


def refers_to(referenced: Set[str], name: str) -> bool:
  """Whether `name` ("module.Class") is among `referenced` (from
  `references`), which may name it with its module or without."""
  return name in referenced or name.rsplit(".", 1)[-1] in referenced


# The first line of a run's recorded gin files: the working directory the
# run's relative paths (BERT_CONFIG_FILE = ".cache/...") were given from.
_WORKING_DIRECTORY = "# bertexp: relative paths below are relative to "


def with_working_directory(text: str, directory: str) -> str:
  """`text` (a run's gin) headed by the working directory it was given in,
  so its relative paths still resolve from another folder (`run_path`)."""
  return f"{_WORKING_DIRECTORY}{directory}\n{text}"


def run_path(text: str, value: str) -> str:
  """A path `value` bound in a run's recorded gin `text`, as the run meant
  it: a relative path joined to the working directory the header names
  (unchanged without a header, or when absolute or with a scheme)."""
  found = re.match(re.escape(_WORKING_DIRECTORY) + r"(.*)$", text, re.M)
  if not value or not found or "://" in value or value.startswith("/"):
    return value
  return found.group(1).rstrip("/") + "/" + value


def recorded_macro(text: str, name: str):
  """A string macro of a run's recorded gin `text` as a path the run meant
  (`run_path`), or None when it is not bound."""
  value = string_macros(text).get(name)
  return None if value is None else run_path(text, value)
