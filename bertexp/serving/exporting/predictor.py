"""`bertexp.Predictor`: an exported model (`--mode=export`) as a Python object.

    predictor = bertexp.Predictor("runs/mrpc/export")       # newest version
    predictor.predict(["a fine film", "dull"])              # one text per row
    predictor.predict(["江泽民在北京"])                       # a tagger: entities
    predictor.predict([("sentence a", "sentence b")])       # pairs
    predictor.answer("Who wrote it?", "It was written by Ann.")  # a task's method

It calls the SavedModel's `serve_text` signature (tokenizer and packing in
the graph, as `bertexp prepare` does), in batches of `batch_size`.
"""
import functools
import importlib

import numpy as np
import tensorflow as tf

from bertexp import capabilities
from bertexp.serving.exporting import export
from bertexp.serving.exporting.versions import resolve_export_dir
from bertexp.util import fileio


def generic_row(outputs, i):
  """Row i of every output ({name: [N, ...] numpy}): strings decoded,
  numbers as Python numbers, arrays as lists (a classifier's {"label",
  "probabilities"}, a regression's {"value"}, an answer's fields)."""
  return {name: _python(values[i]) for name, values in outputs.items()}


def _python(value):
  if isinstance(value, bytes):
    return value.decode()
  if isinstance(value, np.ndarray):
    return [_python(v) for v in value]
  return value.item() if isinstance(value, np.generic) else value


def _export_info(export_dir):
  """The export's assets.extra/bertexp.json ({} for an export without it)."""
  path = fileio.join(export_dir, export.EXPORT_INFO)
  return fileio.read_json(path) if tf.io.gfile.exists(path) else {}


def _function(name, where):
  """The module-level function "module:name".

  Raises:
    ValueError: it cannot be imported here (naming `where`).
  """
  module, _, function = name.partition(":")
  try:
    return getattr(importlib.import_module(module), function)
  except (ImportError, AttributeError) as e:
    raise ValueError(f"{where}: {name!r} cannot be imported here ({e}); "
                     "import the task's package first") from None


class Predictor:
  """An exported model of any task, on raw text.

  `predict(rows)` -> one dict per row, as the task's decoder gives it
  (recorded in the export, see bertexp.capabilities.PredictorApi), else
  each output's value of the row: {"label", "probabilities"} for a
  classifier (probabilities in label-id order), {"value"} for regression,
  {"entities": [{"text", "type", "start", "end", "score"}], "words": [{"text",
  "tag", "start", "end", "score"}]} for a tagger (character offsets into the
  row's text).
  The task's own methods, recorded in the export: question answering's
  `answer(question, context)` -> {"answer", "score", "context_truncated"}
  (SQuAD v2.0 models also "null_score_diff"), multiple choice's
  `choose(context, choices)`, embeddings' `encode(texts)`.
  """

  def __init__(self, export_dir, batch_size=64):
    import tensorflow_text  # noqa: F401  (registers serve_text's tokenizer ops)
    self.export_dir = resolve_export_dir(export_dir)
    self.batch_size = batch_size
    if not tf.io.gfile.exists(fileio.join(self.export_dir, "saved_model.pb")):
      raise ValueError(f"{self.export_dir}: an ONNX model; the Predictor "
                       "reads SavedModel exports (--mode=export), which "
                       "carry the tokenizer; serve ONNX models on token ids "
                       "with bertexp serve")
    self._loaded = tf.saved_model.load(self.export_dir)
    if "serve_text" not in self._loaded.signatures:
      raise ValueError(f"{self.export_dir}: exported without a serve_text "
                       "signature (no vocabulary was configured)")
    self._serve = self._loaded.signatures["serve_text"]
    self.inputs = sorted(self._serve.structured_input_signature[1])
    info = _export_info(self.export_dir)
    where = fileio.join(self.export_dir, export.EXPORT_INFO)
    decoder = info.get("predictor_decoder")
    self._decode = _function(decoder, where) if decoder else generic_row
    self._methods = {method: _function(name, where) for method, name in
                     (info.get("predictor_methods") or {}).items()}

  def __getattr__(self, name):
    """A method the export's task offers (its PredictorApi's methods)."""
    methods = self.__dict__.get("_methods", {})
    if name not in methods:
      raise AttributeError(f"{type(self).__name__} of "
                           f"{self.__dict__.get('export_dir')} has no method "
                           f"{name!r}")
    return functools.partial(methods[name], self)

  def run(self, columns):
    """{input name: [str]} -> {output name: numpy array}, batch by batch.

    Raises:
      ValueError: the model's graph refused the inputs (its own check, e.g.
        another number of choices than it was trained with), in one line.
    """
    size = len(next(iter(columns.values())))
    pieces = {}
    for start in range(0, size, self.batch_size):
      batch = {k: tf.constant(v[start:start + self.batch_size], tf.string)
               for k, v in columns.items()}
      try:
        outputs = self._serve(**batch)
      except tf.errors.InvalidArgumentError as e:
        raise ValueError(f"{self.export_dir}: {export.graph_refusal(e)}") \
            from None
      for name, value in outputs.items():
        pieces.setdefault(name, []).append(value.numpy())
    return {name: [x for part in parts for x in part]
            for name, parts in pieces.items()}

  def predict(self, rows):
    """Texts (one-text models) or (text_a, text_b) pairs -> dicts."""
    if self.inputs not in (["text"], ["text_a", "text_b"]):
      offered = ", ".join(f"{name}()" for name in sorted(self._methods))
      raise ValueError(f"{self.export_dir}: this model reads {self.inputs}, "
                       "not texts or pairs: use "
                       f"{offered or 'run(columns)'}")
    rows = list(rows)
    if self.inputs == ["text"]:
      columns = {"text": [capabilities.checked_text(r, f"row {i}")
                          for i, r in enumerate(rows)]}
    else:
      for i, row in enumerate(rows):
        if not isinstance(row, (tuple, list)) or len(row) != 2:
          raise ValueError(f"row {i}: this model reads pairs (text_a, "
                           f"text_b), got {row!r}")
      columns = {
          "text_a": [capabilities.checked_text(a, f"row {i}") for i, (a, _) in enumerate(rows)],
          "text_b": [capabilities.checked_text(b, f"row {i}") for i, (_, b) in enumerate(rows)]}
    if not rows:
      return []
    out = self.run(columns)
    return [self.decode(out, i) for i in range(len(rows))]

  def decode(self, outputs, i):
    """Row i of `run`'s outputs as the task's decoder makes it."""
    return self._decode(outputs, i)
