"""SavedModel export in the TF Serving layout: MODEL_DIR/export/<version>/.

`serving_default` takes int32 token ids [B, S] (input_word_ids, input_mask,
input_type_ids) and returns probabilities [B, L] for classification or
value [B] for regression.
"""
import logging
import time

import tensorflow as tf
import tf_keras

from bertexp import fileio


class _ServingModule(tf.Module):

  def __init__(self, model, is_regression):
    super().__init__()
    self.model = model
    self.is_regression = is_regression

  @tf.function(input_signature=[{
      name: tf.TensorSpec([None, None], tf.int32, name)
      for name in ("input_word_ids", "input_mask", "input_type_ids")}])
  def serve(self, inputs):
    outputs = self.model(inputs, training=False)                  # [B, L]
    if self.is_regression:
      return {"value": outputs[:, 0]}
    return {"probabilities": tf.nn.softmax(outputs, axis=-1)}


def export_saved_model(task, model, model_dir, version=None):
  """Writes export/<version>/ (version: seconds since the epoch by default)."""
  version = version or int(time.time())
  export_dir = fileio.join(model_dir, "export", str(version))
  tmp_dir = fileio.temp_name(export_dir)
  module = _ServingModule(model, task.is_regression)
  tf.saved_model.save(module, tmp_dir, signatures={
      "serving_default": module.serve.get_concrete_function()})
  tf.io.gfile.rename(tmp_dir, export_dir, overwrite=True)
  logging.info("exported SavedModel to %s", export_dir)
  print(f"Exported SavedModel: {export_dir}", flush=True)
  return export_dir
