"""AdamW and LAMB with BERT's learning-rate schedule.

Schedule (as google-research/bert and Model Garden): linear warmup from 0 to
the peak over `num_warmup_steps`; after it, polynomial decay (power 1 =
linear) from the peak to `end_learning_rate` measured from step 0 over
`num_train_steps`, so at step s >= warmup: lr = (peak - end)(1 - s/T) + end.
Weight decay skips LayerNorm and bias variables, and so does LAMB's layer-wise
trust ratio (as Model Garden's LAMB). Gradient clipping is done once, in the
trainer, on the global norm of the gradient summed over replicas.
"""

import gin
import tensorflow as tf
import tf_keras

NO_DECAY = ("layer_norm", "LayerNorm", "bias")


@gin.configurable(module="bertexp")
class WarmupPolynomialDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
  """Linear warmup, then polynomial decay over the whole run."""

  def __init__(self, peak, num_train_steps, num_warmup_steps,
               end_learning_rate=0.0, power=1.0):
    super().__init__()
    self.peak = peak
    self.num_train_steps = num_train_steps
    self.num_warmup_steps = num_warmup_steps
    self.end_learning_rate = end_learning_rate
    self.power = power

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    total = tf.cast(max(self.num_train_steps, 1), tf.float32)
    fraction = tf.minimum(step, total) / total
    decayed = ((self.peak - self.end_learning_rate) *
               (1.0 - fraction) ** self.power + self.end_learning_rate)
    if self.num_warmup_steps <= 0:
      return decayed
    warmup = self.peak * step / tf.cast(self.num_warmup_steps, tf.float32)
    return tf.where(step < self.num_warmup_steps, warmup, decayed)

  def get_config(self):
    return {"peak": self.peak, "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
            "end_learning_rate": self.end_learning_rate, "power": self.power}


def is_excluded(variable):
  """LayerNorm scales/offsets and biases: no weight decay, no trust ratio."""
  return any(name in variable.name for name in NO_DECAY)


def layer_rates(variables, layer_decay, groups):
  """{variable name: learning-rate multiplier} of layer-wise decay (ELECTRA's
  and DeBERTa's fine-tuning recipe): with L Transformer blocks, block i
  trains at layer_decay^(L - i), the embeddings, their projection and
  tables every block shares (DeBERTa's relative table) at
  layer_decay^(L + 1), everything else (pooler, task heads) at 1. ALBERT's
  one shared block is block 0 of 1. Which variable is which comes from the
  encoder (`groups`: bertexp.model.encoders.variable_groups(model)), not
  from variable names.

  Raises:
    ValueError: layer_decay outside (0, 1], or no block among `variables`.
  """
  if not 0 < layer_decay <= 1:
    raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay!r}")
  depths = {v.name: groups.get(v.ref(), ("head", None))[1] for v in variables}
  blocks = [d for d in depths.values() if d is not None and d >= 0]
  if not blocks:
    raise ValueError("layer_decay: the model has no Transformer blocks of a "
                     "bertexp encoder (a SavedModel encoder has none)")
  total = max(blocks) + 1
  return {name: 1.0 if depth is None else layer_decay ** (
      total + 1 if depth < 0 else total - depth)
          for name, depth in depths.items()}


