"""The files `bertexp prepare pairs` reads, each checked row by row.

Every file is .jsonl/.json (one object a line), .csv or .tsv (a header
row); columns are named by flags. An error names the file and line.

  training pairs   query, positive[, negatives...] and optionally the
                   positive's document id: two rows whose positives share an
                   id (or, without ids, the same text) hold one document, so
                   neither counts it as the other's negative;
  scored pairs     text_a, text_b, a score (STS): only the order of scores
                   matters (CoSENT, Spearman);
  corpus           id, text[, title] (BEIR's corpus.jsonl: _id, title,
                   text): title and text joined by a space;
  queries          id, text (BEIR's queries.jsonl: _id, text);
  qrels            query id, document id[, grade] (tables with a header:
                   query_id / query-id / qid, doc_id / corpus-id / docid,
                   relevance / score / grade), or TREC's header-less
                   "qid iteration docid grade" lines.
"""
import dataclasses
from typing import Dict, List, Optional, Sequence

from bertexp.data import readers
from bertexp.util import fileio

ID_COLUMNS = ("id", "_id")
QUERY_ID_COLUMNS = ("query_id", "query-id", "qid")
DOC_ID_COLUMNS = ("doc_id", "corpus-id", "docid", "corpus_id")
GRADE_COLUMNS = ("relevance", "score", "grade", "label")


@dataclasses.dataclass
class Pairs:
  """Training pairs: queries[i]'s positive is documents[i][0]; the rest of
  documents[i] are its hard negatives (the same count on every row).
  document_ids[i]: the positive's document (equal ids, one document)."""
  queries: List[str]
  documents: List[List[str]]
  document_ids: List[int]


@dataclasses.dataclass
class ScoredPairs:
  """(text_a[i], text_b[i]) scored scores[i]."""
  text_a: List[str]
  text_b: List[str]
  scores: List[float]


@dataclasses.dataclass
class Retrieval:
  """An evaluation: queries {id: text}, corpus {id: text}, qrels {query id:
  {document id: grade}} (every judged query has a text; every judged
  document is in the corpus)."""
  queries: Dict[str, str]
  corpus: Dict[str, str]
  qrels: Dict[str, Dict[str, int]]


def _text(record, column, where):
  value = record.get(column)
  if not isinstance(value, str) or not value.strip():
    raise ValueError(f"{where}: expected a non-empty text in column "
                     f"{column!r}")
  return value


def _first_present(record, names, where, what):
  for name in names:
    if name in record:
      return name
  raise ValueError(f"{where}: no {what} column (one of {list(names)})")


def _negatives(record, columns, where):
  """A row's hard negatives: each named column's text, or a JSON list."""
  found = []
  for column in columns:
    value = record.get(column)
    if isinstance(value, list):
      if not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{where}: expected {column!r} to be a list of "
                         "non-empty texts")
      found.extend(value)
    else:
      found.append(_text(record, column, where))
  return found


def read_pairs(path, *, query_column="query", positive_column="positive",
               negative_columns: Sequence[str] = (),
               positive_id_column: Optional[str] = None) -> Pairs:
  """Training pairs (see Pairs).

  Raises:
    ValueError: a missing or empty text, rows with different numbers of
      negatives, or a file without rows (naming path:line).
  """
  pairs, ids = Pairs([], [], []), {}
  for number, record in readers.records(path):
    where = f"{path}:{number}"
    positive = _text(record, positive_column, where)
    negatives = _negatives(record, negative_columns, where)
    if pairs.documents and len(negatives) != len(pairs.documents[0]) - 1:
      raise ValueError(f"{where}: {len(negatives)} negatives; every row needs "
                       f"as many as the first ({len(pairs.documents[0]) - 1})")
    key = (str(_first_text_or_id(record, positive_id_column, where))
           if positive_id_column else positive)
    pairs.queries.append(_text(record, query_column, where))
    pairs.documents.append([positive] + negatives)
    pairs.document_ids.append(ids.setdefault(key, len(ids)))
  if not pairs.queries:
    raise ValueError(f"{path}: no rows")
  return pairs


def _first_text_or_id(record, column, where):
  value = record.get(column)
  if value is None or str(value).strip() == "":
    raise ValueError(f"{where}: expected a document id in column {column!r}")
  return value


def read_scored(path, *, text_columns=("text_a", "text_b"),
                score_column="score") -> ScoredPairs:
  """Scored pairs (see ScoredPairs).

  Raises:
    ValueError: a missing text, a score that is not a finite number, or a
      file without rows (naming path:line).
  """
  pairs = ScoredPairs([], [], [])
  for number, record in readers.records(path):
    where = f"{path}:{number}"
    pairs.text_a.append(_text(record, text_columns[0], where))
    pairs.text_b.append(_text(record, text_columns[1], where))
    pairs.scores.append(_number(record.get(score_column), score_column, where))
  if not pairs.scores:
    raise ValueError(f"{path}: no rows")
  return pairs


