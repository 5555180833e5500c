"""Gradient accumulation, activation recompute and dynamic padding, on 1 and 2
replicas: each must give the weights, gradients or eval outputs of the plain
run."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bertexp.data import pipeline
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.train import optimization
from bertexp.train import strategy as strategy_lib
from conftest import TINY_CONFIG
from conftest import tiny_sst2_task
from conftest import tiny_trainer

BATCH = 8
ONE_LAYER = 1


def _task(tmp_path, vocab, dropout):
  # One Transformer layer: accumulation, recompute and padding act on every
  # block alike (test_recompute_is_in_the_gradient_graph counts them on two).
  return tiny_sst2_task(str(tmp_path), vocab, dropout, layers=ONE_LAYER)


def _trainer(task, replicas, *, accumulation=1, jit_compile=False,
             make_optimizer=None, total_steps=20, pad_to_multiple_of=None):
  tf_keras.utils.set_random_seed(3)      # the same encoder weights each time
  return tiny_trainer(
      task, replicas, make_optimizer or (lambda: optimization.create_optimizer(
          total_steps, 4, learning_rate=1e-3)), BATCH,
      total_steps=total_steps, jit_compile=jit_compile,
      gradient_accumulation_steps=accumulation,
      pad_to_multiple_of=pad_to_multiple_of)


def _train_with_lr_trace(trainer, steps):
  trace = []
  for _ in range(steps):
    trace.append(float(trainer.current_learning_rate()))
    trainer.train(tf.constant(1))
  return trace


@pytest.mark.parametrize("replicas", [1, 2])
def test_four_micro_batches_give_the_weights_of_one_batch(replicas, tmp_path,
                                                         tiny_vocab):
  """2 replicas: with XLA-compiled gradients, as on a TPU."""
  task = _task(tmp_path, tiny_vocab, dropout=0.0)
  plain = _trainer(task, replicas)
  accumulated = _trainer(task, replicas, accumulation=4,
                         jit_compile=replicas == 2)
  start = [v.numpy() for v in plain.model.trainable_variables]
  for v, value in zip(accumulated.model.trainable_variables, start):
    np.testing.assert_array_equal(v.numpy(), value)   # same starting point
  plain_lr = _train_with_lr_trace(plain, 20)
  accumulated_lr = _train_with_lr_trace(accumulated, 20)
  assert accumulated_lr == plain_lr                    # optimizer steps count
  assert int(accumulated.global_step.numpy()) == 20
  assert int(accumulated.state.examples_seen.numpy()) == 20 * BATCH
  moved = 0
  for p, a, s in zip(plain.model.trainable_variables,
                     accumulated.model.trainable_variables, start):
    np.testing.assert_allclose(a.numpy(), p.numpy(), atol=1e-5, err_msg=p.name)
    moved += not np.allclose(p.numpy(), s, atol=1e-6)
  # Every weight trained but the attention key biases (a softmax does not
  # see a shift: their gradient is zero).
  assert moved == len(start) - ONE_LAYER


def test_a_batch_that_does_not_split_into_micro_batches_is_an_error(
    tmp_path, tiny_vocab):
  task = _task(tmp_path, tiny_vocab, dropout=0.0)
  with pytest.raises(ValueError, match="TRAIN_BATCH_SIZE 8 does not split "
                     "into GRADIENT_ACCUMULATION_STEPS 3 .* multiple of 6"):
    _trainer(task, 2, accumulation=3)


def _gradients(task, model, features, labels, seed):
  with tf.GradientTape() as tape:
    logits = model(features, training=True, dropout_seed=seed)
    loss = tf.reduce_mean(task.per_example_loss(labels, logits))
  return loss, tape.gradient(loss, model.trainable_variables)


def _classifier(config_path, recompute):
  tf_keras.utils.set_random_seed(5)
  encoder = encoders.build_encoder(
      modeling.BertConfig.from_json_file(config_path),
      encoders.EncoderSettings(recompute=recompute))
  return modeling.ClassifierModel(encoder, 2, dropout_rate=0.1,
                                  seed=1).build_variables()


@pytest.mark.parametrize("jit_compile", [False, True])
def test_recompute_gives_the_same_gradients_with_dropout_on(
    jit_compile, tmp_path, tiny_vocab):
  task = _task(tmp_path, tiny_vocab, dropout=0.3)
  features, labels = next(iter(task.build_inputs("train", None, BATCH)))
  seed = tf.constant([7, 11], tf.int64)
  results = []
  for recompute in (False, True):
    model = _classifier(task.bert_config_file, recompute)
    run = tf.function(lambda f, l, s, model=model: _gradients(task, model, f,
                                                              l, s),
                      jit_compile=jit_compile)
    results.append(run(features, labels, seed))
  (plain_loss, plain), (recomputed_loss, recomputed) = results
  assert float(recomputed_loss) == pytest.approx(float(plain_loss), abs=1e-6)
  for g, r in zip(plain, recomputed):
    np.testing.assert_allclose(tf.convert_to_tensor(r).numpy(),
                               tf.convert_to_tensor(g).numpy(), atol=1e-5)
  # Dropout is on: another seed gives another loss.
  other_model = _classifier(task.bert_config_file, True)
  other = tf.function(lambda f, l, s: _gradients(task, other_model, f, l, s))
  assert abs(float(other(features, labels, seed + 1)[0]) -
             float(plain_loss)) > 1e-4


@pytest.mark.parametrize("replicas", [1, 2])
def test_training_with_recompute_gives_the_weights_of_training_without(
    replicas, tmp_path, tiny_vocab):
  """Dropout on, the trainer's seeded masks (2 replicas: XLA-compiled
  gradients): 3 steps, same weights."""
  task = _task(tmp_path, tiny_vocab, dropout=0.3)
  weights = []
  for recompute in (False, True):
    trainer = _trainer(task, replicas, jit_compile=replicas == 2)
    trainer.state.data_seed.assign(4)
    trainer.model.encoder.recompute = recompute   # read when traced
    trainer.train(tf.constant(3))
    weights.append([v.numpy() for v in trainer.model.trainable_variables])
  for plain, recomputed in zip(*weights):
    np.testing.assert_allclose(recomputed, plain, atol=1e-5)


def test_trimmed_length_is_the_longest_sequence_rounded_up():
  mask = lambda *lengths: tf.sequence_mask(lengths, 16, tf.int32)
  assert int(pipeline.trimmed_length(mask(3, 5), 4)) == 8
  assert int(pipeline.trimmed_length(mask(3, 8), 4)) == 8
  assert int(pipeline.trimmed_length(mask(3, 15), 8)) == 16   # at most S
  assert int(pipeline.trimmed_length(mask(0, 0), 4)) == 4     # eval filler
  assert int(pipeline.trimmed_length(mask(3, 5), 1)) == 5     # exact longest
  features = {"input_word_ids": mask(3, 5) * 7, "input_mask": mask(3, 5),
              "input_type_ids": mask(3, 5) * 0, "label": tf.constant([1, 0])}
  trimmed = pipeline.trim_to(features, 8)
  assert trimmed["input_word_ids"].shape == (2, 8)
  assert trimmed["label"] is features["label"]


# On several replicas: the TPU check compares static padding on 8 replicas
# with dynamic padding on one (outputs, metrics, predictions, weights).
@pytest.mark.parametrize("replicas", [1])
def test_dynamic_padding_keeps_eval_outputs_and_metrics(replicas, tmp_path,
                                                        tiny_vocab):
  """At the exact longest sequence (multiple 1, the CPU default) and rounded
  up to a multiple of 4."""
  task = _task(tmp_path, tiny_vocab, dropout=0.0)
  features, _ = next(iter(task.build_inputs("eval", None, BATCH)))
  assert int(pipeline.trimmed_length(features["input_mask"], 4)) < 16  # bites
  full = _trainer(task, replicas).gather("eval")
  full_metrics = task.finalize_eval(full)
  for multiple in (1, 4):
    dynamic = _trainer(task, replicas,
                       pad_to_multiple_of=multiple).gather("eval")
    assert sorted(full) == sorted(dynamic)
    for key in full:
      np.testing.assert_allclose(dynamic[key], full[key], atol=1e-5,
                                 err_msg=f"{key}, multiple {multiple}")
    assert task.finalize_eval(dynamic) == pytest.approx(full_metrics, abs=1e-6)


@pytest.mark.parametrize("replicas", [1, 2])
def test_dynamic_padding_keeps_the_train_step(replicas, tmp_path, tiny_vocab):
  """One SGD step at multiples 1 and 4 against full padding."""
  task = _task(tmp_path, tiny_vocab, dropout=0.0)
  sgd = lambda: tf_keras.optimizers.SGD(1.0)
  full = _trainer(task, replicas, make_optimizer=sgd)
  full_logs = full.train(tf.constant(1))
  for multiple in (1, 4):
    dynamic = _trainer(task, replicas, make_optimizer=sgd,
                       pad_to_multiple_of=multiple)
    dynamic_logs = dynamic.train(tf.constant(1))
    assert float(dynamic_logs["loss"]) == pytest.approx(
        float(full_logs["loss"]), abs=1e-6)
    assert float(dynamic_logs["gradient_norm"]) == pytest.approx(
        float(full_logs["gradient_norm"]), rel=1e-5)
    for f, d in zip(full.model.trainable_variables,
                    dynamic.model.trainable_variables):
      np.testing.assert_allclose(d.numpy(), f.numpy(), atol=1e-5,
                                 err_msg=f"{f.name}, multiple {multiple}")


def test_auto_padding_multiple_is_exact_on_cpus_and_8_on_gpus():
  cpus = tf.distribute.MirroredStrategy(["/cpu:0"])
  assert strategy_lib.padding_multiple(cpus, "auto") == 1
  assert strategy_lib.padding_multiple(tf.distribute.get_strategy()) == 1
  # Placement is lazy: a strategy over a GPU this machine lacks still names it.
  gpu = tf.distribute.OneDeviceStrategy("/gpu:0")
  assert strategy_lib.padding_multiple(gpu, "auto") == 8
  assert strategy_lib.padding_multiple(gpu, 16) == 16      # as given
  assert strategy_lib.padding_multiple(cpus, 0) is None    # off
  assert strategy_lib.padding_multiple(cpus, None) is None
  with pytest.raises(ValueError, match="pad_to_multiple_of='16'"):
    strategy_lib.padding_multiple(cpus, "16")


def _stream(task, batches, **order):
  """(record_index, length) of the first `batches` batches of 2."""
  dataset = task.build_inputs("train", None, 2,
                              train_order=pipeline.TrainOrder(seed=5, **order))
  rows = []
  for features, _ in dataset.take(batches):
    lengths = features["input_mask"].numpy().sum(1)
    rows.extend(zip(features["record_index"].numpy().tolist(),
                    lengths.tolist()))
  return rows


def test_group_by_length_sorts_each_megabatch_and_resumes_exactly(
    tmp_path, tiny_vocab):
  task = _task(tmp_path, tiny_vocab, dropout=0.0)
  megabatch = pipeline.MEGABATCH_BATCHES * 2
  plain = _stream(task, 2 * pipeline.MEGABATCH_BATCHES)
  grouped = _stream(task, 2 * pipeline.MEGABATCH_BATCHES, group_by_length=True)
  for first in (0, megabatch):
    part, same = grouped[first:first + megabatch], plain[first:first + megabatch]
    assert sorted(part) == sorted(same)           # the same examples...
    lengths = [length for _, length in part]
    assert lengths == sorted(lengths, reverse=True)   # ...longest first
    assert lengths[0] > lengths[-1]
  # A resumed run (60 examples in, mid-megabatch) continues the same order.
  resumed = _stream(task, 40, group_by_length=True, start=60)
  assert resumed == grouped[60:140]


def _gradient_graph_matmuls(recompute):
  """Matrix multiplications in the traced gradient of the tiny encoder's
  pooled output (nested function bodies included)."""
  encoder = modeling.BertEncoder(modeling.BertConfig.from_dict(TINY_CONFIG),
                                 recompute=recompute).build_variables()
  inputs = modeling.dummy_inputs(batch_size=2, seq_length=8)

  @tf.function
  def gradients():
    with tf.GradientTape() as tape:
      pooled = encoder(inputs, training=True, dropout_seed=tf.constant(
          [1, 2], tf.int64))["pooled_output"]
      loss = tf.reduce_sum(pooled)
    return tape.gradient(loss, encoder.trainable_variables)

  graph = gradients.get_concrete_function().graph.as_graph_def()
  ops = [node.op for node in graph.node] + [
      node.op for function in graph.library.function
      for node in function.node_def]
  return sum(op in ("MatMul", "_FusedMatMul", "BatchMatMulV2") for op in ops)


def test_recompute_is_in_the_gradient_graph():
  """With recompute the backward pass runs each block's forward matrix
  multiplications again (query, key, value, scores, context, attention
  output, intermediate, output: at least 6 a block); without, it does not.
  Equal gradients alone would pass with recompute silently off."""
  plain, recomputed = (_gradient_graph_matmuls(False),
                       _gradient_graph_matmuls(True))
  layers = TINY_CONFIG["num_hidden_layers"]
  assert recomputed - plain >= 6 * layers, (plain, recomputed)
