"""The strategy matrix: runs on 2 workers and 2 CPU replicas equal the
1-replica run.

With dropout off and a fixed data order, SQuAD v2.0 and pretraining on 2
MultiWorkerMirroredStrategy workers on localhost, and distillation (a
classification student) and tagging on 2 workers and on 2 mirrored CPU
replicas, give
the 1-replica weights, loss, gradient norm, evaluation metrics and
predictions over the same global batch. Every task on 8 XLA replicas (the
TPU check) is in test_tpu_check.py; mixed precision, phase two of
pretraining and the 16 GB SQuAD file also run here.
"""
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from bertexp.data import pipeline
import matrix_fixtures as mf

FLOAT32 = ['bertexp.configure_numerics.precision="float32"']


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
  return mf.build_fixtures(str(tmp_path_factory.mktemp("matrix")))


@pytest.fixture(scope="module")
def one_replica(fixtures, tmp_path_factory):
  """The reference run of each task on the default strategy (made once):
  --mode=train_eval_predict, where the 2-replica cells train and predict in
  two commands, so their equality also shows the one command does both."""
  runs = {}

  def get(task):
    if task not in runs:
      model_dir = str(tmp_path_factory.mktemp(f"one_{task}"))
      mf.run_in_process(fixtures[task], model_dir, mf.STRATEGIES["default"],
                        FLOAT32, mode=_all_modes(task))
      runs[task] = model_dir
    return runs[task]
  return get


def _all_modes(task):
  """Train, evaluate and predict in one command (pretraining has no
  predict)."""
  return "train_and_eval" if task == "pretraining" else "train_eval_predict"


# Two workers for each kind of step: SQuAD v2.0 (span head, null answers,
# the QA eval path), pretraining (MLM + NSP, LAMB with sparse embedding
# gradients) and, in the distillation cell below, classification (its
# student is a ClassificationTask; that cell also runs 2 mirrored CPU
# replicas, the non-XLA multi-GPU path). Regression and SQuAD v1.1 take the
# same worker code; the TPU check compares every task on 8 replicas.
WORKER_TASKS = ("squad_v2.0", "pretraining")


@pytest.mark.parametrize("task", WORKER_TASKS)
def test_two_workers_equal_one_replica(task, fixtures, one_replica, tmp_path):
  model_dir = str(tmp_path / "run")
  mf.run_two_workers(fixtures[task], model_dir, FLOAT32, mode=_all_modes(task))
  mf.assert_equal_runs(model_dir, one_replica(task),
                     fixtures[task]["params"].get("INIT_CHECKPOINT"))
  # The second worker wrote only into its private folder.
  assert os.path.isdir(os.path.join(model_dir, "workers", "worker_1"))


def _logged_data_seeds(output):
  """{worker: the data order seed it logged} from a launch's output."""
  seeds = {}
  for line in output.splitlines():
    found = re.search(r"^\[worker (\d+)\] .*training data: seed (\d+),", line)
    if found:
      seeds[int(found.group(1))] = int(found.group(2))
  return seeds


def _records_each_worker_reads(spec, seed, steps, per_worker_batch):
  """[the record indices worker i trains on in `steps` steps] for 2
  workers sharding the order of `seed` (shuffled), as the run's pipeline
  does."""
  task_file = spec["params"]["TRAIN_DATA_PATH"]
  decode = lambda serialized: ({"input_word_ids": serialized}, serialized)
  shards = []
  for worker in range(2):
    context = tf.distribute.InputContext(num_input_pipelines=2,
                                         input_pipeline_id=worker,
                                         num_replicas_in_sync=2)
    batches = pipeline.training_batches(
        task_file, decode, batch_size=per_worker_batch, input_context=context,
        train_order=pipeline.TrainOrder(seed=seed))
    shards.append([int(i) for features, _ in batches.take(steps)
                   for i in features["record_index"].numpy()])
  return shards