def _number(value, column, where):
  try:
    number = float(value)
  except (TypeError, ValueError):
    number = float("nan")
  if isinstance(value, bool) or number != number or abs(number) == float("inf"):
    raise ValueError(f"{where}: expected a number in column {column!r}, "
                     f"found {value!r}")
  return number


def read_texts(path, what) -> Dict[str, str]:
  """{id: text} of a corpus or queries file (see the module).

  Raises:
    ValueError: no id column, an empty text, an id seen twice, or no rows.
  """
  texts = {}
  for number, record in readers.records(path):
    where = f"{path}:{number}"
    key = str(record[_first_present(record, ID_COLUMNS, where, "id")])
    text = _text(record, "text", where)
    title = record.get("title")
    if isinstance(title, str) and title.strip():
      text = f"{title} {text}"
    if key in texts:
      raise ValueError(f"{where}: {what} id {key!r} seen twice")
    texts[key] = text
  if not texts:
    raise ValueError(f"{path}: no rows")
  return texts


def read_qrels(path) -> Dict[str, Dict[str, int]]:
  """{query id: {document id: grade}} (see the module; grade 1 when the
  file has none).

  Raises:
    ValueError: a row without a query or document id, or a grade that is
      not an integer (naming path:line).
  """
  lines = fileio.read_text(path).lstrip("\ufeff").splitlines()
  first = lines[0].split() if lines else []
  if len(first) == 4 and not (set(first) & set(QUERY_ID_COLUMNS)):
    return _trec_qrels(path, lines)
  qrels = {}
  for number, record in readers.records(path):
    where = f"{path}:{number}"
    query = record[_first_present(record, QUERY_ID_COLUMNS, where, "query id")]
    document = record[_first_present(record, DOC_ID_COLUMNS, where,
                                     "document id")]
    grade_column = next((c for c in GRADE_COLUMNS if c in record), None)
    grade = 1 if grade_column is None else _grade(record[grade_column], where)
    qrels.setdefault(str(query), {})[str(document)] = grade
  if not qrels:
    raise ValueError(f"{path}: no judgements")
  return qrels


def _grade(value, where):
  text = str(value).strip()
  if not text.lstrip("-").isdigit():
    raise ValueError(f"{where}: expected an integer grade, found {value!r}")
  return int(text)


def _trec_qrels(path, lines):
  qrels = {}
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    fields = line.split()
    if len(fields) != 4:
      raise ValueError(f"{path}:{number}: expected TREC qrels 'qid iteration "
                       f"docid grade', found {len(fields)} fields")
    qrels.setdefault(fields[0], {})[fields[2]] = _grade(
        fields[3], f"{path}:{number}")
  return qrels


def retrieval_from_pairs(pairs: Pairs) -> Retrieval:
  """An evaluation from pairs: each query against every distinct document
  of the file (positives by document id; a negative whose text is a
  positive's is that document), its positives relevant. Queries that
  repeat a text are one query with all their positives."""
  corpus, by_text, by_id = {}, {}, {}

  def add(text, doc_id=None):
    key = by_id.get(doc_id) or by_text.get(text) or str(len(corpus))
    corpus[key] = text
    by_text.setdefault(text, key)
    if doc_id is not None:
      by_id[doc_id] = key
    return key
  positives = [add(docs[0], doc_id)
               for docs, doc_id in zip(pairs.documents, pairs.document_ids)]
  for documents in pairs.documents:
    for text in documents[1:]:
      add(text)
  queries, qrels, query_key = {}, {}, {}
  for query, positive in zip(pairs.queries, positives):
    key = query_key.setdefault(query, str(len(query_key)))
    queries[key] = query
    qrels.setdefault(key, {})[positive] = 1
  return Retrieval(queries, corpus, qrels)


def checked_retrieval(queries, corpus, qrels, sources) -> Retrieval:
  """The three files of an evaluation, checked against each other.

  Raises:
    ValueError: a judged query without a text, a judged document not in the
      corpus, or no query with a relevant document (naming the file).
  """
  queries_file, corpus_file, qrels_file = sources
  for query, judged in qrels.items():
    if query not in queries:
      raise ValueError(f"{qrels_file}: query {query!r} is not in "
                       f"{queries_file}")
    missing = [doc for doc in judged if doc not in corpus]
    if missing:
      raise ValueError(f"{qrels_file}: query {query!r} judges document "
                       f"{missing[0]!r}, which is not in {corpus_file}")
  judged = {q: docs for q, docs in qrels.items()
            if any(grade > 0 for grade in docs.values())}
  if not judged:
    raise ValueError(f"{qrels_file}: no query has a relevant document "
                     "(grade > 0)")
  return Retrieval({q: queries[q] for q in judged}, corpus, judged)
