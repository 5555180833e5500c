"""Rows -> TFRecords of packed ids + `{task}_meta_data` JSON.

Record features (names are the encoder's input names, end to end):
  input_word_ids, input_mask, input_type_ids: int64 [S]
  label_ids: int64 [1] (classification) or float [1] (regression)
  example_id: int64 [1], the file's integer id (GLUE `index`) or the row's
    position in its file; text ids ("q17") are kept in `<record file>.ids.txt`
    and written back into the submission by --mode=predict.
  document_id: int64 [1], with --doc_stride only: the row a window comes
    from (a long text is several windows, in order).
"""
import logging

import numpy as np
import tensorflow as tf

from bertexp.data import folds as folds_lib
from bertexp.data.meta import UNLABELLED
from bertexp.data import readers
from bertexp.data import records
from bertexp.data import tokenization
from bertexp.model.encoders import tokenizers
from bertexp.data import windows
from bertexp.util import fileio

_BATCH = 20000


def encode_labels(rows, label_names, regression):
  """Raw label strings -> int ids or floats; errors name file and line."""
  if rows.labels is None:
    return np.zeros(len(rows), np.float32 if regression else np.int64)
  if regression:
    values = np.zeros(len(rows), np.float32)
    for i, raw in enumerate(rows.labels):
      try:
        values[i] = float(raw)
      except ValueError:
        raise ValueError(f"{rows.path}:{rows.lines[i]}: regression label "
                         f"{raw!r} is not a number") from None
      if not np.isfinite(values[i]):
        raise ValueError(f"{rows.path}:{rows.lines[i]}: regression label "
                         f"{raw!r} is not finite (or overflows float32)")
    return values
  index = {name: i for i, name in enumerate(label_names)}
  ids = np.zeros(len(rows), np.int64)
  for i, raw in enumerate(rows.labels):
    if raw not in index:
      raise ValueError(f"{rows.path}:{rows.lines[i]}: unknown label {raw!r}; "
                       f"expected one of {list(label_names)}")
    ids[i] = index[raw]
  return ids


def _integer_ids(rows):
  """True when every id of the file is an integer (GLUE `index`)."""
  try:
    [int(i) for i in rows.example_ids]
  except ValueError:
    return False
  return True


def _numeric_ids(rows, start, end):
  """The file's own integer ids where it has them, else row numbers (its
  text ids then go to the ids file: see write_split)."""
  if _integer_ids(rows):
    return np.array([int(i) for i in rows.example_ids[start:end]], np.int64)
  return np.arange(start, min(end, len(rows)), dtype=np.int64)


def ids_path(record_path):
  """Where a split's text ids are kept: line k is example_id k's id."""
  return record_path + ".ids.txt"


def _windowed(tokenizer, ids_a, max_seq_length, doc_stride, labels, ids,
              first_row):
  """Single texts -> windows of max_seq_length - 2 pieces, doc_stride apart,
  each with its text's label, id and row (document_id); returns the
  features and the number of texts that took several windows."""
  width = max_seq_length - 2
  pieces = [[ids_of[s:s + width] for s in windows.window_starts(
      len(ids_of), width, doc_stride)] for ids_of in ids_a]
  counts = np.array([len(p) for p in pieces])
  features, _ = tokenization.pack(tokenizer, [w for p in pieces for w in p],
                                  None, max_seq_length)
  features["label_ids"] = np.repeat(labels, counts)
  features["example_id"] = np.repeat(ids, counts)
  features["document_id"] = np.repeat(
      np.arange(first_row, first_row + len(ids_a), dtype=np.int64), counts)
  return features, int(np.sum(counts > 1))


def write_split(rows, tokenizer, max_seq_length, label_values, path,
                doc_stride=None):
  """Tokenizes, packs and writes one split; returns its record count and
  the number of texts truncated (with doc_stride: split into windows)."""
  writer = records.RecordWriter(path)
  truncated = 0
  try:
    for start in range(0, len(rows), _BATCH):
      end = start + _BATCH
      ids_a = tokenizer.tokenize(rows.text_a[start:end])
      if doc_stride:
        features, cut = _windowed(tokenizer, ids_a, max_seq_length, doc_stride,
                                  label_values[start:end],
                                  _numeric_ids(rows, start, end), start)
        truncated += cut
        writer.write_batch(features)
        continue
      ids_b = (tokenizer.tokenize(rows.text_b[start:end])
               if rows.text_b is not None else None)
      features, cut = tokenization.pack(tokenizer, ids_a, ids_b, max_seq_length)
      truncated += cut
      features["label_ids"] = label_values[start:end]
      features["example_id"] = _numeric_ids(rows, start, end)
      writer.write_batch(features)
    writer.commit()
    if not _integer_ids(rows):   # ids such as "q17": kept beside the records
      fileio.write_text(ids_path(path), "\n".join(rows.example_ids) + "\n")
    elif tf.io.gfile.exists(ids_path(path)):   # from an earlier prepare
      tf.io.gfile.remove(ids_path(path))
  except BaseException:
    writer.abort()
    raise
  if truncated:
    logging.info("%s: %d of %d texts %s max_seq_length %d", rows.path,
                 truncated, len(rows), "in windows of" if doc_stride else
                 "truncated to", max_seq_length)
  return writer.count, truncated


