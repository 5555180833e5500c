"""Readers: GLUE TSV layouts and any TSV/CSV/JSONL with named columns.

Each reader returns `Rows`: parallel lists of texts, raw labels, example ids
and the source line of each row, so that later errors can name the line.
"""
import csv
import dataclasses
import io
import json
from typing import List, Optional

from bertexp.util import fileio

csv.field_size_limit(1 << 30)


@dataclasses.dataclass
class Rows:
  """The columns read from one file: texts, labels, ids and line numbers."""
  path: str
  text_a: List[str]
  text_b: Optional[List[str]]
  labels: Optional[List[str]]    # raw label strings; None for test files
  example_ids: List[str]
  lines: List[int]               # 1-based line of each row in `path`
  skipped: List[int] = dataclasses.field(default_factory=list)  # lines left out

  def __len__(self):
    return len(self.text_a)


@dataclasses.dataclass(frozen=True)
class GlueSpec:
  """Where one GLUE task keeps its texts and labels."""
  name: str
  labels: Optional[tuple]          # None: regression
  text_columns: tuple              # header names of text a (and b)
  label_column: Optional[str]
  train: str
  evals: tuple                     # (split name, file name) pairs
  tests: tuple
  test_text_columns: tuple = ()
  id_column: str = "index"
  headerless_columns: Optional[dict] = None   # CoLA train/dev have no header
  # QQP's train/dev files have rows cut by stray line breaks; Model Garden
  # and google-research skip them. They are skipped, counted and logged.
  skip_malformed_rows: bool = False


_NLI = ("entailment", "not_entailment")
GLUE_TASKS = {
    "cola": GlueSpec(
        "cola", ("0", "1"), ("sentence",), "label", "train.tsv",
        (("eval", "dev.tsv"),), (("test", "test.tsv"),),
        headerless_columns={"sentence": 3, "label": 1, "index": None}),
    "sst-2": GlueSpec("sst-2", ("0", "1"), ("sentence",), "label", "train.tsv",
                      (("eval", "dev.tsv"),), (("test", "test.tsv"),)),
    "mrpc": GlueSpec(
        "mrpc", ("0", "1"), ("#1 String", "#2 String"), "Quality",
        "train.tsv", (("eval", "dev.tsv"),), (("test", "test.tsv"),),
        id_column="index"),
    "qqp": GlueSpec(
        "qqp", ("0", "1"), ("question1", "question2"), "is_duplicate",
        "train.tsv", (("eval", "dev.tsv"),), (("test", "test.tsv"),),
        id_column="id", skip_malformed_rows=True),
    "sts-b": GlueSpec(
        "sts-b", None, ("sentence1", "sentence2"), "score", "train.tsv",
        (("eval", "dev.tsv"),), (("test", "test.tsv"),)),
    "mnli": GlueSpec(
        "mnli", ("contradiction", "entailment", "neutral"),
        ("sentence1", "sentence2"), "gold_label", "train.tsv",
        (("eval", "dev_matched.tsv"), ("eval_mismatched", "dev_mismatched.tsv")),
        (("test", "test_matched.tsv"), ("test_mismatched", "test_mismatched.tsv"),
         ("ax", "diagnostic.tsv"))),
    "qnli": GlueSpec("qnli", _NLI, ("question", "sentence"), "label",
                     "train.tsv", (("eval", "dev.tsv"),), (("test", "test.tsv"),)),
    "rte": GlueSpec("rte", _NLI, ("sentence1", "sentence2"), "label",
                    "train.tsv", (("eval", "dev.tsv"),), (("test", "test.tsv"),)),
    "wnli": GlueSpec("wnli", ("0", "1"), ("sentence1", "sentence2"), "label",
                     "train.tsv", (("eval", "dev.tsv"),), (("test", "test.tsv"),)),
}
GLUE_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts": "sts-b",
                "mnli-mm": "mnli", "ax": "mnli"}


def glue_spec(task):
  """The file layout of a GLUE task (names and aliases as GLUE spells them)."""
  key = task.lower()
  key = GLUE_ALIASES.get(key, key)
  if key not in GLUE_TASKS:
    raise ValueError(f"unknown GLUE task {task!r}; expected one of "
                     f"{sorted(t.upper() for t in GLUE_TASKS)}")
  return GLUE_TASKS[key]


def _split_lines(path, text):
  """Physical lines without the trailing empty one; strips a UTF-8 BOM.

  Only "\n" (and "\r\n") end a line, as in google-research/bert's TSV
  reader: U+2028, U+0085 or a form feed inside a sentence are text.
  """
  if text.startswith("\ufeff"):
    text = text[1:]
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  lines = [line[:-1] if line.endswith("\r") else line for line in lines]
  if not lines:
    raise ValueError(f"{path}: empty file")
  return lines


def _column_getter(path, header, names):
  missing = [n for n in names if n not in header]
  if missing:
    raise ValueError(f"{path}:1: header has no column {missing} "
                     f"(columns: {header})")
  return [header.index(n) for n in names]


def _table_rows(path, delimiter):
  """Yields (line number, fields) with the header first; TSV without quoting."""
  text = fileio.read_text(path)
  lines = _split_lines(path, text)
  if delimiter == "\t":
    for number, line in enumerate(lines, 1):
      yield number, line.split("\t")
    return
  reader = csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter)
  try:
    for fields in reader:
      yield reader.line_num, fields
  except csv.Error as e:
    raise ValueError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None


