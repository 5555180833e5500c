"""Readers of token-tagged text: CoNLL columns, CoNLL-U, JSONL, People's Daily.

Every reader returns `Sentence`s: tokens, their tags (None when the file has
none), and the line of each token, so later checks (an unknown tag, a tag
sequence the scheme forbids) can name the file and line.

  conll:         one token per line, columns split by tabs (or by spaces when a
                 line has no tab); a blank line ends a sentence; `-DOCSTART-`
                 lines start a document. Choose the token and tag columns.
  conllu:        Universal Dependencies' CoNLL-U: `#` comments, multi-word
                 ranges (1-2) and empty nodes (1.1) skipped; the tag is the
                 UPOS column (or XPOS).
  jsonl:         one JSON object per line, {"tokens": [...], "tags": [...]}
                 ("tags" optional for text to predict).
  peoples_daily: People's Daily 1998 as distributed (word/POS separated by
                 spaces, one paragraph per line, `[w/n w/n]nt` compounds). A
                 leading `19980101-01-001-001/m` token names the document.
                 Tagged per character: nr (person; consecutive nr words such as
                 the surname and the given name are one person) -> PER,
                 ns -> LOC, nt -> ORG, compounds by their bracket's tag.
"""
import dataclasses
import re
from typing import List, Optional

from bertexp.data import readers
from bertexp.data import tokenization
from bertexp.tasks.tagging import schemes as tag_schemes
from bertexp.util import fileio

FORMATS = ("conll", "conllu", "jsonl", "peoples_daily")
PEOPLES_DAILY_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
_DOCUMENT_ID = re.compile(r"^(\d{8}-\d{2}-\d{3})-\d{3}/m$")
_COMPOUND_END = re.compile(r"^(.*)\]([a-z]+)$")


@dataclasses.dataclass
class Sentence:
  """One sentence of a tagged file.

  Attributes:
    tokens: the words (People's Daily: the characters).
    tags: their tags, or None when the file has none.
    lines: the file line of each token (1-based).
    path: the file.
    document: the document it belongs to ("" when the format has none).
  """
  tokens: List[str]
  tags: Optional[List[str]]
  lines: List[int]
  path: str
  document: str = ""

  def where(self, i: int) -> str:
    """'file:line' of token i."""
    return f"{self.path}:{self.lines[min(i, len(self.lines) - 1)]}"


def read(path: str, file_format: str, *, token_column: int = 0,
         tag_column: int = -1, conllu_tag: str = "upos") -> List[Sentence]:
  """The sentences of `path` in `file_format` (one of FORMATS).

  Raises:
    ValueError: an unknown format, or a malformed line (naming file:line).
  """
  if file_format == "conll":
    return read_conll(path, token_column, tag_column)
  if file_format == "conllu":
    return read_conllu(path, conllu_tag)
  if file_format == "jsonl":
    return read_jsonl(path)
  if file_format == "peoples_daily":
    return read_peoples_daily(path)
  raise ValueError(f"unknown tagging format {file_format!r}; expected one of "
                   f"{list(FORMATS)}")


def _lines(path):
  text = fileio.read_text(path)
  if text.startswith("\ufeff"):
    text = text[1:]
  return enumerate(text.splitlines(), 1)


def read_conll(path, token_column=0, tag_column=-1):
  """CoNLL columns. tag_column None: the file has no tags (text to predict).
  Every token line must have the first line's column count."""
  sentences, current, document, width = [], None, "", None
  for number, line in _lines(path):
    if not line.strip():
      current = None
      continue
    columns = line.split("\t") if "\t" in line else line.split()
    if columns[0] == "-DOCSTART-":
      document, current = f"{path}:{number}", None
      continue
    if width is None:
      width = len(columns)
      for column in (token_column, tag_column):
        if column is not None and not -width <= column < width:
          raise ValueError(f"{path}:{number}: column {column} does not exist "
                           f"in lines of {width} columns")
    if len(columns) != width:
      raise ValueError(f"{path}:{number}: {len(columns)} columns, expected "
                       f"{width} (as on the first token line)")
    if current is None:
      current = Sentence([], [] if tag_column is not None else None, [],
                         path, document)
      sentences.append(current)
    current.tokens.append(columns[token_column].strip())
    current.lines.append(number)
    if tag_column is not None:
      current.tags.append(columns[tag_column].strip())
  return sentences


