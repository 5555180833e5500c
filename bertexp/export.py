"""SavedModel export in the TF Serving layout: MODEL_DIR/export/<version>/.

`serving_default` takes int32 token ids [B, S] (input_word_ids, input_mask,
input_type_ids) and returns what the task serves: probabilities [B, L] for
classification, value [B] for regression, start_logits/end_logits [B, S]
for question answering.
"""
import logging
import time

import tensorflow as tf

from bertexp import fileio


class _ServingModule(tf.Module):

  def __init__(self, model, task):
    super().__init__()
    self.model = model
    self._serving_outputs = task.serving_outputs

  @tf.function(input_signature=[{
      name: tf.TensorSpec([None, None], tf.int32, name)
      for name in ("input_word_ids", "input_mask", "input_type_ids")}])
  def serve(self, inputs):
    return self._serving_outputs(self.model(inputs, training=False))


def export_saved_model(task, model, model_dir, version=None):
  """Writes export/<version>/ (version: seconds since the epoch by default)."""
  version = version or int(time.time())
  export_dir = fileio.join(model_dir, "export", str(version))
  tmp_dir = fileio.temp_name(export_dir)
  module = _ServingModule(model, task)
  tf.saved_model.save(module, tmp_dir, signatures={
      "serving_default": module.serve.get_concrete_function()})
  tf.io.gfile.rename(tmp_dir, export_dir, overwrite=True)
  logging.info("exported SavedModel to %s", export_dir)
  print(f"Exported SavedModel: {export_dir}", flush=True)
  return export_dir
