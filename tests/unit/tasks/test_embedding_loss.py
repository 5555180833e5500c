"""The dual encoder's losses over the global batch
(bertexp/tasks/embedding/losses.py), in-batch negatives and CoSENT: hand
computations, and 2 mirrored replicas and 2 localhost workers equal to one
replica on the same global batch (loss and gradients), duplicates of a
positive and hard negatives included. Run as a script, this file is one of those workers."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bertexp.tasks.embedding import losses
from bertexp.train import strategy as strategy_lib


def _log_softmax(row):
  row = row - row.max()
  return row - np.log(np.exp(row).sum())


def test_each_query_against_every_positive_but_its_duplicates():
  """3 queries; documents 0 and 2 are the same document (id 7): query 0
  is not pushed away from document 2, nor query 2 from document 0."""
  queries = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], np.float32)
  positives = np.array([[0.8, 0.6], [0.0, 1.0], [1.0, 0.0]], np.float32)
  ids = np.array([7, 8, 7], np.int64)
  got = losses.in_batch_negatives_loss(queries, positives, ids,
                                       scale=5.0).numpy()
  scores = 5.0 * queries @ positives.T                              # [3, 3]
  want = [-_log_softmax(scores[0, [0, 1]])[0],
          -_log_softmax(scores[1])[1],
          -_log_softmax(scores[2, [1, 2]])[1]]
  np.testing.assert_allclose(got, want, rtol=1e-6)
  # Without the duplicate rule query 0 would count document 2 against it.
  plain = -_log_softmax(scores[0])[0]
  assert abs(plain - want[0]) > 0.1
  # Symmetric: each document against every query, where a query whose
  # positive is the same document is no negative either.
  both = losses.in_batch_negatives_loss(queries, positives, ids, scale=5.0,
                                        symmetric=True).numpy()
  back = [-_log_softmax(scores.T[0, [0, 1]])[0],
          -_log_softmax(scores.T[1])[1],
          -_log_softmax(scores.T[2, [1, 2]])[1]]
  np.testing.assert_allclose(both, (np.array(want) + back) / 2, rtol=1e-6)


def test_cosent_penalises_each_pair_ranked_below_a_lower_scored_one():
  """CoSENT by hand: log(1 + sum over pairs (i, j) with score_i > score_j
  of exp(scale * (cos_j - cos_i))); tied scores make no term."""
  a = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [1.0, 1.0]], np.float32)
  b = np.array([[0.8, 0.6], [1.0, 0.2], [1.0, 0.0], [1.0, 0.9]], np.float32)
  scores = np.array([4.0, 1.0, 2.5, 1.0], np.float32)
  got = losses.cosent_loss(a, b, scores, scale=7.0).numpy()
  unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
  cos = (unit(a) * unit(b)).sum(1)
  terms = [7.0 * (cos[j] - cos[i]) for i in range(4) for j in range(4)
           if scores[i] > scores[j]]
  assert len(terms) == 5                    # the tie (1, 3) makes none
  want = np.log(1.0 + np.exp(terms).sum())
  np.testing.assert_allclose(got, [want] * 4, rtol=1e-6)
  # Ranked as the scores say, the loss is far lower than ranked backwards.
  backwards = losses.cosent_loss(a, b, -scores, scale=7.0).numpy()[0]
  assert backwards > want + 1.0


GLOBAL_BATCH, WIDTH, HARD = 8, 6, 2
# Document 1 is the positive of rows 0, 3 and 5: duplicates on both
# replicas' halves and across them.
IDS = np.array([1, 2, 3, 1, 5, 1, 6, 7], np.int64)


def _loss(name, encoder, batch):
  """[b] per-example loss `name` of this replica's rows of the batch."""
  if name == "cosent":
    return losses.cosent_loss(encoder(batch["query"]),
                              encoder(batch["positive"]), batch["scores"],
                              scale=3.0)
  return losses.in_batch_negatives_loss(
      encoder(batch["query"]), encoder(batch["positive"]), batch["ids"],
      scale=3.0, symmetric=name == "symmetric",
      hard_negatives=encoder(batch["hard"]))


