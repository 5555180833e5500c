"""bertexp: config-driven BERT fine-tuning on Orbit.

Public API: `load_encoder(bert_config_file, checkpoint=None)`;
`Predictor(export_dir)` (see bertexp.predictor).
"""
import os

# Model code is tf_keras (Keras 2): Orbit and Model Garden need it.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

__version__ = "0.1.0"


def load_encoder(bert_config_file, checkpoint=None):
  from bertexp import modeling
  return modeling.load_encoder(bert_config_file, checkpoint)


def Predictor(export_dir, batch_size=64):  # noqa: N802  (a class to users)
  """An exported model as a Python object: see bertexp.predictor.Predictor."""
  from bertexp import predictor
  return predictor.Predictor(export_dir, batch_size=batch_size)
