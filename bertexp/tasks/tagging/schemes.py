"""Entity tag schemes: IOB1, BIO (IOB2) and BIOES, read strictly.

A tag is `O` or `<prefix>-<TYPE>`. The schemes differ in where an entity's
first and last tokens are marked:
  IOB1  (CoNLL-2003's files): I-X everywhere; B-X to start an entity
        right after another entity of the same type (read anywhere as a
        start).
  BIO   (IOB2): B-X starts every entity, I-X continues it.
  BIOES: B-X starts, I-X continues, E-X ends a multi-token entity; S-X is a
        one-token entity.
Files are read as entity spans, checked against their scheme (an I-X after O
is an error in BIO and BIOES, a B-X with no end in BIOES...), and written
back in the scheme a task trains in.
"""
import dataclasses
from typing import Callable, List, Sequence

SCHEMES = ("IOB1", "BIO", "BIOES")
TRAIN_SCHEMES = ("BIO", "BIOES")
_PREFIXES = {"IOB1": "BI", "BIO": "BI", "BIOES": "BIES"}


@dataclasses.dataclass(frozen=True)
class Span:
  """An entity: tokens [start, end) of type `type`."""
  type: str
  start: int
  end: int


def split_tag(tag: str):
  """'B-PER' -> ('B', 'PER'); 'O' -> ('O', None); anything else -> None."""
  if tag == "O":
    return "O", None
  prefix, dash, entity_type = tag.partition("-")
  if not dash or len(prefix) != 1 or not entity_type:
    return None
  return prefix, entity_type


def check_scheme(scheme: str, allowed=SCHEMES) -> str:
  """`scheme` upper-cased ('IOB2' is 'BIO'); a ValueError when unknown."""
  name = {"IOB2": "BIO", "IOBES": "BIOES"}.get(scheme.upper(), scheme.upper())
  if name not in allowed:
    raise ValueError(f"unknown tag scheme {scheme!r}; expected one of "
                     f"{list(allowed)}")
  return name


def read_spans(tags: Sequence[str], scheme: str,
               where: Callable[[int], str]) -> List[Span]:
  """The entities of one sentence's tags, checked against `scheme`.

  Args:
    tags: the sentence's tags, one per token.
    scheme: one of SCHEMES.
    where: token index -> "file:line" for error messages.
  Returns:
    The spans, in order.
  Raises:
    ValueError: a tag that is not O or PREFIX-TYPE of the scheme, or a
      sequence the scheme does not allow (naming the file and line).
  """
  spans, open_span = [], None          # open_span: [type, start]
  allowed = _PREFIXES[scheme]

  def close(end):
    nonlocal open_span
    if open_span:
      spans.append(Span(open_span[0], open_span[1], end))
    open_span = None

  for i, tag in enumerate(tags):
    parts = split_tag(tag)
    if parts is None or (parts[0] != "O" and parts[0] not in allowed):
      raise ValueError(f"{where(i)}: tag {tag!r} is not O or "
                       f"{'/'.join(allowed)}-TYPE ({scheme} scheme)")
    prefix, entity_type = parts
    continues = open_span is not None and open_span[0] == entity_type
    if prefix == "O":
      if scheme == "BIOES" and open_span:
        raise ValueError(f"{where(i)}: O after an entity that was not ended "
                         f"with E-{open_span[0]} (BIOES scheme)")
      close(i)
    elif prefix == "B" or prefix == "S":
      if scheme == "BIOES" and open_span:
        raise ValueError(f"{where(i)}: {tag} inside an entity that was not "
                         f"ended with E-{open_span[0]} (BIOES scheme)")
      close(i)
      open_span = [entity_type, i]
      if prefix == "S":
        close(i + 1)
    else:                               # I or E
      if scheme == "IOB1" and not continues:
        close(i)
        open_span = [entity_type, i]
      elif not continues:
        raise ValueError(f"{where(i)}: {tag} does not continue an entity of "
                         f"type {entity_type} (after "
                         f"{tags[i - 1] if i else 'the sentence start'!r}; "
                         f"{scheme} scheme)")
      if prefix == "E":
        close(i + 1)
  if scheme == "BIOES" and open_span:
    raise ValueError(f"{where(len(tags) - 1)}: the sentence ends inside an "
                     f"entity not ended with E-{open_span[0]} (BIOES scheme)")
  close(len(tags))
  return spans


def write_tags(spans: Sequence[Span], length: int, scheme: str) -> List[str]:
  """Spans -> `length` tags in `scheme` (BIO or BIOES)."""
  tags = ["O"] * length
  for span in spans:
    size = span.end - span.start
    for k in range(span.start, span.end):
      tags[k] = f"I-{span.type}"
    tags[span.start] = f"B-{span.type}"
    if scheme == "BIOES":
      if size == 1:
        tags[span.start] = f"S-{span.type}"
      else:
        tags[span.end - 1] = f"E-{span.type}"
  return tags


def label_names(entity_types: Sequence[str], scheme: str) -> List[str]:
  """Tag names in label-id order: O, then each type's prefixes."""
  prefixes = "BIES" if scheme == "BIOES" else "BI"
  return ["O"] + [f"{p}-{t}" for t in entity_types for p in prefixes]


def continuation_tag(tag: str, scheme: str, last_piece: bool) -> str:
  """The tag of a word's later word piece when every piece is labelled
  (Hugging Face's `label_all_tokens`): the entity continues inside the word,
  so B-X/S-X become I-X, and in BIOES the word's last piece of an E-X or S-X
  word becomes E-X."""
  parts = split_tag(tag)
  if parts[0] == "O":
    return "O"
  prefix, entity_type = parts
  if scheme == "BIOES" and last_piece and prefix in "ES":
    return f"E-{entity_type}"
  return f"I-{entity_type}"


def first_piece_tag(tag: str, scheme: str, single_piece: bool) -> str:
  """The tag of a word's first piece when every piece is labelled: in BIOES
  a word of several pieces that ends an entity (E-X) or is one (S-X) does not
  end it at its first piece (I-X / B-X)."""
  if scheme != "BIOES" or single_piece or tag == "O":
    return tag
  prefix, entity_type = split_tag(tag)
  return {"E": f"I-{entity_type}", "S": f"B-{entity_type}"}.get(prefix, tag)
