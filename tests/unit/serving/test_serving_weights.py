"""bertexp.util.serving_weights: an export module saves a Keras model's
variables and its signatures, not the Keras layer objects (whose traced
call functions cost more than the rest of an export)."""
import numpy as np
import tensorflow as tf
import tf_keras
from tensorflow.core.protobuf import saved_model_pb2

from bertexp.util import serving_weights


def _model():
  inputs = tf_keras.Input([4])
  hidden = tf_keras.layers.LayerNormalization()(
      tf_keras.layers.Dense(8, activation="gelu")(inputs))
  return tf_keras.Model(inputs, tf_keras.layers.Dense(3)(hidden))


class _Served(tf.Module):

  def __init__(self, model, attach):
    super().__init__()
    if attach:
      serving_weights.attach_model(self, model)
    else:
      self.model = model

  @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
  def serve(self, x):
    return {"y": self.model(x, training=False)}


def _saved_keras_objects(path):
  """Identifiers of the Keras objects in a SavedModel's object graph."""
  saved = saved_model_pb2.SavedModel()
  with open(f"{path}/saved_model.pb", "rb") as f:
    saved.ParseFromString(f.read())
  nodes = saved.meta_graphs[0].object_graph_def.nodes
  return [n.user_object.identifier for n in nodes
          if n.WhichOneof("kind") == "user_object" and
          "keras" in n.user_object.identifier]


def test_attached_model_saves_its_variables_and_serves_the_same_outputs(
    tmp_path):
  model = _model()
  x = np.random.default_rng(0).normal(size=[5, 4]).astype(np.float32)
  for attach in (True, False):
    module = _Served(model, attach)
    path = str(tmp_path / f"attach_{attach}")
    tf.saved_model.save(module, path, signatures={
        "serving_default": module.serve.get_concrete_function()})
    keras_objects = _saved_keras_objects(path)
    # The control (the model tracked as such) saves Keras layers; attached,
    # none: only variables and the signature.
    assert bool(keras_objects) is not attach, keras_objects
    loaded = tf.saved_model.load(path)
    served = loaded.signatures["serving_default"](tf.constant(x))["y"]
    np.testing.assert_allclose(served.numpy(), model(x).numpy(), atol=1e-6)
    if attach:
      assert len(loaded.model_variables) == len(model.variables) == 6
