"""Every task on every strategy (the README's strategy matrix).

Classification, regression, SQuAD v1.1, SQuAD v2.0 and pretraining each train
a few steps, evaluate and predict on the default strategy and on 2
MultiWorkerMirroredStrategy workers on localhost; classification also on 2
mirrored CPU replicas. With dropout off and a fixed data order, the
multi-replica weights, loss, gradient norm, evaluation metrics and
predictions equal the 1-replica ones over the same global batch.

The TPU check (runtime/tpu_check.gin: 8 CPU replicas, XLA, static shapes):
every shipped TPU experiment, with only data and model paths bound to the
fixtures, runs once in float32 against the same file on one replica (equal,
as above) and once as shipped in bfloat16 (it compiles and trains).
"""
import concurrent.futures
import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
import matrix_fixtures as mf

TASKS = ("classification", "regression", "squad_v1.1", "squad_v2.0",
         "pretraining")
FLOAT32 = ['bertexp.configure_numerics.precision="float32"']
COUNTS = ("num_examples", "exact_match", "accuracy", "mlm_accuracy",
          "nsp_accuracy", "HasAns_exact", "NoAns_exact")


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


def _predict(spec, model_dir, strategy):
  if "pretraining" not in spec["gin_file"]:     # pretraining has no predict
    mf.run_in_process(spec, model_dir, strategy, FLOAT32, mode="predict")


def _assert_same_weights(ours, reference):
  assert ours.keys() == reference.keys() and len(ours) > 10
  for name in ours:
    np.testing.assert_allclose(ours[name], reference[name], atol=mf.TOLERANCE,
                               rtol=mf.TOLERANCE, err_msg=name)


def _assert_same_metrics(ours, reference):
  assert ours.keys() == reference.keys() and ours
  for name, value in ours.items():
    if name.split("/")[-1] in COUNTS:
      assert value == reference[name], name
    elif name.split("/")[-1] in ("pearson", "spearman"):
      # Correlations of a 3-step tiny model's nearly constant predictions
      # magnify 1e-6 noise (reduction order across replicas) into ~1e-5.
      assert value == pytest.approx(reference[name], abs=1e-4), name
    else:
      assert value == pytest.approx(reference[name], rel=1e-4, abs=1e-5), name


def _prediction_files(model_dir):
  return sorted(glob.glob(f"{model_dir}/test_results*.tsv") +
                glob.glob(f"{model_dir}/predictions.json"))


def _assert_same_predictions(model_dir, reference_dir):
  files = _prediction_files(model_dir)
  assert [os.path.basename(f) for f in files] == [
      os.path.basename(f) for f in _prediction_files(reference_dir)]
  for path in files:
    reference = os.path.join(reference_dir, os.path.basename(path))
    if path.endswith(".json"):
      assert json.load(open(path)) == json.load(open(reference))
    else:
      np.testing.assert_allclose(np.loadtxt(path, ndmin=2),
                                 np.loadtxt(reference, ndmin=2), atol=1e-5)


def _assert_differences_far_below_movement(model_dir, reference_dir,
                                           init_checkpoint):
  """Each encoder kernel's difference between the two runs is under 1 % of
  how far training moved it: a fixed tolerance alone proves little for
  kernels whose gradients are tiny (attention keys move ~1e-5 in 3 steps)."""
  ours = mf.model_weights(model_dir)
  moved = mf.kernel_movement(reference_dir, init_checkpoint)
  assert len(moved) >= 8
  reference = mf.model_weights(reference_dir)
  for name, movement in moved.items():
    difference = float(np.abs(ours[name] - reference[name]).max())
    # A kernel outside the loss (SQuAD's pooler) must not move on either.
    assert movement == difference == 0 or (
        movement > 1e-6 and difference <= movement / 100), (
            name, difference, movement)


