"""Learning-rate schedule, step derivation, weight-decay exclusion, LAMB."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bertexp import optimization
from bertexp import run


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
  s = run.derive_schedule(3668, 32, 3)
  assert (s.steps_per_epoch, s.total_steps, s.warmup_steps) == (114, 342, 34)
  # num_eval_per_epoch=2: "epochs" double, each covers half the data.
  s = run.derive_schedule(3668, 32, 3, num_eval_per_epoch=2)
  assert (s.steps_per_epoch, s.total_steps, s.warmup_steps) == (57, 342, 34)
  s = run.derive_schedule(3668, 32, 3, train_steps=10)
  assert (s.total_steps, s.warmup_steps) == (10, 1)
  with pytest.raises(ValueError, match="smaller than one batch"):
    run.derive_schedule(10, 32, 3)


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


def test_lamb_moves_against_the_gradient_and_skips_decay():
  opt = optimization.create_optimizer(10, 0, learning_rate=0.01, kind="lamb",
                                      weight_decay=0.0)
  v = tf.Variable([1.0, -2.0], name="w")
  opt.build([v])
  opt.apply_gradients([(tf.constant([0.5, -0.5]), v)])
  assert v.numpy()[0] < 1.0 and v.numpy()[1] > -2.0
  with pytest.raises(ValueError, match="optimizer kind 'sgd'"):
    optimization.create_optimizer(10, 0, learning_rate=0.1, kind="sgd")
