"""SavedModel export in the TF Serving layout: MODEL_DIR/export/<version>/.

`serving_default` takes int32 token ids [B, S] (input_word_ids, input_mask,
input_type_ids) and returns what the task serves: probabilities [B, L] for
classification, value [B] for regression, start_logits/end_logits [B, S]
for question answering. Classification also returns `label` (its name).

`serve_text` takes raw strings with the tokenizer and packing inside the
graph (the same ids and truncation as `bertexp prepare`): for classification
and regression `text` or `text_a` + `text_b` [B] -> the outputs above; for
question answering `question` + `context` [B] -> answer [B] text, score
(start + end logit), context_truncated (see bertexp.tasks.squad.serving). Loading
it needs `import tensorflow_text` (for the tokenizer op), not bertexp.
"""
import logging
import re
import time

import tensorflow as tf

from bertexp.checkpoints import run_files
from bertexp import capabilities
from bertexp.util import fileio
from bertexp.util import serving_weights

class _ServingModule(tf.Module):
  """What an export saves: the model, `serving_default` on token ids, and
  the task's raw-text module (its tokenizer) when it has one."""

  def __init__(self, model, serving):
    super().__init__()
    serving_weights.attach_model(self, model)
    self._serving_outputs = serving.outputs
    # tracked: saved with the model
    self.text = serving.text(model) if serving.text else None

  @tf.function(input_signature=[{
      name: tf.TensorSpec([None, None], tf.int32, name)
      for name in ("input_word_ids", "input_mask", "input_type_ids")}],
               autograph=False)
  def serve(self, inputs):
    return self._serving_outputs(self.model(inputs, training=False))


# What bertexp reads back from an export besides the SavedModel, in TF
# Serving's folder for extra files (which the server itself ignores).
EXPORT_INFO = fileio.join("assets.extra", "bertexp.json")


def graph_refusal(error):
  """One line for a tf.errors.InvalidArgumentError from a signature: the
  message of the graph's own check (`tf.debugging.assert_*`, e.g. "choices:
  expected 3 per context"), else the error's first line."""
  refused = re.search(r"assertion failed: \[([^\]]*)\]", error.message)
  return (refused.group(1) if refused else
          error.message.strip().splitlines()[0])


def write_export_info(task, export_dir):
  """export_dir/assets.extra/bertexp.json: the task's Predictor decoder
  ("module:name", or null for the Predictor's generic rows) and its
  Predictor methods ({name: "module:name"})."""
  name = lambda function: f"{function.__module__}:{function.__qualname__}"
  api = (capabilities.find(task, capabilities.PredictorApi) or
         capabilities.PredictorApi())
  fileio.makedirs(fileio.join(export_dir, "assets.extra"))
  fileio.write_json(fileio.join(export_dir, EXPORT_INFO), {
      "predictor_decoder": api.decoder and name(api.decoder),
      "predictor_methods": {method: name(function) for method, function in
                            api.methods.items()}})


def export_saved_model(task, model, model_dir, version=None):
  """Writes export/<version>/ (version: seconds since the epoch by default).

  Args:
    task: a task declaring capabilities.SavedModelServing.
    model: the model that serving capability's `serving_model` gives.
  Raises:
    ValueError: the task declares no SavedModel export (one line).
  """
  serving = capabilities.require(task, capabilities.SavedModelServing,
                                 "--mode=export")
  version = version or int(time.time())
  export_dir = run_files.export_version(model_dir, version)
  tmp_dir = fileio.temp_name(export_dir)
  module = _ServingModule(model, serving)
  signatures = {"serving_default": module.serve.get_concrete_function()}
  if module.text is not None:
    signatures["serve_text"] = module.text.signature()
  tf.saved_model.save(module, tmp_dir, signatures=signatures)
  write_export_info(task, tmp_dir)
  tf.io.gfile.rename(tmp_dir, export_dir, overwrite=True)
  logging.info("exported SavedModel to %s", export_dir)
  print(f"Exported SavedModel: {export_dir}", flush=True)
  return export_dir


def export_tflite(task, model, model_dir, inputs, *, max_examples=256):
  """Token ids -> TFLite, float and dynamic-range int8.

  The task's capabilities.TfliteGraph gives the models' outputs (e.g.
  {"probabilities": [B, L]}) and the one compared; a task without it is a
  one-line ValueError before anything is written.

  Writes MODEL_DIR/tflite/model_{float,int8}.tflite and reports each file's
  size and its agreement with the float32 Keras model on `inputs` (held-out
  token ids) on the compared output: argmax agreement and max difference.
  """
  graph = capabilities.require(task, capabilities.TfliteGraph,
                               "export-tflite")
  spec = {name: tf.TensorSpec([1, graph.seq_length], tf.int32, name)
          for name in ("input_word_ids", "input_mask", "input_type_ids")}

  @tf.function(input_signature=[spec], autograph=False)
  def classify(features):
    return graph.outputs(model(features, training=False))

  reference = graph.outputs(model(inputs, training=False))
  reference = reference[graph.compared].numpy()                      # [N, L]
  folder = run_files.tflite(model_dir)
  fileio.makedirs(folder)
  # The converter saves its functions with this object first: the model's
  # variables only, not the Keras model (whose layer functions it would
  # trace and save, most of a conversion's time).
  weights = tf.Module()
  serving_weights.attach_model(weights, model)
  concrete = classify.get_concrete_function()
  report = {}
  for kind in ("float", "int8"):
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete],
                                                                weights)
    if kind == "int8":
      converter.optimizations = [tf.lite.Optimize.DEFAULT]   # dynamic range
    flatbuffer = converter.convert()
    path = fileio.join(folder, f"model_{kind}.tflite")
    with fileio.atomic_path(path) as tmp:
      with tf.io.gfile.GFile(tmp, "wb") as f:
        f.write(flatbuffer)
    interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    runner = interpreter.get_signature_runner()
    count = min(max_examples, len(reference))
    got = [runner(**{k: v[i:i + 1] for k, v in inputs.items()})[
        graph.compared][0]
           for i in range(count)]
    got = tf.stack(got).numpy()
    report[kind] = {
        "path": path, "bytes": len(flatbuffer), "examples": count,
        "argmax_agreement": float((got.argmax(-1) ==
                                   reference[:count].argmax(-1)).mean()),
        "max_probability_diff": float(abs(got - reference[:count]).max())}
    print(f"TFLite {kind}: {len(flatbuffer) / 1e6:.2f} MB, argmax agreement "
          f"{report[kind]['argmax_agreement']:.4f}, max probability diff "
          f"{report[kind]['max_probability_diff']:.2e} on {count} held-out "
          f"examples -> {path}", flush=True)
  fileio.write_json(fileio.join(folder, "tflite_report.json"), report)
  return report