class AdamW(tf_keras.optimizers.Adam):
  """Adam with decoupled weight decay (Keras' AdamW: the same slots,
  checkpoints and update rule, w -= lr·wd·w then
  w -= lr·√(1-β2^t)/(1-β1^t)·m/(√v+ε)), each variable's Adam update as one
  fused kernel (ResourceApplyAdam, also compiled by XLA); Keras runs it as
  about ten element-wise ops per variable, each a pass over memory: on the
  CPU that made the optimizer 2-3x slower (tools/profile_step.py). Weight
  decay skips `is_excluded` variables. With `layer_decay`, each variable's
  learning rate (its update and its weight decay) is scaled by
  `layer_rates`.

  A sparse gradient (the word embedding's IndexedSlices) is made dense first:
  every row's moments decay every step, as in Keras' sparse path and
  google-research/bert (not "lazy" Adam).
  """

  def __init__(self, learning_rate, weight_decay=0.01, layer_decay=None,
               **kwargs):
    super().__init__(learning_rate=learning_rate, **kwargs)
    self.decoupled_weight_decay = weight_decay
    self.layer_decay = layer_decay
    self._rates = {}
    self._shared_scalars = {}

  def build(self, var_list, layer_groups=None):
    """Keras' slots; with layer_decay, each variable's rate from
    `layer_groups` (bertexp.model.encoders.variable_groups(model)).

    Raises:
      ValueError: layer_decay without layer_groups.
    """
    super().build(var_list)
    if self.layer_decay is not None and not self._rates:
      if layer_groups is None:
        raise ValueError("layer_decay needs the model's layers: build the "
                         "optimizer with optimization.build(optimizer, "
                         "variables, encoders.variable_groups(model))")
      self._rates = layer_rates(var_list, self.layer_decay, layer_groups)

  def apply_gradients(self, grads_and_vars, name=None,
                      skip_gradients_aggregation=False, **kwargs):
    """Keras' apply_gradients, the scalars every variable's update shares
    (learning rate, β powers at this step, ...) built once per call, not
    once per variable: a traced step has ~10 fewer ops per variable.

    Args:
      grads_and_vars: (gradient, variable) pairs.
      name: the name scope (Keras' default when None).
      skip_gradients_aggregation: True when the caller summed the gradients
        across replicas itself.
      **kwargs: passed on to Keras.

    Returns:
      The iterations variable, as Keras returns it.
    """
    self._shared_scalars = {}
    try:
      return super().apply_gradients(
          grads_and_vars, name=name,
          skip_gradients_aggregation=skip_gradients_aggregation, **kwargs)
    finally:
      self._shared_scalars = {}

  def _scalars(self, dtype):
    """{name: scalar tensor of `dtype`} of this update, made at the first
    variable's update of an apply_gradients call and reused by the others
    (one graph: apply_gradients' own)."""
    if dtype not in self._shared_scalars:
      step = tf.cast(self.iterations + 1, dtype)
      beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
      self._shared_scalars[dtype] = dict(
          lr=tf.cast(self.learning_rate, dtype),
          weight_decay=tf.cast(self.decoupled_weight_decay or 0.0, dtype),
          beta1=beta_1, beta2=beta_2, beta1_power=tf.pow(beta_1, step),
          beta2_power=tf.pow(beta_2, step),
          epsilon=tf.cast(self.epsilon, dtype))
    return self._shared_scalars[dtype]

  def update_step(self, gradient, variable):
    scalars = self._scalars(variable.dtype)
    lr = scalars["lr"]
    rate = self._rates.get(variable.name, 1.0)
    if rate != 1.0:
      lr = lr * rate
    if self.decoupled_weight_decay and not is_excluded(variable):
      variable.assign_sub(variable * scalars["weight_decay"] * lr)
    index = self._index_dict[self._var_key(variable)]
    tf.raw_ops.ResourceApplyAdam(
        var=variable.handle, m=self._momentums[index].handle,
        v=self._velocities[index].handle,
        beta1_power=scalars["beta1_power"], beta2_power=scalars["beta2_power"],
        lr=lr, beta1=scalars["beta1"], beta2=scalars["beta2"],
        epsilon=scalars["epsilon"], grad=tf.convert_to_tensor(gradient))

  def get_config(self):
    config = super().get_config()
    config.update({"weight_decay": self.decoupled_weight_decay,
                   "layer_decay": self.layer_decay})
    return config


