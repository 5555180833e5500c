"""Per-layer TensorBoard summaries of training: what pretraining guides say
to watch (a layer whose gradients vanish or explode, weights that drift).

Every `every` steps, for each layer (embeddings, layer_00 ... layer_NN,
pooler, head): the global norm of its gradients and of its weights as
scalars (`gradient_norm/layer_03`, `weight_norm/layer_03`) and the values of
its weights and gradients as histograms (`weights/layer_03`,
`gradients/layer_03`). Computed only on the steps that write them.
"""
import tensorflow as tf


def group_by_layer(variables, groups):
  """{layer: [index into variables]}, layers in first-seen order.

  Args:
    variables: the variables summarised.
    groups: bertexp.model.encoders.variable_groups(model): each encoder
      variable's group ("embeddings", "relative_embeddings", "layer_03",
      "pooler"); any other variable is the task's "head".
  """
  found = {}
  for i, variable in enumerate(variables):
    name = groups.get(variable.ref(), ("head", None))[0]
    found.setdefault(name, []).append(i)
  return found


def _flat(tensors):
  """One float32 vector of all the values (a sparse gradient's rows only)."""
  values = [t.values if isinstance(t, tf.IndexedSlices) else t for t in tensors]
  return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in values],
                   0)


def layer_norms(grads, variables, groups):
  """{"gradient_norm/<layer>": norm, "weight_norm/<layer>": norm}."""
  norms = {}
  for layer, indices in group_by_layer(variables, groups).items():
    norms[f"gradient_norm/{layer}"] = tf.linalg.global_norm(
        [grads[i] for i in indices])
    norms[f"weight_norm/{layer}"] = tf.linalg.global_norm(
        [variables[i] for i in indices])
  return norms


def write(step, grads, variables, groups):
  """The scalars and histograms above at `step` to the default writer
  (recorded whatever the surrounding record_if says; under a distribution
  strategy by the first replica only)."""
  # Tags without the name scopes of the loop and cond around the call.
  with tf.summary.record_if(True), tf.compat.v1.name_scope(None):
    _write(step, grads, variables, groups)


def _write(step, grads, variables, groups):
  for name, value in layer_norms(grads, variables, groups).items():
    tf.summary.scalar(name, value, step=step)
  for layer, indices in group_by_layer(variables, groups).items():
    tf.summary.histogram(f"weights/{layer}",
                         _flat([variables[i] for i in indices]), step=step)
    tf.summary.histogram(f"gradients/{layer}",
                         _flat([grads[i] for i in indices]), step=step)


def write_every(every, step, grads, variables, groups):
  """`write` in the graph on steps that are multiples of `every`."""
  def write_now():
    write(step, grads, variables, groups)
    return tf.constant(True)
  tf.cond(tf.equal(step % every, 0), write_now, lambda: tf.constant(False))
