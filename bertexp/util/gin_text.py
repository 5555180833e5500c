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


def refers_to(referenced: Set[str], name: str) -> bool:
  """Whether `name` ("module.Class") is among `referenced` (from
  `references`), which may name it with its module or without."""
  return name in referenced or name.rsplit(".", 1)[-1] in referenced