def test_two_workers_without_seed_read_every_record_once_per_epoch(
    fixtures, tmp_path):
  """SEED unbound (as the template and glue/*.gin leave it): each worker
  draws a data order seed, and all of them take the chief's, so the two
  shards of one shuffled epoch hold every training record exactly once
  (each worker shuffling its own permutation saw some twice, others never).
  The chief's seed is the one its checkpoint keeps for a resumed run."""
  spec = fixtures["classification"]
  records = sum(1 for _ in tf.data.TFRecordDataset(
      spec["params"]["TRAIN_DATA_PATH"]))
  batch = 8
  steps = records // batch            # one epoch
  assert records % batch == 0 and steps > 2
  model_dir = str(tmp_path / "run")
  output = mf.run_two_workers(
      spec, model_dir, FLOAT32 + [
          "bertexp.ClassificationTask.shuffle_buffer_size=10000"],
      mode="train", SEED=None, TRAIN_STEPS=steps, STEPS_PER_LOOP=steps)
  seeds = _logged_data_seeds(output)
  assert sorted(seeds) == [0, 1], output[-3000:]
  assert seeds[0] == seeds[1], seeds
  kept = tf.train.load_variable(tf.train.latest_checkpoint(model_dir),
                                "input/data_seed/.ATTRIBUTES/VARIABLE_VALUE")
  assert kept == seeds[0]
  shards = _records_each_worker_reads(spec, seeds[0], steps, batch // 2)
  assert sorted(shards[0] + shards[1]) == list(range(records))
  # The order is shuffled: a file-order epoch would pass the line above
  # whatever seed each worker took.
  assert shards[0] != list(range(0, records, 2))


def _distillation_spec(fixtures, teacher_dir, root):
  """The shipped distillation file with the classification cell's run as
  teacher and a narrower 1-layer student from random weights: every term
  on (distill, label, hidden states through the projection, attention)."""
  student_config = os.path.join(root, "student_config.json")
  with open(fixtures["classification"]["params"]["BERT_CONFIG_FILE"]) as f:
    config = json.load(f)
  with open(student_config, "w") as f:
    json.dump(dict(config, hidden_size=8, intermediate_size=16,
                   num_hidden_layers=1), f)
  classification = fixtures["classification"]
  params = dict(classification["params"], BERT_CONFIG_FILE=student_config,
                TEACHER_DIR=teacher_dir, INIT_CHECKPOINT=None,
                STUDENT_INIT="random", TEMPERATURE=2.0, LABEL_WEIGHT=0.5,
                HIDDEN_WEIGHT=1.0, ATTENTION_WEIGHT=1.0)
  return dict(classification, gin_file="experiments/demo/"
              "movie_sentiment_distill_cpu.gin", params=params)


def test_distillation_equal_on_one_replica_two_replicas_and_two_workers(
    fixtures, one_replica, tmp_path):
  """The distillation loss (teacher forward pass inside the step, four
  terms, a projection) keeps the global-batch normalisation: 2 mirrored CPU
  replicas and 2 localhost workers give the 1-replica weights, loss,
  gradient norm, metrics and predictions."""
  spec = _distillation_spec(fixtures, one_replica("classification"),
                            str(tmp_path))
  runs = {name: str(tmp_path / name) for name in ("one", "mirrored", "workers")}
  mf.run_in_process(spec, runs["one"], mf.STRATEGIES["default"], FLOAT32,
                    mode="train_eval_predict")
  mf.run_in_process(spec, runs["mirrored"], mf.STRATEGIES["mirrored_2"],
                    FLOAT32, mode="train_eval_predict")
  mf.run_two_workers(spec, runs["workers"], FLOAT32, mode="train_eval_predict")
  weights = mf.model_weights(runs["one"])
  assert any("hidden_projection" in name for name in weights)
  for name in ("mirrored", "workers"):
    mf.assert_equal_runs(runs[name], runs["one"])


def test_tagging_equal_on_one_replica_two_replicas_and_two_workers(
    fixtures, one_replica, tmp_path):
  """Tagging's loss is normalised by the labelled word pieces of the global
  batch (windows hold different numbers), and evaluation merges windows of
  one sentence gathered from different replicas: 2 mirrored CPU replicas
  and 2 localhost workers give the 1-replica weights, loss, gradient norm,
  entity scores and predictions (CoNLL and entities)."""
  spec = fixtures["tagging"]
  meta = json.load(open(spec["params"]["INPUT_META_DATA_PATH"]))
  assert meta["sentences_split_into_windows"]["eval"] >= 3
  reference = one_replica("tagging")
  runs = {name: str(tmp_path / name) for name in ("mirrored", "workers")}
  mf.run_in_process(spec, runs["mirrored"], mf.STRATEGIES["mirrored_2"],
                    FLOAT32, mode="train_eval_predict")
  mf.run_two_workers(spec, runs["workers"], FLOAT32, mode="train_eval_predict")
  assert {"f1", "f1_POS", "accuracy"} <= set(
      mf.summary(reference)["eval_metrics"])
  for name in ("mirrored", "workers"):
    mf.assert_equal_runs(runs[name], reference,
                         spec["params"]["INIT_CHECKPOINT"])


# mixed_bfloat16 on several replicas: the TPU check's shipped runs (8, XLA).
@pytest.mark.parametrize("precision,task", [("mixed_float16", "squad_v1.1")])
def test_mixed_precision_on_two_replicas_trains_finite_weights_in_that_precision(
    precision, task, fixtures, tmp_path):
  """The run computes in the precision asked for (recorded in provenance),
  every step is applied (no overflow skip), weights stay finite, and
  float16 keeps a dynamic loss scale above 1 in its checkpoint."""
  model_dir = str(tmp_path / task)
  mf.run_in_process(fixtures[task], model_dir, mf.STRATEGIES["mirrored_2"],
                    [f'bertexp.configure_numerics.precision="{precision}"'])
  summary = mf.summary(model_dir)
  assert summary["provenance"]["precision"] == precision
  assert summary["nonfinite_steps"] == 0
  assert np.isfinite(summary["train_loss"]) and summary["eval_metrics"]
  weights = mf.model_weights(model_dir)
  assert all(np.isfinite(w).all() for w in weights.values())
  if precision == "mixed_float16":
    scale = tf.train.load_variable(
        tf.train.latest_checkpoint(model_dir),
        "optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE")
    assert scale > 1


def test_phase_two_continues_heads_and_optimizer_of_phase_one(
    fixtures, one_replica, tmp_path):
  """INIT_CHECKPOINT = phase 1's MODEL_DIR: the MLM and NSP heads come along
  (with learning rate 0 they end phase 2 unchanged), the step restarts at 0,
  and with init_optimizer_state each moment continues phase 1's:
  m2 - m2_fresh = beta^steps * m1, exactly what Adam's recursion gives."""
  phase_one = one_replica("pretraining")
  spec = dict(fixtures["pretraining"], params=dict(
      fixtures["pretraining"]["params"], INIT_CHECKPOINT=phase_one,
      LEARNING_RATE=0.0))
  runs = {}
  for name, extra in (("fresh", []), ("with_optimizer", [
      "bertexp.experiment.init_optimizer_state=True"])):
    runs[name] = str(tmp_path / name)
    mf.run_in_process(spec, runs[name], mf.STRATEGIES["default"],
                      FLOAT32 + extra)
    assert mf.summary(runs[name])["resumed_from_step"] == 0
  before = mf.model_weights(phase_one)
  after = mf.model_weights(runs["fresh"])
  heads = [n for n in before if "mlm" in n or "nsp" in n]
  assert len(heads) >= 5
  for name in before:
    np.testing.assert_array_equal(after[name], before[name], err_msg=name)
  slots = {}
  for label, model_dir in (("one", phase_one), *runs.items()):
    path = tf.train.latest_checkpoint(model_dir)
    slots[label] = {n: tf.train.load_variable(path, n)
                    for n, _ in tf.train.list_variables(path)
                    if n.startswith("optimizer/") and "iterations" not in n
                    and "learning_rate" not in n}
  betas = set()
  for name, m1 in slots["one"].items():
    if not np.any(m1):
      continue
    difference = slots["with_optimizer"][name] - slots["fresh"][name]
    beta = next((b for b in (0.9, 0.999) if np.allclose(
        difference, b ** mf.TRAIN_STEPS * m1, rtol=1e-4, atol=1e-9)), None)
    assert beta is not None, name
    betas.add(beta)
  assert betas == {0.9, 0.999}


def test_squad_16gb_file_trains_with_accumulation_and_recompute_in_force(
    fixtures, tmp_path):
  """experiments/squad/squad_v1_gpu_16gb.gin itself (gradient accumulation
  2 + recompute), with tiny bindings, mirrored on 2 CPU replicas: the
  values the run used (operative_config.gin) are K = 2 and recompute on."""
  model_dir = str(tmp_path / "run")
  spec = dict(fixtures["squad_v1.1"],
              gin_file="experiments/squad/squad_v1_gpu_16gb.gin")
  mf.run_in_process(spec, model_dir, ["NUM_GPUS=0",
                                      "bertexp.make_strategy.cpu_replicas=2"])
  summary = mf.summary(model_dir)
  assert summary["steps_this_run"] == mf.TRAIN_STEPS
  assert np.isfinite(summary["train_loss"]) and "f1" in summary["eval_metrics"]
  used = open(os.path.join(model_dir, "operative_config.gin")).read()
  for line in ("GRADIENT_ACCUMULATION_STEPS = 2", "RECOMPUTE = True",
               "build_encoder.recompute = %RECOMPUTE",
               "StepOptions.gradient_accumulation_steps = "
               "%GRADIENT_ACCUMULATION_STEPS"):
    assert line in used.splitlines(), (line, used)
