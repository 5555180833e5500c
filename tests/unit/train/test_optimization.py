"""Learning-rate schedule, step derivation, weight-decay exclusion, LAMB."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bertexp import experiment
from bertexp.train import optimization


def test_schedule_at_chosen_steps():
  s = optimization.WarmupPolynomialDecay(1e-4, num_train_steps=1000,
                                         num_warmup_steps=100)
  assert float(s(0)) == 0.0
  assert float(s(50)) == pytest.approx(5e-5)
  # after warmup: linear decay measured from step 0 (as the seeds)
  assert float(s(100)) == pytest.approx(1e-4 * 0.9)
  assert float(s(500)) == pytest.approx(5e-5)
  assert float(s(1000)) == pytest.approx(0.0, abs=1e-12)
  assert float(s(2000)) == pytest.approx(0.0, abs=1e-12)
  end = optimization.WarmupPolynomialDecay(1e-4, 1000, 0, end_learning_rate=1e-5)
  assert float(end(500)) == pytest.approx(5.5e-5)


def test_derive_schedule_as_run_classifier():
  # MRPC: 3668 examples, batch 32, 3 epochs.
  s = experiment.derive_schedule(3668, 32, 3)
  assert (s.steps_per_epoch, s.total_steps, s.warmup_steps) == (114, 342, 34)
  # num_eval_per_epoch=2: "epochs" double, each covers half the data.
  s = experiment.derive_schedule(3668, 32, 3, num_eval_per_epoch=2)
  assert (s.steps_per_epoch, s.total_steps, s.warmup_steps) == (57, 342, 34)
  s = experiment.derive_schedule(3668, 32, 3, train_steps=10)
  assert (s.total_steps, s.warmup_steps) == (10, 1)
  with pytest.raises(ValueError, match="smaller than one batch"):
    experiment.derive_schedule(10, 32, 3)


def _one_step(optimizer):
  layer_norm = tf_keras.layers.LayerNormalization(name="layer_norm")
  dense = tf_keras.layers.Dense(3, name="dense")
  x = tf.ones([2, 3])
  layer_norm(x)
  dense(x)
  variables = [dense.kernel, dense.bias, layer_norm.gamma]
  before = [v.numpy().copy() for v in variables]
  optimizer.build(variables)
  optimizer.apply_gradients(zip([tf.zeros_like(v) for v in variables], variables))
  return [(b, v.numpy()) for b, v in zip(before, variables)]


def test_adamw_decays_kernels_not_bias_or_layer_norm():
  opt = optimization.create_optimizer(10, 0, learning_rate=0.1, weight_decay=0.5)
  (k0, k1), (b0, b1), (g0, g1) = _one_step(opt)
  np.testing.assert_allclose(k1, k0 * (1 - 0.1 * 0.5), rtol=1e-5)
  np.testing.assert_array_equal(b1, b0)
  np.testing.assert_array_equal(g1, g0)
  assert opt.epsilon == 1e-6 and opt.beta_1 == 0.9 and opt.beta_2 == 0.999


def _adamw_steps(optimizer, strategy, steps=4):
  """`steps` updates of a word table (sparse gradient, repeated rows), a
  kernel (decayed) and a bias (not decayed), in a tf.function, under
  `strategy` (each replica applies the same gradients)."""
  with strategy.scope():
    table = tf.Variable(tf.random.stateless_normal([6, 4], seed=[1, 2]),
                        name="word_embeddings")
    kernel = tf.Variable(tf.random.stateless_normal([4, 3], seed=[3, 4]),
                         name="dense/kernel")
    bias = tf.Variable(tf.zeros([3]), name="dense/bias")
    variables = [table, kernel, bias]
    optimizer.build(variables)

  @tf.function
  def step():
    def replica_step():
      with tf.GradientTape() as tape:
        hidden = tf.gather(table, tf.constant([1, 4, 1, 5]))
        loss = tf.reduce_sum(tf.tanh(hidden @ kernel + bias) ** 2)
      grads = tape.gradient(loss, variables)
      optimizer.apply_gradients(zip(grads, variables),
                                skip_gradients_aggregation=True)
    strategy.run(replica_step)

  for _ in range(steps):
    step()
  return [strategy.experimental_local_results(v)[-1].numpy()
          for v in variables]


@pytest.mark.parametrize("replicas", [1, 2])
def test_fused_adamw_equals_keras_adamw(replicas):
  from bertexp.train import strategy as strategy_lib
  one = strategy_lib.make_strategy("default")
  make = lambda cls: cls(
      learning_rate=optimization.WarmupPolynomialDecay(0.05, 100, 0),
      weight_decay=0.1, epsilon=1e-6)
  keras = make(tf_keras.optimizers.AdamW)
  keras.exclude_from_weight_decay(var_names=list(optimization.NO_DECAY))
  expected = _adamw_steps(keras, one)
  ours = optimization.create_optimizer(100, 0, learning_rate=0.05,
                                       weight_decay=0.1)
  assert type(ours) is optimization.AdamW
  strategy = one if replicas == 1 else strategy_lib.make_strategy(
      "mirrored", cpu_replicas=replicas)
  got = _adamw_steps(ours, strategy)
  initial = _adamw_steps(make(tf_keras.optimizers.AdamW), one, steps=0)
  for name, e, g, start in zip(("table", "kernel", "bias"), expected, got,
                               initial):
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=5e-6, err_msg=name)
    assert not np.allclose(g, start), name   # every variable moved


def _numpy_lamb_step(w, g, lr, decay, adapt, beta_1=0.9, beta_2=0.999,
                     eps=1e-6):
  """One LAMB step from zero moments (You et al. 2019, Alg. 2), float64."""
  w, g = w.astype(np.float64), g.astype(np.float64)
  m, v = (1 - beta_1) * g, (1 - beta_2) * g * g
  update = (m / (1 - beta_1)) / (np.sqrt(v / (1 - beta_2)) + eps) + decay * w
  ratio = np.linalg.norm(w) / np.linalg.norm(update) if adapt else 1.0
  return w - lr * ratio * update


def test_lamb_step_equals_the_paper_with_layer_norm_and_bias_excluded():
  """Kernel: decay + trust ratio; LayerNorm gamma and bias: neither (Model
  Garden's exclude_from_weight_decay / exclude_from_layer_adaptation)."""
  opt = optimization.create_optimizer(10, 0, learning_rate=0.01, kind="lamb",
                                      weight_decay=0.1)
  layer_norm = tf_keras.layers.LayerNormalization(name="layer_norm")
  dense = tf_keras.layers.Dense(3, name="dense")
  x = tf.random.stateless_normal([2, 3], seed=[1, 2])
  layer_norm(x)
  dense(x)
  dense.bias.assign([0.5, -1.0, 2.0])
  variables = [dense.kernel, dense.bias, layer_norm.gamma]
  grads = [tf.random.stateless_normal(v.shape, seed=[i, 7])
           for i, v in enumerate(variables)]
  before = [v.numpy() for v in variables]
  opt.build(variables)
  opt.apply_gradients(zip(grads, variables))
  expected = [
      _numpy_lamb_step(before[0], grads[0].numpy(), 0.01, 0.1, adapt=True),
      _numpy_lamb_step(before[1], grads[1].numpy(), 0.01, 0.0, adapt=False),
      _numpy_lamb_step(before[2], grads[2].numpy(), 0.01, 0.0, adapt=False)]
  for variable, want in zip(variables, expected):
    np.testing.assert_allclose(variable.numpy(), want, rtol=1e-5, atol=1e-7,
                               err_msg=variable.name)
  # The trust ratio made a difference for the kernel (the test can fail).
  plain = _numpy_lamb_step(before[0], grads[0].numpy(), 0.01, 0.1, adapt=False)
  assert not np.allclose(plain, expected[0], rtol=1e-3)


def test_lamb_sparse_gradient_equals_its_dense_form():
  """The word-embedding gradient arrives as IndexedSlices (repeated rows)."""
  table = lambda: tf.Variable(tf.random.stateless_normal([6, 4], seed=[3, 4]),
                              name="word_embeddings")
  sparse_var, dense_var = table(), table()
  ids = tf.constant([1, 4, 1, 5])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.gather(sparse_var, ids) ** 2)
  sparse = tape.gradient(loss, sparse_var)
  assert isinstance(sparse, tf.IndexedSlices)
  for variable, gradient in ((sparse_var, sparse),
                             (dense_var, tf.convert_to_tensor(sparse))):
    opt = optimization.create_optimizer(10, 0, learning_rate=0.01, kind="lamb")
    opt.build([variable])
    opt.apply_gradients([(gradient, variable)])
  np.testing.assert_allclose(sparse_var.numpy(), dense_var.numpy(), rtol=1e-6)
  assert not np.allclose(sparse_var.numpy(), table().numpy())


def test_unknown_optimizer_kind():
  with pytest.raises(ValueError, match="optimizer kind 'sgd'"):
    optimization.create_optimizer(10, 0, learning_rate=0.1, kind="sgd")