def read_conllu(path, tag="upos"):
  """CoNLL-U, tags from the UPOS (or XPOS) column."""
  column = {"upos": 3, "xpos": 4}.get(tag)
  if column is None:
    raise ValueError(f"CoNLL-U tag column {tag!r}: expected upos or xpos")
  sentences, current, document = [], None, ""
  for number, line in _lines(path):
    if not line.strip():
      current = None
      continue
    if line.startswith("#"):
      if line.startswith("# newdoc"):
        document = line.partition("=")[2].strip() or f"{path}:{number}"
      continue
    columns = line.split("\t")
    if len(columns) != 10:
      raise ValueError(f"{path}:{number}: {len(columns)} tab-separated "
                       "columns, expected CoNLL-U's 10")
    if "-" in columns[0] or "." in columns[0]:
      continue                       # multi-word token range / empty node
    if current is None:
      current = Sentence([], [], [], path, document)
      sentences.append(current)
    current.tokens.append(columns[1])
    current.tags.append(columns[column])
    current.lines.append(number)
  return sentences


def read_jsonl(path):
  """{"tokens": [...], "tags": [...]} per line; "tags" may be absent."""
  sentences = []
  for number, record in readers.json_lines(path):
    tokens = record.get("tokens") if isinstance(record, dict) else None
    if not isinstance(tokens, list) or not all(
        isinstance(t, str) for t in tokens):
      raise ValueError(f'{path}:{number}: expected {{"tokens": [strings], '
                       '"tags": [strings]}')
    tags = record.get("tags")
    if tags is not None and (not isinstance(tags, list) or len(tags) != len(
        tokens) or not all(isinstance(t, str) for t in tags)):
      raise ValueError(f"{path}:{number}: \"tags\" must be a list of "
                       f"{len(tokens)} strings, one per token")
    if tokens:
      sentences.append(Sentence(tokens, tags, [number] * len(tokens), path,
                                str(record.get("document", ""))))
  return sentences


def _peoples_daily_words(path, number, line):
  """(word, entity type or None) of one line; compounds `[a/n b/n]nt` are one
  word of their bracket's type; adjacent nr words are one person."""
  words, compound, document = [], None, ""
  items = line.split()
  if items and _DOCUMENT_ID.match(items[0]):
    document = _DOCUMENT_ID.match(items[0]).group(1)
    items = items[1:]
  for item in items:
    # "[中央/n" opens a compound; "[/w" is the bracket itself.
    opens = item.startswith("[") and bool(item[1:].rpartition("/")[0])
    if opens:
      compound, item = [], item[1:]
    closing = _COMPOUND_END.match(item) if compound is not None else None
    if closing:
      item = closing.group(1)
    word, slash, pos = item.rpartition("/")
    if not slash or not word or not pos:
      raise ValueError(f"{path}:{number}: {item!r} is not word/POS "
                       "(People's Daily format)")
    if compound is not None:
      compound.append(word)
      if closing:
        words.append(("".join(compound),
                      PEOPLES_DAILY_TYPES.get(closing.group(2))))
        compound = None
      continue
    words.append((word, PEOPLES_DAILY_TYPES.get(pos)))
  if compound is not None:
    raise ValueError(f"{path}:{number}: a '[' compound is not closed with "
                     "']tag' on its line")
  return words, document


def read_peoples_daily(path):
  """People's Daily word/POS lines -> per-character BIO sentences."""
  sentences = []
  for number, line in _lines(path):
    words, document = _peoples_daily_words(path, number, line)
    if not words:
      continue
    chars, spans, previous = [], [], None
    for word, entity_type in words:
      start = len(chars)
      chars.extend(word)
      if entity_type and previous and previous.type == entity_type == "PER" \
          and previous.end == start:
        spans[-1] = previous = tag_schemes.Span("PER", previous.start,
                                                len(chars))
      elif entity_type:
        previous = tag_schemes.Span(entity_type, start, len(chars))
        spans.append(previous)
      else:
        previous = None
    tags = tag_schemes.write_tags(spans, len(chars), "BIO")
    sentences.append(Sentence(chars, tags, [number] * len(chars), path,
                              document))
  return sentences


def text_and_offsets(tokens):
  """The sentence as text and each token's [start, end) character offsets:
  tokens joined by a space, except next to a CJK character (Chinese is
  written without spaces)."""
  text, offsets = [], []
  length = 0
  for i, token in enumerate(tokens):
    if i and token and text[-1] and not (
        tokenization.is_cjk(text[-1][-1]) or tokenization.is_cjk(token[0])):
      text.append(" ")
      length += 1
    offsets.append((length, length + len(token)))
    text.append(token)
    length += len(token)
  return "".join(text), offsets