def _assert_equal_runs(model_dir, reference_dir, init_checkpoint=None):
  _assert_same_weights(mf.model_weights(model_dir),
                       mf.model_weights(reference_dir))
  if init_checkpoint:          # pretraining starts from random weights
    _assert_differences_far_below_movement(model_dir, reference_dir,
                                           init_checkpoint)
  ours, reference = mf.summary(model_dir), mf.summary(reference_dir)
  _assert_same_metrics(ours["eval_metrics"], reference["eval_metrics"])
  assert ours["train_loss"] == pytest.approx(reference["train_loss"], rel=1e-5)
  # Adam hides a constant gradient scale from the weights; the norm shows it.
  norm = ours["last_train_metrics"]["gradient_norm"]
  assert norm == pytest.approx(
      reference["last_train_metrics"]["gradient_norm"], rel=1e-5)
  _assert_same_predictions(model_dir, reference_dir)


TPU_EXPERIMENTS = sorted(
    os.path.relpath(p, REPO)
    for p in glob.glob(os.path.join(REPO, "experiments", "*", "*_tpu.gin")))
# Regression has no shipped TPU file: its CPU demo runs with tpu_check.gin.
TPU_CHECK_CELLS = TPU_EXPERIMENTS + [
    "experiments/demo/movie_score_regression_cpu.gin"]
# These two also predict: the classification path with three test splits
# and the QA path with v2.0's null answers (in every run of the TPU check).
# The 2-replica and 2-worker cells predict for every task.
PREDICT_ON_TPU_CHECK = ("experiments/glue/mnli_tpu.gin",
                        "experiments/squad/squad_v2_tpu.gin")
TPU_CORES = 8
# As shipped (bfloat16) for the file of each kind of step that is the
# superset of its kind: mnli_tpu.gin (mrpc_tpu.gin's classification plus
# extra eval and test splits), squad_v2_tpu.gin (v1.1's span step plus null
# answers), bert_base_tpu.gin. The other two compile the same step; their
# float32 cells run on the same 8 XLA replicas.
SHIPPED_RUNS = ("experiments/glue/mnli_tpu.gin",
                "experiments/squad/squad_v2_tpu.gin",
                "experiments/pretrain/bert_base_tpu.gin")
# The float32 TPU check trains this many steps at mf.LEARNING_RATE: enough
# for every compared kernel to move 100x the equality tolerance.
TPU_FLOAT32_STEPS = mf.TRAIN_STEPS


def _tpu_check_args(gin_file, spec, model_dir, *, float32, one_replica=False):
  """`bertexp train` of the shipped file with only data and model paths
  bound to the fixtures: as shipped (tpu.gin's bfloat16, 2 training steps)
  on the TPU check's 8 replicas with XLA; or, for the equality check,
  trained, evaluated (and predicting, for PREDICT_ON_TPU_CHECK) in float32
  at mf.LEARNING_RATE for TPU_FLOAT32_STEPS with dropout off and a fixed
  data order, on the same 8 replicas or on the default strategy."""
  params = dict(spec["tpu"][gin_file], MODEL_DIR=model_dir, TRAIN_STEPS=2)
  extra = []
  if float32:
    params.update(TRAIN_STEPS=TPU_FLOAT32_STEPS, LEARNING_RATE=mf.LEARNING_RATE,
                  SEED=3)
    extra = FLOAT32 + list(spec["order"])
  gin_files = [gin_file]
  if one_replica:
    extra += mf.STRATEGIES["default"] + (
        ["TPU_ADDRESS=None"] if gin_file in TPU_EXPERIMENTS else [])
  else:
    gin_files.append("runtime/tpu_check.gin")
    params["CPU_REPLICAS"] = TPU_CORES
  mode = ("train_eval_predict" if gin_file in PREDICT_ON_TPU_CHECK else
          "train_and_eval") if float32 else "train"
  return mf.train_args(gin_files, params, extra, mode=mode)


