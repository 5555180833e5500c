"""bertexp: config-driven BERT fine-tuning on Orbit.

Public API: `load_encoder(folder)` or `load_encoder(config_file, checkpoint=None)`;
`Predictor(export_dir)` (see bertexp.serving.exporting.predictor).
"""
import os
import platform

# Model code is tf_keras (Keras 2): Orbit and Model Garden need it.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

# TensorFlow turns its oneDNN CPU kernels on by itself only on x86 CPUs with
# AVX-512 VNNI / bfloat16 or AMX; elsewhere (AVX2 CPUs such as AMD EPYC) it
# runs its Eigen kernels, and a MiniLM training step took ~20 % longer
# (tools/profile_step.py). bertexp asks for oneDNN on every x86-64 CPU unless
# the user chose (TF_ENABLE_ONEDNN_OPTS=0 keeps Eigen). TensorFlow reads the
# variable once, when it loads: importing tensorflow before bertexp keeps
# TensorFlow's choice. training_summary.json records which kernels ran.
if platform.machine().lower() in ("x86_64", "amd64"):
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

__version__ = "0.1.0"


def load_encoder(config_or_folder, checkpoint=None):
  """An encoder: `load_encoder(FOLDER)` for a converted encoder folder (its
  config and weights), or `load_encoder(CONFIG_FILE, CHECKPOINT)` with a
  checkpoint prefix, an encoder folder or a MODEL_DIR (None: random
  weights). See bertexp.checkpoints.run_dir.load_encoder."""
  from bertexp.checkpoints import run_dir
  return run_dir.load_encoder(config_or_folder, checkpoint)


def Predictor(export_dir, batch_size=64):  # noqa: N802  (a class to users)
  """An exported model as a Python object: see bertexp.serving.exporting.predictor.Predictor."""
  from bertexp.serving.exporting import predictor
  return predictor.Predictor(export_dir, batch_size=batch_size)
