"""Learning-rate schedule, step derivation, weight-decay exclusion, LAMB."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bertexp import experiment
from bertexp.model import encoders
from bertexp.train import optimization
from conftest import TINY_CONFIG


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
  assert (s.steps_per_epoch, s.total_steps, s.warmup_steps,
          s.eval_interval_steps) == (114, 342, 34, 114)
  # num_eval_per_epoch=2: "epochs" double, each covers half the data.
  s = experiment.derive_schedule(3668, 32, 3, num_eval_per_epoch=2)
  assert (s.steps_per_epoch, s.total_steps, s.warmup_steps,
          s.eval_interval_steps) == (57, 342, 34, 57)
  s = experiment.derive_schedule(3668, 32, 3, train_steps=10)
  assert (s.total_steps, s.warmup_steps) == (10, 1)
  with pytest.raises(ValueError, match="smaller than one batch"):
    experiment.derive_schedule(10, 32, 3)


def test_eval_interval_steps_replace_the_epochs_interval_only():
  """EVAL_INTERVAL_STEPS (Hugging Face's --eval_steps): evaluations every
  that many steps; the steps, warmup and epoch are what the data make."""
  s = experiment.derive_schedule(3668, 32, 3, eval_interval_steps=50)
  assert (s.steps_per_epoch, s.total_steps, s.warmup_steps,
          s.eval_interval_steps) == (114, 342, 34, 50)
  for bad in (0, -5, 2.5, True):
    with pytest.raises(ValueError, match="EVAL_INTERVAL_STEPS="):
      experiment.derive_schedule(3668, 32, 3, eval_interval_steps=bad)


def test_warmup_steps_replace_the_warmup_fraction():
  """WARMUP_STEPS (Hugging Face's --warmup_steps): the schedule warms up
  over that many steps whatever the fraction, capped at the total."""
  s = experiment.derive_schedule(3668, 32, 3, warmup_steps=100)
  assert (s.total_steps, s.warmup_steps) == (342, 100)
  s = experiment.derive_schedule(3668, 32, 3, train_steps=10, warmup_steps=0)
  assert s.warmup_steps == 0
  assert experiment.derive_schedule(3668, 32, 3,
                                    warmup_steps=1000).warmup_steps == 342
  for bad in (-1, 2.5, True):
    with pytest.raises(ValueError, match="WARMUP_STEPS="):
      experiment.derive_schedule(3668, 32, 3, warmup_steps=bad)


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


def _one_adamw_step(model, features, labels, layer_decay, strategy):
  """The change of each variable (by name) after one AdamW step of the
  classifier's loss; weight decay 0.1."""
  with strategy.scope():
    optimizer = optimization.create_optimizer(
        10, 0, learning_rate=1e-2, weight_decay=0.1, layer_decay=layer_decay)
    optimization.build(optimizer, model.trainable_variables,
                       encoders.variable_groups(model))
  start = {v.name: v.numpy() for v in model.trainable_variables}

  @tf.function
  def step():
    def replica_step():
      with tf.GradientTape() as tape:
        logits = model(features, training=False)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
      grads = tape.gradient(loss, model.trainable_variables)
      optimizer.apply_gradients(zip(grads, model.trainable_variables))
    strategy.run(replica_step)
  step()
  changes = {v.name: v.numpy() - start[v.name]
             for v in model.trainable_variables}
  for v in model.trainable_variables:           # back to the start
    v.assign(start[v.name])
  return changes


# DeBERTa's relative-position table is used by every block: it trains with
# the embeddings (position information, as BERT's absolute positions do).
DEBERTA_TINY = dict(TINY_CONFIG, family="deberta-v2", relative_attention=True,
                    position_buckets=8, pos_att_type=["p2c", "c2p"],
                    type_vocab_size=0, position_biased_input=False,
                    norm_rel_ebd="layer_norm")


@pytest.mark.parametrize("family,replicas", [("bert", 1), ("bert", 2),
                                             ("deberta-v2", 2)])
def test_layer_decay_scales_each_blocks_step_by_its_depth(family, replicas):
  """Layer-wise decay 0.5 on 2 blocks: the first step of each variable
  (Adam's update and the weight decay alike) is the plain step times
  0.5^(2 - i) for block i, 0.5^3 for the embeddings (and DeBERTa's shared
  relative table), 1 for the pooler and the head; on 1 replica and on 2."""
  from bertexp.model import encoders
  from bertexp.model import modeling
  from bertexp.train import strategy as strategy_lib
  strategy = (strategy_lib.make_strategy("default") if replicas == 1 else
              strategy_lib.make_strategy("mirrored", cpu_replicas=replicas))
  with strategy.scope():
    tf_keras.utils.set_random_seed(1)
    config = encoders.config_from_dict(
        DEBERTA_TINY if family == "deberta-v2" else TINY_CONFIG)
    model = modeling.ClassifierModel(encoders.build_encoder(config), 2,
                                     dropout_rate=0.0).build_variables()
  rng = np.random.default_rng(0)
  features = {"input_word_ids": rng.integers(5, 20, [4, 8]).astype(np.int32),
              "input_mask": np.ones([4, 8], np.int32),
              "input_type_ids": np.zeros([4, 8], np.int32)}
  labels = np.array([0, 1, 1, 0])
  plain = _one_adamw_step(model, features, labels, None, strategy)
  decayed = _one_adamw_step(model, features, labels, 0.5, strategy)
  expected_rates = {"layer_1/": 0.5, "layer_0/": 0.25, "/embeddings/": 0.125,
                    "/relative_embeddings/": 0.125}
  seen, moved = set(), 0
  for name, change in plain.items():
    rate = next((r for key, r in expected_rates.items() if key in name), 1.0)
    seen.add(rate)
    # atol: float32 rounding of a difference of weights up to 1 (LayerNorm
    # scales); a wrong rate moves a step of >= 1e-4 by half or more.
    np.testing.assert_allclose(decayed[name], rate * change, rtol=1e-4,
                               atol=1e-7, err_msg=name)
    moved += np.abs(change).max() > 100 * 1e-7
  # Every variable stepped far beyond atol but the attention key biases
  # (DeBERTa's relative-position keys too: a softmax does not see a shift,
  # so no gradient, and no weight decay).
  key_biases = [name for name in plain if name.endswith("key/bias:0")]
  assert len(key_biases) == TINY_CONFIG["num_hidden_layers"] * (
      2 if family == "deberta-v2" else 1)
  assert moved == len(plain) - len(key_biases)
  assert seen == {1.0, 0.5, 0.25, 0.125}
  if family == "deberta-v2":              # the table and its LayerNorm
    assert len([n for n in plain if "/relative_embeddings/" in n]) == 3


def test_layer_decay_is_refused_with_lamb_and_outside_zero_one():
  with pytest.raises(ValueError, match="layer_decay is an AdamW option"):
    optimization.create_optimizer(10, 0, learning_rate=1e-3, kind="lamb",
                                  layer_decay=0.8)
  variable = tf.Variable([1.0], name="layer_0/x")
  with pytest.raises(ValueError, match=r"layer_decay must be in \(0, 1\]"):
    optimization.layer_rates([variable], 1.5, {variable.ref(): ("l", 0)})
  # Depths come from the encoder, never from a name that looks like one.
  with pytest.raises(ValueError, match="no Transformer blocks"):
    optimization.layer_rates([variable], 0.5, {})
  with pytest.raises(ValueError, match="layer_decay needs the model's layers"):
    optimization.create_optimizer(10, 0, learning_rate=1e-3,
                                  layer_decay=0.8).build([variable])