@pytest.fixture(scope="module")
def tpu_check_runs(fixtures, tmp_path_factory):
  """Starts every TPU-check run at once, two processes at a time, while the
  other cells run here. Per shipped TPU file: as shipped on 8 replicas
  ("shipped"), in float32 on 8 replicas ("float32") and in float32 on one
  ("one_replica"); each a new `bertexp train` process (cpu_replicas splits
  the CPU into 8 before TensorFlow starts). Returns {gin_file: {run:
  (params, future)}}; most of a run's minute is single-threaded graph
  building, so two side by side take little longer than one."""
  pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
  runs = {}
  for gin_file in TPU_CHECK_CELLS:
    spec = next(s for s in fixtures.values() if gin_file in s["tpu"])
    runs[gin_file] = {}
    kinds = [("float32", dict(float32=True)),
             ("one_replica", dict(float32=True, one_replica=True))]
    if gin_file in SHIPPED_RUNS:
      kinds.append(("shipped", dict(float32=False)))
    for run, how in kinds:
      model_dir = str(tmp_path_factory.mktemp(f"tpu_{run}"))
      args = _tpu_check_args(gin_file, spec, model_dir, **how)
      runs[gin_file][run] = (dict(spec["tpu"][gin_file], MODEL_DIR=model_dir),
                             pool.submit(mf.run_cli, args))
  yield runs
  pool.shutdown(wait=True)


def test_every_shipped_tpu_file_has_a_tpu_check_cell_that_ran(
    fixtures, tpu_check_runs):
  covered = {f for spec in fixtures.values() for f in spec["tpu"]}
  assert TPU_EXPERIMENTS and set(TPU_CHECK_CELLS) == covered == set(tpu_check_runs)
  assert set(SHIPPED_RUNS) <= set(TPU_EXPERIMENTS)


@pytest.mark.parametrize("gin_file", TPU_CHECK_CELLS)
def test_tpu_check_in_float32_equals_one_replica(gin_file, tpu_check_runs):
  """The shipped file on 8 XLA replicas in float32 gives the weights, loss,
  gradient norm, metrics and predictions of the same file on one replica:
  what the TPU check adds (8-way split batches, XLA, static shapes) changes
  no number beyond float noise, and each kernel moved far more than that."""
  runs = tpu_check_runs[gin_file]
  for _, future in runs.values():
    future.result()
  ours = runs["float32"][0]["MODEL_DIR"]
  reference = runs["one_replica"][0]["MODEL_DIR"]
  config = open(os.path.join(ours, "config.gin")).read()
  assert f"CPU_REPLICAS = {TPU_CORES}" in config and "jit_compile = True" in config
  assert mf.summary(ours)["replicas"] == TPU_CORES
  assert mf.summary(reference)["replicas"] == 1
  _assert_equal_runs(ours, reference,
                     runs["float32"][0].get("INIT_CHECKPOINT"))
  _assert_every_example_counted_once(runs["float32"][0], ours)
  assert bool(_prediction_files(ours)) == (gin_file in PREDICT_ON_TPU_CHECK)


# Two mirrored CPU replicas without XLA (the multi-GPU path) for one task:
# every task's replicated step is compared with one replica by the TPU
# check's float32 cells (8 replicas, XLA) and, without XLA, by the
# two-worker cells; the mirrored step is the same code for every task.
@pytest.mark.parametrize("task", ["classification"])
def test_two_cpu_replicas_equal_one_replica(task, fixtures, one_replica,
                                            tmp_path):
  model_dir = str(tmp_path / "run")
  strategy = mf.STRATEGIES["mirrored_2"]
  mf.run_in_process(fixtures[task], model_dir, strategy, FLOAT32)
  _predict(fixtures[task], model_dir, strategy)
  _assert_equal_runs(model_dir, one_replica(task),
                     fixtures[task]["params"].get("INIT_CHECKPOINT"))
  assert mf.summary(model_dir)["steps_this_run"] == mf.TRAIN_STEPS


# Two workers for the three kinds of step: classification (pooled head),
# SQuAD v2.0 (span head, null answers, the QA eval path) and pretraining
# (MLM + NSP, LAMB). Regression and SQuAD v1.1 take the same worker code
# paths; their replicated steps are compared by the TPU check's float32 cells.
WORKER_TASKS = ("classification", "squad_v2.0", "pretraining")


@pytest.mark.parametrize("task", WORKER_TASKS)
def test_two_workers_equal_one_replica(task, fixtures, one_replica, tmp_path):
  model_dir = str(tmp_path / "run")
  mf.run_two_workers(fixtures[task], model_dir, FLOAT32, mode=_all_modes(task))
  _assert_equal_runs(model_dir, one_replica(task),
                     fixtures[task]["params"].get("INIT_CHECKPOINT"))
  # The second worker wrote only into its private folder.
  assert os.path.isdir(os.path.join(model_dir, "workers", "worker_1"))


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
    _assert_equal_runs(runs[name], runs["one"])


