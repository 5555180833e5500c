"""The one train step, on 1 and 2 replicas: gradient clipping on the global
norm of the summed gradient (against float64), float16 overflow skipped with
the loss scale lowered, the loss normalised over the global batch; the training input iterator
kept when its trainer is gone."""

import gc
import weakref

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from conftest import tiny_sst2_task
from conftest import tiny_trainer

BATCH = 8


@pytest.fixture
def task(tmp_path, tiny_vocab):
  return tiny_sst2_task(str(tmp_path), tiny_vocab, dropout=0.0, layers=1)


def _trainer(task, replicas, make_optimizer, clip_norm=1.0, accumulation=1):
  return tiny_trainer(task, replicas, make_optimizer, BATCH, total_steps=1,
                      clip_norm=clip_norm,
                      gradient_accumulation_steps=accumulation)


def _float64_gradient(task, model):
  """The mean loss's gradient over the first global batch, computed apart
  from the trainer, in float64 after the float32 backward pass."""
  features, labels = next(iter(task.build_inputs("train", None, BATCH)))
  variables = model.trainable_variables
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(task.per_example_loss(labels, model(features,
                                                              training=True)))
  grads = tape.gradient(loss, variables)
  return {v.name: tf.convert_to_tensor(g).numpy().astype(np.float64)
          for g, v in zip(grads, variables) if g is not None}


@pytest.mark.parametrize("replicas", [1, 2])
def test_clipping_uses_the_global_norm_of_the_summed_gradient(replicas, task):
  """SGD with learning rate 1: the applied step is the clipped gradient, so
  its norm is clip_norm and its direction the float64 reference gradient's."""
  clip = 1e-3
  trainer = _trainer(task, replicas, lambda: tf_keras.optimizers.SGD(1.0),
                     clip_norm=clip)
  reference = _float64_gradient(task, trainer.model)
  norm = np.sqrt(sum(np.sum(g * g) for g in reference.values()))
  assert norm > 10 * clip           # the clip is active
  before = {v.name: v.numpy().astype(np.float64)
            for v in trainer.model.trainable_variables}
  logs = trainer.train(tf.constant(1))
  assert float(logs["gradient_norm"]) == pytest.approx(norm, rel=1e-4)
  step = {v.name: before[v.name] - v.numpy()
          for v in trainer.model.trainable_variables if v.name in reference}
  assert np.sqrt(sum(np.sum(s * s) for s in step.values())) == pytest.approx(
      clip, rel=1e-4)
  for name, gradient in reference.items():
    np.testing.assert_allclose(step[name], gradient * clip / norm, atol=1e-7,
                               err_msg=name)
  # The pooler reaches the loss here; variables that do not are skipped.
  assert len(reference) == len(trainer.model.trainable_variables)


@pytest.mark.parametrize("replicas, accumulation", [(1, 1), (2, 1), (2, 2)])
def test_float16_overflow_skips_the_step_and_lowers_the_scale(
    replicas, accumulation, task):
  """With gradient accumulation, an overflow in a micro-batch skips the whole
  update."""
  tf_keras.mixed_precision.set_global_policy("mixed_float16")
  overflow = 2.0 ** 40       # loss * 2^40 overflows float16 activations' grads
  trainer = _trainer(task, replicas, lambda: (
      tf_keras.mixed_precision.LossScaleOptimizer(
          tf_keras.optimizers.SGD(0.1), initial_scale=overflow)),
                     accumulation=accumulation)
  before = [v.numpy() for v in trainer.model.trainable_variables]
  trainer.train(tf.constant(1))
  for old, variable in zip(before, trainer.model.trainable_variables):
    np.testing.assert_array_equal(variable.numpy(), old, err_msg=variable.name)
  assert float(trainer.optimizer.loss_scale) == overflow / 2
  assert int(trainer.state.nonfinite_steps.numpy()) == 1   # counted
  # The scale halves on every overflow until steps fit, then they apply.
  trainer.train(tf.constant(40))
  halvings = round(np.log2(overflow / float(trainer.optimizer.loss_scale)))
  assert halvings > 10
  assert int(trainer.state.nonfinite_steps.numpy()) == halvings
  changed = [not np.array_equal(v.numpy(), old)
             for old, v in zip(before, trainer.model.trainable_variables)]
  assert all(changed)
  assert all(np.isfinite(v.numpy()).all()
             for v in trainer.model.trainable_variables)


def test_the_training_input_iterator_outlives_its_trainer(task):
  """Destroying a distributed input iterator can block for a minute
  (tf.data's autotuning threads): a finished trainer's is kept until the
  process exits."""
  trainer = _trainer(task, 1, lambda: tf_keras.optimizers.SGD(1e-3))
  trainer.train(tf.constant(1))
  iterator = weakref.ref(trainer._train_iterator)  # pylint: disable=protected-access
  del trainer
  gc.collect()
  assert iterator() is not None
