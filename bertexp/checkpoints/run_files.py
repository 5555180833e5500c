"""The layout of a run folder (MODEL_DIR): the one place that knows where a
run keeps each of its records. Every other module asks here for a path
under a run folder (tests/unit/package/test_run_folder.py holds them to it).
Nothing here imports TensorFlow, so readers without it (a sweep worker
reading its trials' folders) use it too.

    MODEL_DIR/
      config.gin, operative_config.gin, config_<mode>.gin   what was run
      ckpt-N.*, checkpoint, damaged/                         checkpoints
      best_checkpoint/ (best_checkpoint.json)                best evaluation
      early_stopping.json, training_summary.json, metrics.csv
      eval_results.json, train_record_counts.json, .writer.lock
      summaries/{train,eval}/                                TensorBoard
      workers/worker_<i>/                                    other workers' files
      export/<version>/, tflite/, onnx/<kind>/<version>/     exports
      encoder/                                               pretraining's encoder
      <prediction files>                                     the task's (output_file)
"""
from bertexp.util import fileio

# best_checkpoint/'s record of the checkpoint it holds (bertexp.checkpoints.run_dir).
BEST_INFO = "best_checkpoint.json"
# Early stopping's record in MODEL_DIR (bertexp.train.loop.EarlyStopping).
EARLY_STOPPING_INFO = "early_stopping.json"
TRAINING_SUMMARY = "training_summary.json"
METRICS_TABLE = "metrics.csv"
CONFIG = "config.gin"
OPERATIVE_CONFIG = "operative_config.gin"
BEST_FOLDER = "best_checkpoint"
EXPORT_FOLDER = "export"
# tf.train.CheckpointManager's record of the checkpoints it keeps.
CHECKPOINT_STATE = "checkpoint"


def config(model_dir):
  """The parsed gin files and bindings of the run's training."""
  return fileio.join(model_dir, CONFIG)


def operative_config(model_dir):
  """The values the run's configurables were called with."""
  return fileio.join(model_dir, OPERATIVE_CONFIG)


def mode_config(model_dir, mode):
  """The gin of a command that does not train (eval, predict, export)."""
  return fileio.join(model_dir, f"config_{mode}.gin")


def training_summary(model_dir):
  """training_summary.json: what a finished training reports."""
  return fileio.join(model_dir, TRAINING_SUMMARY)


def metrics_table(model_dir):
  """metrics.csv: one row per logged train loop and evaluation."""
  return fileio.join(model_dir, METRICS_TABLE)


def early_stopping(model_dir):
  """early_stopping.json: the step a run stopped early at, and why."""
  return fileio.join(model_dir, EARLY_STOPPING_INFO)


def eval_results(model_dir):
  """--mode=eval's metrics."""
  return fileio.join(model_dir, "eval_results.json")


def train_record_counts(model_dir):
  """The training files' record counts, kept across restarts."""
  return fileio.join(model_dir, "train_record_counts.json")


def writer_lock(model_dir, name):
  """The lock file `name` of the process writing the run."""
  return fileio.join(model_dir, name)


def summaries(model_dir, kind=None):
  """TensorBoard's folder (summaries/), or its `kind` ("train", "eval")."""
  return fileio.join(model_dir, "summaries", *([kind] if kind else []))


def best_checkpoint(model_dir):
  """The folder of the best evaluation's weights."""
  return fileio.join(model_dir, BEST_FOLDER)


def best_info(folder):
  """best_checkpoint.json in a best_checkpoint/ folder."""
  return fileio.join(folder, BEST_INFO)


def checkpoint(model_dir, name):
  """A checkpoint prefix (or pattern) `name` in the run: "ckpt-300",
  "ckpt-*.index"."""
  return fileio.join(model_dir, name)


def checkpoint_state(model_dir):
  """The checkpoint manager's record of the checkpoints kept."""
  return fileio.join(model_dir, CHECKPOINT_STATE)


def damaged(model_dir):
  """Where damaged checkpoints are moved aside."""
  return fileio.join(model_dir, "damaged")


def worker_folder(model_dir, task_type, task_id):
  """A non-chief worker's own files (checkpoints it must write too)."""
  return fileio.join(model_dir, "workers", f"{task_type}_{task_id}")


def exports(model_dir):
  """export/: the SavedModel versions, TF Serving's layout."""
  return fileio.join(model_dir, EXPORT_FOLDER)


def export_version(model_dir, version):
  """export/<version>/: one SavedModel."""
  return fileio.join(model_dir, EXPORT_FOLDER, str(version))


def tflite(model_dir, name=None):
  """tflite/, or a file `name` in it."""
  return fileio.join(model_dir, "tflite", *([name] if name else []))


def onnx(model_dir, kind=None, version=None):
  """onnx/, onnx/<kind>/ or onnx/<kind>/<version>/."""
  parts = [str(p) for p in (kind, version) if p is not None]
  return fileio.join(model_dir, "onnx", *parts)


def onnx_report(model_dir):
  """export-onnx's report (each variant's path, size and checks)."""
  return fileio.join(model_dir, "onnx", "onnx_report.json")


def encoder(model_dir):
  """A pretraining run's encoder folder (bert_config.json, vocab,
  bert_model.ckpt)."""
  return fileio.join(model_dir, "encoder")


def output_file(model_dir, *names):
  """A task's output file in the run (prediction files: "test_results.tsv",
  "submission", "my_task.tsv"), written by the task."""
  return fileio.join(model_dir, *names)