def test_lamb_fine_tuning_equal_on_one_and_two_replicas(fixtures, tmp_path):
  """LAMB on a fine-tuning task (sparse word-embedding gradient): runs
  through the CLI and gives the same weights on 1 and 2 replicas."""
  lamb = FLOAT32 + ['bertexp.create_optimizer.kind="lamb"',
                    "LEARNING_RATE=1e-3"]
  runs = {}
  for name in ("default", "mirrored_2"):
    runs[name] = str(tmp_path / name)
    mf.run_in_process(fixtures["classification"], runs[name],
                      mf.STRATEGIES[name], lamb)
  weights = mf.model_weights(runs["mirrored_2"])
  initial = tf.train.load_variable(
      fixtures["classification"]["params"]["INIT_CHECKPOINT"],
      "encoder/embeddings/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE")
  assert not np.allclose(initial, weights[
      "model/encoder/embeddings/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE"])
  _assert_same_weights(weights, mf.model_weights(runs["default"]))


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


@pytest.mark.parametrize("gin_file", SHIPPED_RUNS)
def test_tpu_experiment_as_shipped_compiles_and_trains_in_bfloat16(
    gin_file, tpu_check_runs):
  """The shipped file as it is (tpu.gin's mixed_bfloat16, its own batch
  size, learning rate and dropout) compiles with XLA on 8 CPU replicas and
  trains two steps of its global batch to finite weights."""
  params, run = tpu_check_runs[gin_file]["shipped"]
  run.result()
  model_dir = params["MODEL_DIR"]
  summary = mf.summary(model_dir)
  assert summary["steps_this_run"] == 2 and summary["nonfinite_steps"] == 0
  assert summary["replicas"] == TPU_CORES
  assert summary["provenance"]["precision"] == "mixed_bfloat16"
  assert "jit_compile = True" in open(os.path.join(model_dir,
                                                   "config.gin")).read()
  assert summary["examples_seen"] == 2 * summary["global_batch_size"]
  assert all(np.isfinite(w).all() for w in mf.model_weights(
      model_dir, step=2).values())


def _assert_every_example_counted_once(params, model_dir):
  """Evaluation covers every example exactly once; predictions (where made)
  cover every test example."""
  metrics = mf.summary(model_dir)["eval_metrics"]
  meta = json.load(open(params["INPUT_META_DATA_PATH"]))
  if "mlm_accuracy" in metrics:
    assert metrics["num_examples"] == sum(
        1 for _ in tf.data.TFRecordDataset(params["EVAL_DATA_PATH"]))
  elif "total" in metrics:                     # SQuAD v2.0 counts questions
    assert metrics["total"] == len(mf.question_ids(params["PREDICT_FILE"]))
  elif "f1" not in metrics:
    assert metrics["num_examples"] == meta["split_sizes"]["eval"]
  if "EXTRA_EVAL_DATA_PATHS" in params:                  # MNLI mismatched
    assert metrics["mismatched/num_examples"] == meta["split_sizes"][
        "eval_mismatched"]
  if "TEST_DATA_PATH" in params and os.path.exists(
      os.path.join(model_dir, "test_results.tsv")):
    for split in ("test", "test_mismatched"):
      name = "test_results.tsv" if split == "test" else f"test_results_{split}.tsv"
      rows = open(os.path.join(model_dir, name)).read().splitlines()
      assert len(rows) == meta["split_sizes"][split]
  if "PREDICT_FILE" in params and os.path.exists(
      os.path.join(model_dir, "predictions.json")):
    predictions = json.load(open(os.path.join(model_dir, "predictions.json")))
    assert sorted(predictions) == sorted(mf.question_ids(params["PREDICT_FILE"]))


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
               "experiment.gradient_accumulation_steps = "
               "%GRADIENT_ACCUMULATION_STEPS"):
    assert line in used.splitlines(), (line, used)