# The label id of unlabelled text (for a teacher to label in distillation).


def _fold_splits(splits, strata, folds, seed):
  """(split name, Rows, True) of each fold's training and held-out rows,
  and the meta data's record of the assignment (stratified by `strata`,
  the training label ids, or None)."""
  train = splits[0][1]
  assignment = folds_lib.assign(strata, len(train), folds, seed)
  extra = []
  for k in range(folds):
    held = [i for i, f in enumerate(assignment) if f == k]
    rest = [i for i, f in enumerate(assignment) if f != k]
    extra += [(f"fold{k}_train", folds_lib.subset(train, rest), True),
              (f"fold{k}_eval", folds_lib.subset(train, held), True)]
  return extra, {"count": folds, "seed": seed, "assignment": assignment}


def _skipped_rows(splits):
  """{split: malformed rows skipped}, each logged with its first lines."""
  for name, rows, _ in splits:
    if rows.skipped:
      logging.warning("%s: skipped %d malformed rows (wrong column count), "
                      "lines %s%s", rows.path, len(rows.skipped),
                      rows.skipped[:10], " ..." if len(rows.skipped) > 10 else "")
  return {name: len(rows.skipped) for name, rows, _ in splits if rows.skipped}


def _optional_meta(splits, labels, label_names, fold_record, doc_stride,
                   unlabelled, regression):
  """The meta data's fields of folds, windows, unlabelled text and label
  counts (for class_weights="balanced"), where they apply."""
  meta = {}
  if fold_record:
    meta["folds"] = fold_record
  if doc_stride:
    meta.update(doc_stride=doc_stride, document_counts={
        name: len(rows) for name, rows, _ in splits})
  if unlabelled:
    meta["unlabelled"] = True
  elif not regression and "train" in labels:
    counts = np.bincount(labels["train"], minlength=len(label_names))
    meta["label_counts"] = {name: int(c) for name, c in
                            zip(label_names, counts)}
  return meta


def prepare(task_name, splits, *, vocab_file, output_dir, max_seq_length,
            label_names, regression, do_lower_case=True,
            max_position_embeddings=None, unlabelled=False, doc_stride=None,
            folds=None, fold_seed=12345, tokenizer_family=None,
            keep_accents=False):
  """Writes `{task}_{split}.tf_record` per split and `{task}_meta_data`.

  splits: list of (split name, Rows, has_labels); split "train" comes first.
  unlabelled: the rows have no labels; every label id is UNLABELLED and the
  meta data says "unlabelled": true.
  doc_stride: a text longer than max_seq_length - 2 pieces becomes windows
  that many pieces apart, each a record with the text's label, example_id
  and `document_id` (its row); the task pools a document's windows.
  folds: k-fold cross-validation: the training rows are assigned to `folds`
  folds (seeded by fold_seed, stratified by label for classification) and
  each fold k also gets `{task}_fold{k}_train` (the other folds) and
  `{task}_fold{k}_eval` (its own rows, example_id = the training row)
  records; the assignment is in the meta data's "folds".
  tokenizer_family, keep_accents: a SentencePiece family's tokenizer
  (vocab_file its model file; see tokenization.load); the meta data
  records them, so serve_text tokenizes the same way.
  All records are written to temporary names, the meta data last: a failure
  anywhere leaves no file under a final name from this run.
  """
  windows.check_lengths(max_seq_length, max_position_embeddings, doc_stride)
  if doc_stride and splits[0][1].text_b is not None:
    raise ValueError(f"{splits[0][1].path}: --doc_stride windows single "
                     "texts; these rows are pairs (two text columns)")
  tokenizer = tokenizers.load(vocab_file, do_lower_case, tokenizer_family,
                                keep_accents)
  labels = {name: encode_labels(rows, label_names, regression)
            for name, rows, _ in splits}   # all label errors before any writing
  if unlabelled:
    labels = {name: np.full(len(rows), UNLABELLED, np.int64)
              for name, rows, _ in splits}
  fold_record = None
  if folds:
    if unlabelled or splits[0][0] != "train":
      raise ValueError("--folds needs a labelled training file")
    fold_split_list, fold_record = _fold_splits(
        splits, None if regression else labels["train"].tolist(), folds,
        fold_seed)
    labels.update({name: encode_labels(rows, label_names, regression)
                   for name, rows, _ in fold_split_list})
  skipped = _skipped_rows(splits)
  fileio.makedirs(output_dir)
  sizes, truncated = {}, {}
  with fileio.removed_on_failure(lambda path: [ids_path(path)]) as written:
    for name, rows, _ in splits + (fold_split_list if folds else []):
      path = fileio.join(output_dir, f"{task_name}_{name}.tf_record")
      written.append(path)       # removed (with its ids file) on a failure
      sizes[name], truncated[name] = write_split(
          rows, tokenizer, max_seq_length, labels[name], path, doc_stride)
      logging.info("wrote %d examples to %s", sizes[name], path)
    meta = {
        "task": task_name,
        "task_type": "regression" if regression else "classification",
        "max_seq_length": max_seq_length,
        "train_data_size": sizes.get("train", 0),
        "eval_data_size": sizes.get("eval", 0),
        "split_sizes": sizes,
        "truncated_examples": truncated,
        "skipped_malformed_rows": skipped,
        "num_labels": 1 if regression else len(label_names),
        "num_text_features": 1 if splits[0][1].text_b is None else 2,
        "label_type": "float" if regression else "int",
        "label_names": [] if regression else list(label_names),
        "do_lower_case": do_lower_case,
        "vocab_file": vocab_file,
        "vocab_sha256": fileio.sha256(vocab_file),
        "vocab_size": len(tokenizer.vocab),
    }
    meta.update(tokenization.meta_fields(tokenizer_family, keep_accents))
    meta.update(_optional_meta(splits, labels, label_names, fold_record,
                               doc_stride, unlabelled, regression))
    fileio.write_json(fileio.join(output_dir, f"{task_name}_meta_data"), meta)
  return meta


