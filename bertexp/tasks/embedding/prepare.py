"""`bertexp prepare pairs`: sentence-embedding data -> TFRecords + meta data.

Training data is one of two layouts (see `data` for the files):
  pairs   (query, positive[, hard negatives...]): in-batch negatives;
  scored  (text_a, text_b, score) with --score_column: CoSENT (STS).
Evaluation is retrieval or scoring:
  --queries_file + --corpus_file + --qrels_file: every query searched over
      the whole corpus (MRR@10, recall@k, nDCG@10);
  --eval_file of pairs: each query over the file's distinct documents, its
      positive relevant; of scored pairs: Spearman of the cosines.

Records: each text packed alone ([CLS] text [SEP], the tokenizer's single
layout) and the texts of a row stored end to end: a training pair's query
(--max_query_length tokens) then its documents (--max_seq_length each);
an evaluation's queries then its corpus, one text a row (--max_seq_length),
labelled 0 (query) or 1 (document). Everything is read and checked before
anything is written.
"""
import os

from bertexp.tasks import prepare_command

TEXT_FEATURES = ("input_word_ids", "input_mask", "input_type_ids")


def _pack(tokenizer, texts, length):
  """({feature: [n, length] int32}, truncated count) of single texts."""
  from bertexp.data import tokenization
  return tokenization.pack(tokenizer, tokenizer.tokenize(list(texts)), None,
                           length)


def _rows(tokenizer, columns):
  """Texts of each row end to end: columns [(texts [n], length)] ->
  ({feature: [n, sum of lengths]}, truncated count)."""
  import numpy as np
  parts, truncated = [], 0
  for texts, length in columns:
    packed, cut = _pack(tokenizer, texts, length)
    parts.append(packed)
    truncated += cut
  return {name: np.concatenate([p[name] for p in parts], axis=1)
          for name in TEXT_FEATURES}, truncated


def _pairs_split(tokenizer, pairs, query_length, length):
  import numpy as np
  count = len(pairs.documents[0])
  features, truncated = _rows(tokenizer, [(pairs.queries, query_length)] + [
      ([docs[i] for docs in pairs.documents], length) for i in range(count)])
  features["label_ids"] = np.asarray(pairs.document_ids, np.int64)
  return features, truncated, {"layout": "pairs", "documents": count,
                               "label_type": "int"}


def _scored_split(tokenizer, scored, length):
  import numpy as np
  features, truncated = _rows(tokenizer, [(scored.text_a, length),
                                          (scored.text_b, length)])
  features["label_ids"] = np.asarray(scored.scores, np.float32)
  return features, truncated, {"layout": "scored", "documents": 1,
                               "label_type": "float"}


def _retrieval_split(tokenizer, retrieval, length):
  import numpy as np
  texts = list(retrieval.queries.values()) + list(retrieval.corpus.values())
  features, truncated = _rows(tokenizer, [(texts, length)])
  features["label_ids"] = np.array([0] * len(retrieval.queries) +
                                   [1] * len(retrieval.corpus), np.int64)
  return features, truncated, {
      "layout": "retrieval", "documents": 0, "label_type": "int",
      "queries": len(retrieval.queries), "corpus": len(retrieval.corpus)}


def _read(*, train_file, eval_file, queries_file, corpus_file, qrels_file,
          score_column, text_columns, columns):
  """{split: what to write} of every input file, read and checked."""
  from bertexp.tasks.embedding import data
  read = (lambda path: data.read_scored(path, text_columns=text_columns,
                                        score_column=score_column)
          ) if score_column else (lambda path: data.read_pairs(path, **columns))
  splits = {"train": read(train_file)}
  retrieval_files = (queries_file, corpus_file, qrels_file)
  if any(retrieval_files) and not all(retrieval_files):
    raise ValueError("retrieval evaluation needs --queries_file, "
                     "--corpus_file and --qrels_file together")
  if eval_file and any(retrieval_files):
    raise ValueError("give --eval_file or the retrieval files "
                     "(--queries_file, --corpus_file, --qrels_file), not both")
  if all(retrieval_files):
    splits["eval"] = data.checked_retrieval(
        data.read_texts(queries_file, "query"),
        data.read_texts(corpus_file, "document"),
        data.read_qrels(qrels_file), retrieval_files)
  elif eval_file:
    found = read(eval_file)
    splits["eval"] = (found if score_column else
                      data.retrieval_from_pairs(found))
  return splits


