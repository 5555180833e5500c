"""What a training run records besides checkpoints: its configuration and
hyperparameters for TensorBoard (a text summary, the HParams dashboard) and
a metrics.csv for people who plot with pandas.

    summaries        "config" (text) and an HParams session whose
                     hyperparameters are the run's macros (LEARNING_RATE,
                     TRAIN_BATCH_SIZE, ...); the scalars of its train/ and
                     eval/ subfolders are its metrics, so a sweep's trials
                     line up in TensorBoard's HParams tab
    metrics.csv      step,split,metric,value: one row per metric of every
                     train loop and evaluation
"""
import ast
import csv
import io
import numbers
import re

import tensorflow as tf

from bertexp.checkpoints import run_files
from bertexp.util import fileio

CSV_HEADER = ["step", "split", "metric", "value"]
_MACRO_LINE = re.compile(r"^([A-Z][A-Z0-9_]*) = (.+)$")


def macro_hparams(config_text):
  """{macro: value} of the top-level macro bindings in gin config text whose
  values are numbers, strings or booleans (what HParams can hold)."""
  values = {}
  for line in config_text.splitlines():
    match = _MACRO_LINE.match(line.strip())
    if not match:
      continue
    try:
      value = ast.literal_eval(match.group(2))
    except (ValueError, SyntaxError):   # a reference such as %OTHER or @fn
      continue
    if isinstance(value, (bool, str, numbers.Number)):
      values[match.group(1)] = value
  return values


def write_header(summary_dir, config_text, step=0):
  """The configuration (text) and the HParams session of a run."""
  # Imported here: it loads TensorBoard's protos (~0.4 CPU-s), which
  # processes that import this module without training never need.
  from tensorboard.plugins.hparams import api as hparams_api
  writer = tf.summary.create_file_writer(summary_dir)
  with writer.as_default():
    tf.summary.text("config", "```\n" + config_text + "\n```", step=step)
    hparams_api.hparams(macro_hparams(config_text))
  writer.flush()
  writer.close()


def append_metrics(model_dir, step, split, metrics):
  """Adds one row per metric to MODEL_DIR/metrics.csv (rewritten whole, so a
  reader never sees half a row)."""
  path = run_files.metrics_table(model_dir)
  text = fileio.read_text(path) if tf.io.gfile.exists(path) else ""
  out = io.StringIO()
  writer = csv.writer(out, lineterminator="\n")
  if not text:
    writer.writerow(CSV_HEADER)
  for name, value in sorted(metrics.items()):
    writer.writerow([step, split, name, repr(float(value))])
  fileio.write_text(path, text + out.getvalue())
