"""Prediction files of classification and regression: test_results.tsv and
the GLUE submission file of a split."""
import logging

import numpy as np
import tensorflow as tf

from bertexp.checkpoints import run_files
from bertexp.tasks.classification import data as prepare
from bertexp.util import fileio

# GLUE submission file names (the benchmark's upload layout).
SUBMISSION_FILES = {
    ("cola", "test"): "CoLA.tsv", ("sst2", "test"): "SST-2.tsv",
    ("mrpc", "test"): "MRPC.tsv", ("qqp", "test"): "QQP.tsv",
    ("stsb", "test"): "STS-B.tsv", ("mnli", "test"): "MNLI-m.tsv",
    ("mnli", "test_mismatched"): "MNLI-mm.tsv", ("mnli", "ax"): "AX.tsv",
    ("qnli", "test"): "QNLI.tsv", ("rte", "test"): "RTE.tsv",
    ("wnli", "test"): "WNLI.tsv",
}


def example_ids(path, numbers):
  """The ids of the examples of the records `path`: the file's text ids
  when `bertexp prepare` kept them (prepare.ids_path), else `numbers` (the
  numbers in the records)."""
  if not path or not tf.io.gfile.exists(prepare.ids_path(path)):
    return numbers
  names = fileio.read_text(prepare.ids_path(path)).split("\n")
  return [names[int(i)] for i in numbers]


def _rows(outputs, ids, label_names, is_regression):
  """(test_results.tsv's lines, the submission's lines)."""
  if is_regression:
    values = outputs[:, 0]                                           # [N]
    return ([f"{v:.6f}" for v in values], ["index\tprediction"] + [
        f"{i}\t{v:.3f}" for i, v in zip(ids, values)])
  probs = tf.nn.softmax(outputs, axis=-1).numpy()                    # [N, L]
  predicted = np.argmax(probs, axis=-1)
  return (["\t".join(f"{p:.6f}" for p in row) for row in probs],
          ["index\tprediction"] + [
              f"{i}\t{label_names[p] if label_names else p}"
              for i, p in zip(ids, predicted)])


def write(outputs, ids, *, output_dir, split, meta, is_regression):
  """Writes test_results[_<split>].tsv (probabilities or values) and the
  GLUE submission file of `split`, one row per example.

  Args:
    outputs: [N, L] logits (regression: [N, 1] values), file order.
    ids: the N examples' ids.
    output_dir: the (worker's) MODEL_DIR.
    split: the split's name ("test", "test_mismatched", ...).
    meta: the data's meta data (its task and label names).
    is_regression: whether outputs are values.
  Returns:
    (results path, submission path).
  """
  suffix = "" if split == "test" else f"_{split}"
  results, submission = _rows(outputs, ids, meta.get("label_names") or [],
                              is_regression)
  results_path = run_files.output_file(output_dir, f"test_results{suffix}.tsv")
  fileio.write_text(results_path, "\n".join(results) + "\n")
  name = SUBMISSION_FILES.get((meta.get("task"), split),
                              f"{meta.get('task', 'task')}{suffix}.tsv")
  submission_path = run_files.output_file(output_dir, "submission", name)
  fileio.write_text(submission_path, "\n".join(submission) + "\n")
  logging.info("wrote %d predictions to %s and %s", len(ids), results_path,
               submission_path)
  return results_path, submission_path