class Lamb(tf_keras.optimizers.Optimizer):
  """LAMB (You et al. 2019): Adam update rescaled per layer by the trust ratio
  ||w|| / ||update||, with decoupled weight decay inside the update.

  LayerNorm and bias variables (`is_excluded`) get neither weight decay nor
  the trust ratio (ratio 1: a plain Adam step). Sparse gradients (the word
  embedding's IndexedSlices) are made dense: LAMB's moments and the trust
  ratio are over the whole table, as in the reference implementations.
  """

  def __init__(self, learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
               weight_decay=0.01, name="Lamb", **kwargs):
    super().__init__(name=name, **kwargs)
    self._learning_rate = self._build_learning_rate(learning_rate)
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.lamb_weight_decay = weight_decay

  def build(self, var_list):
    super().build(var_list)
    if getattr(self, "_built", False):
      return
    self._built = True
    self._m = [self.add_variable_from_reference(v, "m") for v in var_list]
    self._v = [self.add_variable_from_reference(v, "v") for v in var_list]

  def update_step(self, gradient, variable):
    if isinstance(gradient, tf.IndexedSlices):
      gradient = tf.convert_to_tensor(gradient)
    lr = tf.cast(self.learning_rate, variable.dtype)
    step = tf.cast(self.iterations + 1, variable.dtype)
    index = self._index_dict[self._var_key(variable)]
    m, v = self._m[index], self._v[index]
    m.assign(self.beta_1 * m + (1 - self.beta_1) * gradient)
    v.assign(self.beta_2 * v + (1 - self.beta_2) * tf.square(gradient))
    m_hat = m / (1 - self.beta_1 ** step)
    v_hat = v / (1 - self.beta_2 ** step)
    update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
    if is_excluded(variable):
      variable.assign_sub(lr * update)
      return
    update += self.lamb_weight_decay * variable
    w_norm, u_norm = tf.norm(variable), tf.norm(update)
    ratio = tf.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
    variable.assign_sub(lr * ratio * update)

  def get_config(self):
    config = super().get_config()
    config.update({"learning_rate": self._serialize_hyperparameter(
        self._learning_rate), "beta_1": self.beta_1, "beta_2": self.beta_2,
                   "epsilon": self.epsilon,
                   "weight_decay": self.lamb_weight_decay})
    return config


def build(optimizer, variables, layer_groups):
  """Creates the optimizer's slots for `variables` (before a restore, or
  their saved values are skipped); an AdamW with layer_decay takes each
  variable's depth from `layer_groups` (encoders.variable_groups(model))."""
  if isinstance(optimizer, AdamW):
    optimizer.build(variables, layer_groups=layer_groups)
  else:
    optimizer.build(variables)


@gin.configurable(module="bertexp",
                  denylist=["num_train_steps", "num_warmup_steps"])
def create_optimizer(num_train_steps, num_warmup_steps, *,
                     learning_rate=gin.REQUIRED, kind="adamw",
                     end_learning_rate=0.0, weight_decay=0.01, beta_1=0.9,
                     beta_2=0.999, epsilon=1e-6, layer_decay=None):
  """BERT's optimizer. Call inside strategy.scope(): it creates variables.

  The run derives num_train_steps and num_warmup_steps from the data size.
  layer_decay (AdamW only; e.g. 0.8 in ELECTRA's and 0.9 in DeBERTa's GLUE
  recipes): lower learning rates for lower blocks, see `layer_rates`.

  Raises:
    ValueError: an unknown kind, or layer_decay with LAMB.
  """
  schedule = WarmupPolynomialDecay(learning_rate, num_train_steps,
                                   num_warmup_steps, end_learning_rate)
  if kind == "adamw":
    return AdamW(learning_rate=schedule, weight_decay=weight_decay,
                 layer_decay=layer_decay, beta_1=beta_1, beta_2=beta_2,
                 epsilon=epsilon)
  if layer_decay is not None:
    raise ValueError("bertexp.create_optimizer.layer_decay is an AdamW "
                     f"option; kind is {kind!r}")
  if kind == "lamb":
    return Lamb(schedule, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                weight_decay=weight_decay)
  raise ValueError(f"optimizer kind {kind!r} is not 'adamw' or 'lamb'")
