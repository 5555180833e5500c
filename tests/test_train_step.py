"""The one train step, on 1 and 2 replicas: gradient clipping on the global
norm of the summed gradient (against float64), float16 overflow skipped with
the loss scale lowered, the loss normalised over the global batch."""
import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bertexp import strategy as strategy_lib
from bertexp import trainer as trainer_lib
from bertexp.tasks import classification
from conftest import TINY_CONFIG
from conftest import prepare_tiny_sst2_run

BATCH = 8


@pytest.fixture
def task(tmp_path, tiny_vocab):
  config = tmp_path / "dropout_free.json"
  config.write_text(json.dumps(dict(TINY_CONFIG, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)))
  paths = prepare_tiny_sst2_run(str(tmp_path / "exp"), tiny_vocab, str(config))
  return classification.ClassificationTask(
      bert_config_file=str(config), meta_data_path=paths["INPUT_META_DATA_PATH"],
      train_data_path=paths["TRAIN_DATA_PATH"], shuffle_buffer_size=0,
      dropout_rate=0.0, seed=1)


def _strategy(replicas):
  return (strategy_lib.make_strategy("default") if replicas == 1 else
          strategy_lib.make_strategy("mirrored", cpu_replicas=replicas))


def _trainer(task, strategy, make_optimizer, clip_norm=1.0):
  with strategy.scope():
    model = task.build_model()
    optimizer = make_optimizer()
    optimizer.build(model.trainable_variables)
  dataset = strategy.distribute_datasets_from_function(
      lambda ctx: task.build_inputs("train", ctx,
                                    ctx.get_per_replica_batch_size(BATCH)))
  return trainer_lib.Trainer(
      task=task, model=model, optimizer=optimizer, strategy=strategy,
      global_batch_size=BATCH, eval_batch_size=BATCH, total_steps=1,
      clip_norm=clip_norm, train_dataset=dataset)


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
  strategy = _strategy(replicas)
  clip = 1e-3
  trainer = _trainer(task, strategy, lambda: tf_keras.optimizers.SGD(1.0),
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


@pytest.mark.parametrize("replicas", [1, 2])
def test_float16_overflow_skips_the_step_and_lowers_the_scale(replicas, task):
  tf_keras.mixed_precision.set_global_policy("mixed_float16")
  strategy = _strategy(replicas)
  overflow = 2.0 ** 40       # loss * 2^40 overflows float16 activations' grads
  trainer = _trainer(task, strategy, lambda: (
      tf_keras.mixed_precision.LossScaleOptimizer(
          tf_keras.optimizers.SGD(0.1), initial_scale=overflow)))
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
