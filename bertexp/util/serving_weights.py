"""A Keras model inside an exported tf.Module, saved as its weights only.

`tf.saved_model.save` of an object that tracks a tf_keras model also traces
and saves every layer's call functions (to rebuild Keras objects on load),
which costs several times the rest of an export; a served SavedModel needs
only its signatures and the variables they read.
"""
import tensorflow as tf


class _ModelCall:
  """Calls a Keras model; not a trackable, so a tf.Module attribute holding
  it does not make the model part of what the module saves."""

  def __init__(self, model):
    self._model = model

  def __call__(self, *args, **kwargs):
    return self._model(*args, **kwargs)


def attach_model(module: tf.Module, model) -> None:
  """Lets `module`'s tf.functions call `module.model(...)`, while saving
  `module` writes the model's variables (`module.model_variables`) and not
  the Keras model object.

  Args:
    module: the tf.Module an export saves.
    model: a built tf_keras model (its variables exist), or None for a
      module whose functions need no model.
  """
  module.model_variables = [] if model is None else list(model.variables)
  module.model = None if model is None else _ModelCall(model)