def prepare_pairs(*, task_name, output_dir, vocab_file, max_seq_length,
                  max_query_length=None, do_lower_case=True,
                  max_position_embeddings=None, tokenizer_family=None,
                  keep_accents=False, train_file, eval_file=None,
                  queries_file=None, corpus_file=None, qrels_file=None,
                  score_column=None, text_columns=("text_a", "text_b"),
                  **columns):
  """Writes <task>_train.tf_record (and <task>_eval.tf_record with
  <task>_eval_ids.json: the evaluation's query ids, corpus ids and qrels)
  and <task>_meta_data; returns the meta data.

  Args:
    columns: query_column, positive_column, negative_columns,
      positive_id_column of the pairs layout (see data.read_pairs).
  Raises:
    ValueError: a bad file (naming path:line), files that disagree, or
      lengths above max_position_embeddings.
  """
  import numpy as np
  from bertexp.data import records
  from bertexp.data import tokenization
  from bertexp.model.encoders import tokenizers
  from bertexp.data import windows
  from bertexp.util import fileio
  query_length = max_query_length or max_seq_length
  if score_column and query_length != max_seq_length:
    raise ValueError("--max_query_length is for query/document pairs; "
                     "scored pairs use --max_seq_length for both texts")
  for length in (max_seq_length, query_length):
    windows.check_lengths(length, max_position_embeddings, None)
  splits = _read(train_file=train_file, eval_file=eval_file,
                 queries_file=queries_file, corpus_file=corpus_file,
                 qrels_file=qrels_file, score_column=score_column,
                 text_columns=text_columns, columns=columns)
  tokenizer = tokenizers.load(vocab_file, do_lower_case, tokenizer_family,
                                keep_accents)
  meta = {"task": task_name, "max_seq_length": max_seq_length,
          "max_query_length": query_length,
          "vocab_file": os.path.abspath(vocab_file),
          "do_lower_case": do_lower_case, "vocab_size": len(tokenizer.vocab),
          "splits": {}, "split_sizes": {}, "truncated_texts": {},
          **tokenization.meta_fields(tokenizer_family, keep_accents)}
  encoded = {}
  for split, found in splits.items():
    if hasattr(found, "qrels"):
      encoded[split] = _retrieval_split(tokenizer, found, max_seq_length)
    elif score_column:
      encoded[split] = _scored_split(tokenizer, found, max_seq_length)
    else:
      encoded[split] = _pairs_split(tokenizer, found, query_length,
                                    max_seq_length)
  fileio.makedirs(output_dir)
  for split, (features, truncated, layout) in encoded.items():
    features["example_id"] = np.arange(len(features["label_ids"]))
    writer = records.RecordWriter(fileio.join(
        output_dir, f"{task_name}_{split}.tf_record"))
    writer.write_batch(features)
    writer.commit()
    meta["splits"][split] = layout
    meta["split_sizes"][split] = len(features["label_ids"])
    meta["truncated_texts"][split] = truncated
    if layout["layout"] == "retrieval":
      found = splits[split]
      fileio.write_json(fileio.join(output_dir, f"{task_name}_{split}_ids.json"),
                        {"queries": list(found.queries),
                         "corpus": list(found.corpus), "qrels": found.qrels})
  fileio.write_json(fileio.join(output_dir, f"{task_name}_meta_data"), meta)
  return meta


def _arguments(parser):
  parser.add_argument("--task_name", required=True)
  parser.add_argument("--train_file", required=True)
  parser.add_argument("--eval_file", help="pairs (retrieval over its "
                      "documents) or scored pairs (Spearman)")
  parser.add_argument("--queries_file", help="retrieval evaluation: id, text")
  parser.add_argument("--corpus_file", help="retrieval evaluation: id, text "
                      "(and title)")
  parser.add_argument("--qrels_file", help="retrieval evaluation: query id, "
                      "document id (and grade), or TREC qrels")
  parser.add_argument("--query_column", default="query")
  parser.add_argument("--positive_column", default="positive")
  parser.add_argument("--negative_columns", default="",
                      help="hard negatives' columns, comma separated (JSONL: "
                      "a column may hold a list)")
  parser.add_argument("--positive_id_column",
                      help="the positive's document id (default: its text)")
  parser.add_argument("--score_column", help="scored pairs (STS): the score "
                      "column; the texts are --text_columns")
  parser.add_argument("--text_columns", default="text_a,text_b",
                      help="scored pairs' two text columns")
  parser.add_argument("--max_query_length", type=int,
                      help="query tokens of pairs (default --max_seq_length)")


def _run(args):
  text_columns = [c.strip() for c in args.text_columns.split(",")]
  if len(text_columns) != 2:
    raise ValueError(f"--text_columns={args.text_columns}: expected two "
                     "column names")
  meta = prepare_pairs(
      task_name=args.task_name, train_file=args.train_file,
      eval_file=args.eval_file, queries_file=args.queries_file,
      corpus_file=args.corpus_file, qrels_file=args.qrels_file,
      score_column=args.score_column, text_columns=text_columns,
      max_query_length=args.max_query_length,
      query_column=args.query_column, positive_column=args.positive_column,
      negative_columns=[c.strip() for c in args.negative_columns.split(",")
                        if c.strip()],
      positive_id_column=args.positive_id_column,
      **prepare_command.text_options(args))
  layouts = {split: layout["layout"] for split, layout in meta["splits"].items()}
  print(f"prepared {meta['task']}: {meta['split_sizes']} rows ({layouts}), "
        f"truncated texts {meta['truncated_texts']}", flush=True)


COMMANDS = (prepare_command.PrepareCommand(
    name="pairs", help="sentence-embedding pairs (query, positive[, "
    "negatives]) or scored pairs, with a retrieval evaluation: JSONL, CSV, "
    "TSV", add_arguments=_arguments, run=_run),)