def _step(strategy, loss_name):
  """(global loss, {variable: gradient}) of one batch through a shared
  Dense "encoder", the batch split over `strategy`'s replicas."""
  rng = np.random.default_rng(0)
  features = {
      "query": rng.normal(size=(GLOBAL_BATCH, 5)).astype(np.float32),
      "positive": rng.normal(size=(GLOBAL_BATCH, 5)).astype(np.float32),
      "hard": rng.normal(size=(GLOBAL_BATCH, HARD, 5)).astype(np.float32),
      "ids": IDS,
      "scores": rng.uniform(0, 5, size=GLOBAL_BATCH).astype(np.float32)}
  with strategy.scope():
    tf_keras.utils.set_random_seed(3)
    encoder = tf_keras.layers.Dense(WIDTH)
    encoder.build([None, 5])
  rows = GLOBAL_BATCH // strategy.num_replicas_in_sync

  @tf.function
  def step():
    def replica_step():
      first = tf.distribute.get_replica_context().replica_id_in_sync_group * rows
      batch = {k: tf.constant(v)[first:first + rows]
               for k, v in features.items()}
      with tf.GradientTape() as tape:
        per_example = _loss(loss_name, encoder, batch)
        loss = tf.reduce_sum(per_example) / GLOBAL_BATCH
      return loss, tape.gradient(loss, encoder.trainable_variables)
    loss, grads = strategy.run(replica_step)
    return (strategy.reduce("SUM", loss, axis=None),
            [strategy.reduce("SUM", g, axis=None) for g in grads])

  loss, grads = step()
  return float(loss), [g.numpy() for g in grads]


def _assert_equal_steps(ours, reference):
  assert ours[0] == pytest.approx(reference[0], rel=1e-6)
  for got, want in zip(ours[1], reference[1]):
    # Each gradient moves far beyond the tolerance: a replica that saw only
    # its own half of the negatives would differ by much more.
    assert np.abs(want).max() > 1e-2
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


LOSSES = ("in_batch", "symmetric", "cosent")


@pytest.mark.parametrize("loss_name", LOSSES)
def test_two_replicas_equal_one_on_the_same_global_batch(loss_name):
  one = _step(strategy_lib.make_strategy("default"), loss_name)
  two = _step(strategy_lib.make_strategy("mirrored", cpu_replicas=2),
              loss_name)
  _assert_equal_steps(two, one)


def test_two_workers_equal_one_replica(tmp_path):
  """In-batch negatives (symmetric, with hard negatives) and CoSENT: 2
  MultiWorkerMirroredStrategy processes on localhost (this file as their
  script) give one replica's loss and gradients."""
  import forked_python        # not at the top: this file is the workers' script
  from bertexp.launch.local import free_ports
  cluster = {"worker": [f"localhost:{p}" for p in free_ports(2)]}
  as_script = ("import runpy, sys; "
               "runpy.run_path(sys.argv[1], run_name='__main__')")
  workers = [forked_python.popen(
      ["-c", as_script, os.path.abspath(__file__),
       str(tmp_path / f"{i}.json")],
      env=dict(os.environ, TF_CONFIG=json.dumps(
          {"cluster": cluster, "task": {"type": "worker", "index": i}})),
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
  try:
    for worker in workers:
      output, _ = worker.communicate(timeout=300)
      assert worker.returncode == 0, output[-3000:]
  finally:
    for worker in workers:
      worker.kill()
  one = strategy_lib.make_strategy("default")
  for i in range(2):
    with open(tmp_path / f"{i}.json") as f:
      steps = json.load(f)
    for name in ("symmetric", "cosent"):
      loss, grads = steps[name]
      _assert_equal_steps((loss, [np.array(g) for g in grads]),
                          _step(one, name))


if __name__ == "__main__":            # one worker of test_two_workers_...
  workers = strategy_lib.make_strategy("multi_worker_mirrored")
  results = {}
  for loss_name in ("symmetric", "cosent"):
    worker_loss, worker_grads = _step(workers, loss_name)
    results[loss_name] = [worker_loss, [g.tolist() for g in worker_grads]]
  with open(sys.argv[-1], "w") as out:
    json.dump(results, out)