def read_table(path, text_columns, label_column=None, id_column=None,
               positions=None, skip_malformed_rows=False, id_required=False):
  """Reads a TSV/CSV with a header (or fixed `positions` name -> index).

  Without an `id_column` in the header examples are numbered from 0, unless
  `id_required` (a column the user named), which makes it an error.

  A row whose column count differs from the header's is an error naming its
  line, or with skip_malformed_rows is left out and its line recorded in
  `Rows.skipped`.
  """
  delimiter = "," if path.lower().endswith(".csv") else "\t"
  rows = Rows(path, [], [] if len(text_columns) > 1 else None,
              [] if label_column else None, [], [])
  records = _table_rows(path, delimiter)
  wanted = list(text_columns) + ([label_column] if label_column else [])
  if positions is None:
    first = next(records, None)
    if first is None:
      raise ValueError(f"{path}: no header row")
    _, header = first
    indices = _column_getter(path, header, wanted)
    id_index = header.index(id_column) if id_column in header else None
    if id_required and id_index is None:
      raise ValueError(f"{path}: no column {id_column!r} (the id column) in "
                       f"the header {header}")
    width = len(header)
  else:
    indices = [positions[n] for n in wanted]
    id_index = positions.get(id_column) if id_column else None
    width = None
  for number, fields in records:
    if width is None:
      width = len(fields)
      if max(indices + [id_index or 0]) >= width:
        raise ValueError(f"{path}:{number}: expected at least "
                         f"{max(indices + [id_index or 0]) + 1} columns, "
                         f"found {width}")
    if len(fields) != width and skip_malformed_rows:
      rows.skipped.append(number)
      continue
    if len(fields) != width:
      raise ValueError(f"{path}:{number}: expected {width} columns, found "
                       f"{len(fields)}")
    values = [fields[i] for i in indices]
    rows.text_a.append(values[0])
    if rows.text_b is not None:
      rows.text_b.append(values[1])
    if label_column:
      rows.labels.append(values[-1].strip())
    rows.example_ids.append(fields[id_index] if id_index is not None
                            else str(len(rows.example_ids)))
    rows.lines.append(number)
  if not rows.text_a:
    raise ValueError(f"{path}: no data rows")
  return rows


def json_lines(path):
  """(line number, value) of each non-blank line of a JSON-lines file: the
  one JSONL reader of every `bertexp prepare` format. Lines end at "\n" only
  (a U+2028 inside a JSON string is text), a UTF-8 BOM is dropped.

  Raises:
    ValueError: a line that is not JSON, or nested too deep to read
      (naming path:line).
  """
  for number, line in enumerate(_split_lines(path, fileio.read_text(path)), 1):
    if not line.strip():
      continue
    try:
      yield number, json.loads(line)
    except (json.JSONDecodeError, RecursionError) as e:
      reason = (e.msg if isinstance(e, json.JSONDecodeError) else
                "nested too deep")
      raise ValueError(f"{path}:{number}: not valid JSON ({reason})") from None


def records(path):
  """(line number, {column: value}) of each row of a .jsonl/.json file (one
  object a line) or a .csv/.tsv file with a header row (values are
  strings; TSV fields are not quoted).

  Raises:
    ValueError: a line that is not a JSON object, a table row whose column
      count differs from the header's, or a file without rows (naming
      path:line).
  """
  if path.lower().endswith((".jsonl", ".json")):
    for number, record in json_lines(path):
      if not isinstance(record, dict):
        raise ValueError(f"{path}:{number}: expected a JSON object, found "
                         f"{type(record).__name__}")
      yield number, record
    return
  rows = _table_rows(path, "," if path.lower().endswith(".csv") else "\t")
  first = next(rows, None)
  if first is None:
    raise ValueError(f"{path}: no header row")
  header = first[1]
  for number, fields in rows:
    if len(fields) != len(header):
      raise ValueError(f"{path}:{number}: expected {len(header)} columns "
                       f"({header}), found {len(fields)}")
    yield number, dict(zip(header, fields))


def read_jsonl(path, text_columns, label_column=None, id_column=None,
               id_required=False):
  """Rows of a JSON-lines file, one object a line, columns by key."""
  rows = Rows(path, [], [] if len(text_columns) > 1 else None,
              [] if label_column else None, [], [])
  for number, record in json_lines(path):
    if not isinstance(record, dict):
      raise ValueError(f"{path}:{number}: expected a JSON object, found "
                       f"{type(record).__name__}")
    wanted = list(text_columns) + ([label_column] if label_column else []) + (
        [id_column] if id_required else [])
    missing = [c for c in wanted if c not in record]
    if missing:
      raise ValueError(f"{path}:{number}: missing field(s) {missing}")
    rows.text_a.append(str(record[text_columns[0]]))
    if rows.text_b is not None:
      rows.text_b.append(str(record[text_columns[1]]))
    if label_column:
      rows.labels.append(str(record[label_column]).strip())
    rows.example_ids.append(str(record.get(id_column, len(rows.example_ids))))
    rows.lines.append(number)
  if not rows.text_a:
    raise ValueError(f"{path}: no data rows")
  return rows


def read_any(path, text_columns, label_column=None, id_column=None,
             id_required=False):
  """Rows of a .jsonl/.json, .csv or .tsv file, by its extension."""
  if path.lower().endswith((".jsonl", ".json")):
    return read_jsonl(path, text_columns, label_column, id_column, id_required)
  return read_table(path, text_columns, label_column, id_column,
                    id_required=id_required)


def read_glue(spec, path, with_labels):
  """Reads one GLUE file; test files (with_labels False) carry ids instead."""
  label = spec.label_column if with_labels else None
  texts = spec.text_columns
  if spec.headerless_columns and with_labels:
    return read_table(path, texts, label, spec.id_column,
                      positions=spec.headerless_columns)
  return read_table(path, texts, label, spec.id_column,
                    skip_malformed_rows=spec.skip_malformed_rows)
