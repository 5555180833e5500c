"""A SavedModel BERT encoder (TF-Hub format, a local folder) in place of a
family's own encoder: what HUB_MODULE_URL means.

The SavedModel is called as TF-Hub BERT encoders are: a dict of int32
input_word_ids / input_mask / input_type_ids [B, S] (or, for the oldest
exports, the list [ids, mask, types]) and `training`; it returns a dict with
sequence_output [B, S, H] and pooled_output [B, H] (or the list [pooled,
sequence]). Its variables become this layer's weights, trainable or frozen
(HUB_MODULE_TRAINABLE), and are saved in bertexp's checkpoints.
"""
import tensorflow as tf
import tf_keras

from bertexp.model import modeling

_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")


class SavedModelEncoder(tf_keras.layers.Layer):
  """Same call contract as modeling.BertEncoder."""

  def __init__(self, path, config, trainable=True, **kwargs):
    super().__init__(trainable=trainable, **kwargs)
    if not tf.io.gfile.exists(f"{path}/saved_model.pb"):
      raise FileNotFoundError(f"HUB_MODULE_URL {path!r}: no saved_model.pb "
                              "(expected a local folder holding a SavedModel "
                              "BERT encoder)")
    self.path, self.config = path, config
    self.saved_model = tf.saved_model.load(path)
    if not callable(self.saved_model):
      raise ValueError(f"HUB_MODULE_URL {path!r}: the SavedModel is not "
                       "callable (export the encoder object, not a module)")
    frozen = {v.ref() for v in self.saved_model.variables} - {
        v.ref() for v in self.saved_model.trainable_variables}
    for variable in self.saved_model.variables:
      self._track_weight(
          variable, trainable=trainable and variable.ref() not in frozen)
    self._list_inputs = None         # found on the first call

  def _track_weight(self, variable, trainable):
    # Keras' own bookkeeping for variables created elsewhere.
    (self._trainable_weights if trainable else
     self._non_trainable_weights).append(variable)

  def _call_saved_model(self, inputs, training):
    if self._list_inputs is None:
      try:
        outputs = self.saved_model(inputs, training=training)
        self._list_inputs = False
        return outputs
      except (ValueError, TypeError):
        self._list_inputs = True
    if self._list_inputs:
      return self.saved_model([inputs[k] for k in _INPUTS], training=training)
    return self.saved_model(inputs, training=training)

  def call(self, inputs, training=None, dropout_seed=None, pooled_only=False):
    # The SavedModel draws its own dropout masks and computes every position.
    del dropout_seed, pooled_only
    inputs = {k: tf.cast(inputs[k], tf.int32) for k in _INPUTS}
    outputs = self._call_saved_model(inputs, bool(training and self.trainable))
    if isinstance(outputs, dict):
      pooled, sequence = outputs["pooled_output"], outputs["sequence_output"]
    else:
      pooled, sequence = outputs[0], outputs[1]
    return {"sequence_output": tf.cast(sequence, self.compute_dtype),  # [B, S, H]
            "pooled_output": tf.cast(pooled, self.compute_dtype)}       # [B, H]

  def dummy_inputs(self):
    return modeling.dummy_inputs()