def _prepare_unlabelled(task_name, train_file, text_columns, labels,
                        regression, **common):
  if regression or not labels:
    raise ValueError(f"{train_file}: unlabelled text (no --label_column) "
                     "needs --labels, the teacher's label names in id order "
                     "(classification only)")
  rows = readers.read_any(train_file, text_columns)
  return prepare(task_name, [("train", rows, False)], label_names=tuple(labels),
                 regression=False, unlabelled=True, **common)


def prepare_glue(task, *, input_dir, vocab_file, output_dir, max_seq_length=128,
                 do_lower_case=True, max_position_embeddings=None,
                 **tokenizer_options):
  """`bertexp prepare glue`: a GLUE task's folder -> TFRecords + meta data."""
  spec = readers.glue_spec(task)
  splits = [("train", readers.read_glue(
      spec, fileio.join(input_dir, spec.train), True), True)]
  for name, file_name in spec.evals:
    splits.append((name, readers.read_glue(
        spec, fileio.join(input_dir, file_name), True), True))
  for name, file_name in spec.tests:
    path = fileio.join(input_dir, file_name)
    if tf.io.gfile.exists(path):
      splits.append((name, readers.read_glue(spec, path, False), False))
    else:
      logging.info("%s: not found, no %s split written", path, name)
  return prepare(spec.name.replace("-", ""), splits, vocab_file=vocab_file,
                 output_dir=output_dir, max_seq_length=max_seq_length,
                 label_names=spec.labels or (), regression=spec.labels is None,
                 do_lower_case=do_lower_case,
                 max_position_embeddings=max_position_embeddings,
                 **tokenizer_options)


def prepare_classification(*, task_name, train_file, eval_file=None, test_file=None,
                           text_columns, label_column, labels=None,
                           regression=False, vocab_file, output_dir,
                           max_seq_length=128, do_lower_case=True,
                           id_column=None, max_position_embeddings=None,
                           doc_stride=None, folds=None, fold_seed=12345,
                           **tokenizer_options):
  """`bertexp prepare classification`: TSV/CSV/JSONL files -> TFRecords + meta data.

  With `doc_stride`, texts longer than max_seq_length become overlapping
  windows; with `folds`, k-fold splits of the training file (see `prepare`).

  Without `label_column`, `train_file` is unlabelled text (for a
  distillation teacher to label): one split, label ids UNLABELLED, the
  label names of `labels` (the teacher's) in the meta data.
  tokenizer_options: tokenizer_family and keep_accents of a SentencePiece
  tokenizer (see `prepare`).
  """
  if not 1 <= len(text_columns) <= 2:
    raise ValueError(f"--text_columns takes one or two names, got {text_columns}")
  if not label_column:
    return _prepare_unlabelled(task_name, train_file, text_columns, labels,
                               regression, vocab_file=vocab_file,
                               output_dir=output_dir,
                               max_seq_length=max_seq_length,
                               do_lower_case=do_lower_case,
                               max_position_embeddings=max_position_embeddings,
                               **tokenizer_options)
  if not eval_file:
    raise ValueError("--eval_file is required with --label_column")
  # A named id column must exist where the ids are written out: the test
  # file's (the eval file's without one); elsewhere rows may be numbered.
  train = readers.read_any(train_file, text_columns, label_column, id_column)
  splits = [("train", train, True),
            ("eval", readers.read_any(
                eval_file, text_columns, label_column, id_column,
                id_required=bool(id_column) and not test_file), True)]
  if test_file:
    splits.append(("test", readers.read_any(
        test_file, text_columns, None, id_column,
        id_required=bool(id_column)), False))
  if not regression and not labels:
    labels = sorted(set(train.labels))
    logging.info("labels from %s (sorted): %s", train_file, labels)
  return prepare(task_name, splits, vocab_file=vocab_file,
                 output_dir=output_dir, max_seq_length=max_seq_length,
                 label_names=tuple(labels or ()), regression=regression,
                 do_lower_case=do_lower_case,
                 max_position_embeddings=max_position_embeddings,
                 doc_stride=doc_stride, folds=folds, fold_seed=fold_seed,
                 **tokenizer_options)
