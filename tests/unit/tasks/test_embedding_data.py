"""`bertexp prepare pairs` (bertexp/tasks/embedding/prepare.py, data.py):
the layouts it writes, the ids that keep duplicates out of the negatives,
the evaluation files in their usual forms, and one-line errors that name
the file and line with nothing written."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.data import pipeline
from bertexp.tasks.embedding import data


def _write(path, text):
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


def _jsonl(path, rows):
  return _write(path, "".join(json.dumps(r) + "\n" for r in rows))


def _records(path, width, label_type):
  decode = pipeline.record_decoder(width, label_type)
  batch = next(iter(tf.data.TFRecordDataset(path).batch(100)))
  return decode(batch)


def _prepare(tmp_path, vocab, *flags):
  return cli.main(["prepare", "pairs", "--task_name=t", f"--vocab_file={vocab}",
                   f"--output_dir={tmp_path}/out", "--max_seq_length=8",
                   *flags])


def test_pairs_with_negatives_end_to_end_and_duplicates_share_an_id(
    tmp_path, tiny_vocab):
  """Rows 0 and 2 have the same positive text: one document id, so
  neither is the other's negative; each row is query (4 tokens) then
  positive and negative (8 each)."""
  train = _jsonl(tmp_path / "train.jsonl", [
      {"query": "the movie", "positive": "a good film", "negative": "dull"},
      {"query": "a plot", "positive": "the plot is fun", "negative": "bad"},
      {"query": "was it good", "positive": "a good film", "negative": "not"},
  ])
  assert _prepare(tmp_path, tiny_vocab, f"--train_file={train}",
                  "--negative_columns=negative", "--max_query_length=4") == 0
  meta = json.load(open(tmp_path / "out" / "t_meta_data"))
  assert meta["splits"]["train"] == {"layout": "pairs", "documents": 2,
                                     "label_type": "int"}
  features, ids = _records(str(tmp_path / "out" / "t_train.tf_record"),
                           4 + 2 * 8, "int")
  assert ids.numpy().tolist() == [0, 1, 0]
  words = features["input_word_ids"].numpy()
  vocab = open(tiny_vocab).read().split("\n")
  piece = lambda row, start, n: [vocab[i] for i in row[start:start + n] if i]
  assert piece(words[0], 0, 4) == ["[CLS]", "the", "movie", "[SEP]"]
  assert piece(words[0], 4, 8) == ["[CLS]", "a", "good", "film", "[SEP]"]
  assert piece(words[0], 12, 8) == ["[CLS]", "dull", "[SEP]"]
  # "was it good": 3 pieces + 2 specials > 4: cut to fit.
  assert piece(words[2], 0, 4) == ["[CLS]", "was", "it", "[SEP]"]


def test_positive_id_column_decides_which_positives_are_one_document(tmp_path):
  path = _jsonl(tmp_path / "p.jsonl", [
      {"q": "a", "p": "same text", "doc": "x"},
      {"q": "b", "p": "same text", "doc": "y"},
      {"q": "c", "p": "other", "doc": "x"}])
  pairs = data.read_pairs(path, query_column="q", positive_column="p",
                          positive_id_column="doc")
  assert pairs.document_ids == [0, 1, 0]
  assert data.read_pairs(path, query_column="q",
                         positive_column="p").document_ids == [0, 0, 1]


def test_retrieval_evaluation_from_beir_files_and_trec_qrels(tmp_path,
                                                             tiny_vocab):
  """BEIR's corpus.jsonl (_id, title, text), queries.jsonl and a qrels TSV
  with a header; TREC qrels read the same. The eval records hold the
  queries then the corpus, labelled 0 / 1; a query judged with no relevant
  document is left out (no measure is defined for it)."""
  train = _write(tmp_path / "train.tsv",
                 "query\tpositive\nthe movie\ta good film\n")
  corpus = _jsonl(tmp_path / "corpus.jsonl", [
      {"_id": "d1", "title": "film", "text": "the plot"},
      {"_id": "d2", "title": "", "text": "a dull movie"},
      {"_id": "d3", "text": "fun"}])
  queries = _jsonl(tmp_path / "queries.jsonl", [
      {"_id": "q1", "text": "good plot"}, {"_id": "q2", "text": "bad"},
      {"_id": "q3", "text": "not judged"}])
  beir = _write(tmp_path / "qrels.tsv", "query-id\tcorpus-id\tscore\n"
                "q1\td1\t2\nq1\td3\t1\nq2\td2\t0\n")
  trec = _write(tmp_path / "qrels.txt", "q1 0 d1 2\nq1 0 d3 1\nq2 0 d2 0\n")
  assert data.read_qrels(trec) == data.read_qrels(beir) == {
      "q1": {"d1": 2, "d3": 1}, "q2": {"d2": 0}}
  assert _prepare(tmp_path, tiny_vocab, f"--train_file={train}",
                  f"--queries_file={queries}", f"--corpus_file={corpus}",
                  f"--qrels_file={beir}") == 0
  out = tmp_path / "out"
  ids = json.load(open(out / "t_eval_ids.json"))
  assert ids == {"queries": ["q1"], "corpus": ["d1", "d2", "d3"],
                 "qrels": {"q1": {"d1": 2, "d3": 1}}}
  features, labels = _records(str(out / "t_eval.tf_record"), 8, "int")
  assert labels.numpy().tolist() == [0, 1, 1, 1]
  vocab = open(tiny_vocab).read().split("\n")
  # The title joins the text.
  assert [vocab[i] for i in features["input_word_ids"].numpy()[1] if i] == [
      "[CLS]", "film", "the", "plot", "[SEP]"]


def test_scored_pairs_keep_their_scores_for_cosent(tmp_path, tiny_vocab):
  train = _write(tmp_path / "sts.csv", "s1,s2,score\nthe movie,a film,4.5\n"
                 "a plot,dull,0.25\n")
  assert _prepare(tmp_path, tiny_vocab, f"--train_file={train}",
                  f"--eval_file={train}", "--score_column=score",
                  "--text_columns=s1,s2") == 0
  meta = json.load(open(tmp_path / "out" / "t_meta_data"))
  assert meta["splits"]["eval"]["layout"] == "scored"
  _, scores = _records(str(tmp_path / "out" / "t_train.tf_record"), 16,
                       "float")
  np.testing.assert_allclose(scores.numpy(), [4.5, 0.25])


@pytest.mark.parametrize("name,content,flags,message", [
    ("a.jsonl", '{"query": "a", "positive": "b"}\n{"query": "c"}\n', [],
     "a.jsonl:2: expected a non-empty text in column 'positive'"),
    ("a.jsonl", '{"query": "a", "positive": "b"}\n[1]\n', [],
     "a.jsonl:2: expected a JSON object"),
    ("a.tsv", "query\tpositive\tneg\nx\ty\tz\nx\ty\n",
     ["--negative_columns=neg"], "a.tsv:3: expected 3 columns"),
    ("a.jsonl", '{"query": "a", "positive": "b", "n": ["c"]}\n'
     '{"query": "a", "positive": "b", "n": ["c", "d"]}\n',
     ["--negative_columns=n"], "a.jsonl:2: 2 negatives; every row needs as "
     "many as the first (1)"),
    ("a.csv", "text_a,text_b,score\nx,y,high\n", ["--score_column=score"],
     "a.csv:2: expected a number in column 'score', found 'high'"),
])
def test_a_bad_training_file_is_one_line_naming_its_line_and_writes_nothing(
    tmp_path, tiny_vocab, capsys, name, content, flags, message):
  path = _write(tmp_path / name, content)
  assert _prepare(tmp_path, tiny_vocab, f"--train_file={path}", *flags) != 0
  err = capsys.readouterr().err
  assert message in err and "Traceback" not in err
  assert not os.path.exists(tmp_path / "out")


def test_qrels_naming_a_document_outside_the_corpus_is_refused(tmp_path,
                                                               tiny_vocab,
                                                               capsys):
  """Checked before anything is written: not even the training records."""
  train = _write(tmp_path / "t.tsv", "query\tpositive\na\tb\n")
  corpus = _write(tmp_path / "c.tsv", "id\ttext\nd1\tthe film\n")
  queries = _write(tmp_path / "q.tsv", "id\ttext\nq1\ta plot\n")
  qrels = _write(tmp_path / "r.tsv", "query_id\tdoc_id\nq1\td9\n")
  assert _prepare(tmp_path, tiny_vocab, f"--train_file={train}",
                  f"--queries_file={queries}", f"--corpus_file={corpus}",
                  f"--qrels_file={qrels}") != 0
  assert ("r.tsv: query 'q1' judges document 'd9', which is not in" in
          capsys.readouterr().err)
  assert not os.path.exists(tmp_path / "out")


def test_pairs_as_evaluation_search_every_distinct_document_of_the_file():
  pairs = data.Pairs(queries=["q a", "q b", "q a"],
                     documents=[["d1", "n1"], ["d2", "d1"], ["d3", "n1"]],
                     document_ids=[0, 1, 2])
  found = data.retrieval_from_pairs(pairs)
  # n1 twice and d1 as row 1's negative: one document each.
  assert sorted(found.corpus.values()) == ["d1", "d2", "d3", "n1"]
  # The repeated query is one query with both positives relevant.
  assert found.queries == {"0": "q a", "1": "q b"}
  assert {found.corpus[d] for d in found.qrels["0"]} == {"d1", "d3"}
