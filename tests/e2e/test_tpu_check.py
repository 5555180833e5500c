"""The TPU check (runtime/tpu_check.gin: 8 CPU replicas, XLA, static
shapes): every shipped TPU experiment (or, for a file that differs from
another only in macro values, that other file), with only data and model
paths bound to the fixtures, runs in float32 on XLA replicas against the
same file on one replica (equal by the strategy matrix's rules) and, for
the file of each kind of step, as shipped in bfloat16 on 8 replicas (it
compiles and trains). Its own file, so that the
test workers share its runs with the strategy matrix's."""
import concurrent.futures
import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.util import machine
from conftest import REPO
import matrix_fixtures as mf

FLOAT32 = ['bertexp.configure_numerics.precision="float32"']


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
  return mf.build_fixtures(str(tmp_path_factory.mktemp("tpu_fixtures")))


TPU_EXPERIMENTS = sorted(
    os.path.relpath(p, REPO)
    for p in glob.glob(os.path.join(REPO, "experiments", "*", "*_tpu.gin")))
# A TPU file whose step, includes and bindings are those of another file,
# with other data and hyperparameters only, is covered by that file's cell
# (test_a_covered_tpu_file_differs_from_its_cell_only_in_macro_values).
# Another model's include (models/*.gin: paths only) counts as macro values;
# the family its config names is checked on XLA replicas by
# test_encoder_families.py.
COVERED_BY = {"experiments/glue/mrpc_tpu.gin": "experiments/glue/mnli_tpu.gin",
              "experiments/glue/mnli_deberta_v3_base_tpu.gin":
                  "experiments/glue/mnli_tpu.gin",
              "experiments/squad/squad_v1_tpu.gin":
                  "experiments/squad/squad_v2_tpu.gin"}
# Regression has no shipped TPU file: its CPU demo runs with tpu_check.gin.
REGRESSION_CELL = "experiments/demo/movie_score_regression_cpu.gin"
TPU_CHECK_CELLS = [f for f in TPU_EXPERIMENTS if f not in COVERED_BY] + [
    REGRESSION_CELL]
# These two also predict: the classification path with three test splits
# and the QA path with v2.0's null answers (in every run of the TPU check).
# The 2-replica and 2-worker cells predict for every task.
PREDICT_ON_TPU_CHECK = ("experiments/glue/mnli_tpu.gin",
                        "experiments/squad/squad_v2_tpu.gin")
# A distillation file's teacher: the one-replica float32 run of this file
# (which the distillation file includes, so its 8-replica run is the
# teacher file's too).
TEACHERS = {"experiments/glue/mrpc_distill_tpu.gin":
            "experiments/glue/mrpc_tpu.gin"}
TPU_CORES = 8
# The float32 equality runs on the TPU check's 8 replicas for the
# classification file (three eval and test splits, predictions: every path
# of splitting, padding and gathering a global batch 8 ways) and on 2 XLA
# replicas for the other kinds of step (their heads, losses and eval
# outputs go through the same split, pad and gather code; each 8-replica
# process costs about four times a 2-replica one, mostly per-replica graph
# building). The files as shipped: SHIPPED_RUNS.
EQUALITY_REPLICAS = {"experiments/glue/mnli_tpu.gin": TPU_CORES}
OTHER_EQUALITY_REPLICAS = 2


def equality_replicas(gin_file):
  """The replicas of `gin_file`'s float32 equality run."""
  return EQUALITY_REPLICAS.get(gin_file, OTHER_EQUALITY_REPLICAS)
# As shipped (bfloat16) for the file of each kind of step that is the
# superset of its kind: mnli_tpu.gin (mrpc_tpu.gin's classification plus
# extra eval and test splits), squad_v2_tpu.gin (v1.1's span step plus null
# answers), bert_base_tpu.gin. The other two compile the same step, which
# their covering cells run (COVERED_BY). They run on 2 XLA replicas: the same
# bfloat16 step, compiled per replica (what 8 replicas add is checked by
# mnli's float32 run on 8 and by test_every_shipped_global_batch_splits_8_ways:
# batches that divide among them; an 8-replica process costs about three
# 2-replica ones, mostly per-replica graph building).
SHIPPED_RUNS = ("experiments/glue/mnli_tpu.gin",
                "experiments/squad/squad_v2_tpu.gin",
                "experiments/pretrain/bert_base_tpu.gin")
SHIPPED_REPLICAS = 2
# The float32 TPU check trains this many steps at mf.LEARNING_RATE: enough
# for every compared kernel to move 100x the equality tolerance.
TPU_FLOAT32_STEPS = mf.TRAIN_STEPS


def _tpu_check_args(gin_file, spec, model_dir, *, float32, one_replica=False):
  """`bertexp train` of the shipped file with only data and model paths
  bound to the fixtures: as shipped (tpu.gin's bfloat16, 2 training steps)
  on the TPU check's 8 replicas with XLA; or, for the equality check,
  trained, evaluated (and predicting, for PREDICT_ON_TPU_CHECK) in float32
  at mf.LEARNING_RATE for TPU_FLOAT32_STEPS with dropout off and a fixed
  data order, on equality_replicas(gin_file) XLA replicas or on the default
  strategy."""
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
    params["CPU_REPLICAS"] = (equality_replicas(gin_file) if float32
                              else SHIPPED_REPLICAS)
  mode = ("train_eval_predict" if gin_file in PREDICT_ON_TPU_CHECK else
          "train_and_eval") if float32 else "train"
  return mf.train_args(gin_files, params, extra, mode=mode)


@pytest.fixture(scope="module")
def tpu_check_runs(fixtures, tmp_path_factory):
  """Every TPU-check run. Per shipped TPU file: as shipped on 8 replicas
  ("shipped"), in float32 on equality_replicas ("float32") and in float32 on
  one ("one_replica"). The XLA runs are new `bertexp train` processes
  (cpu_replicas splits the CPU before TensorFlow starts; forked_python's,
  TensorFlow imported), two at a time; meanwhile the one-replica
  references run here. A distillation
  file's XLA run starts once its teacher's reference is done. Returns
  {gin_file: {run: (params, future)}}."""
  pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
  runs, references, after_teachers = {}, [], []
  # Teachers first: a distillation file's runs read its teacher's reference.
  teachers_only = sorted(set(TEACHERS.values()) - set(TPU_CHECK_CELLS))
  for gin_file in teachers_only + sorted(TPU_CHECK_CELLS,
                                         key=lambda f: f in TEACHERS):
    spec = next(s for s in fixtures.values() if gin_file in s["tpu"])
    if gin_file in TEACHERS:
      teacher_params, _ = runs[TEACHERS[gin_file]]["one_replica"]
      spec = dict(spec, tpu={gin_file: dict(
          spec["tpu"][gin_file], TEACHER_DIR=teacher_params["MODEL_DIR"])})
    runs[gin_file] = {}
    kinds = [("one_replica", dict(float32=True, one_replica=True))]
    if gin_file in TPU_CHECK_CELLS:
      kinds.append(("float32", dict(float32=True)))
    if gin_file in SHIPPED_RUNS:
      kinds.append(("shipped", dict(float32=False)))
    for run, how in kinds:
      model_dir = str(tmp_path_factory.mktemp(f"tpu_{run}"))
      args = _tpu_check_args(gin_file, spec, model_dir, **how)
      future = concurrent.futures.Future()
      runs[gin_file][run] = (dict(spec["tpu"][gin_file], MODEL_DIR=model_dir),
                             future)
      if run == "one_replica":
        references.append((args, future))
      elif gin_file in TEACHERS:
        after_teachers.append((args, future))
      else:
        pool.submit(_complete, future, mf.run_cli, args)
  for args, future in references:
    _complete(future, _run_here, args)
  for args, future in after_teachers:
    pool.submit(_complete, future, mf.run_cli, args)
  yield runs
  pool.shutdown(wait=True)


def _complete(future, call, args):
  """future <- call(args): its result, or the exception it raised."""
  try:
    future.set_result(call(args))
  except Exception as error:  # pylint: disable=broad-except
    future.set_exception(error)


def _run_here(args):
  """`bertexp train ARGS` in this process."""
  assert cli.main(args) == 0, args


def test_every_shipped_tpu_file_has_a_cell_that_ran_or_is_covered_by_one(
    fixtures, tpu_check_runs):
  with_fixtures = {f for spec in fixtures.values() for f in spec["tpu"]}
  assert TPU_EXPERIMENTS and set(TPU_CHECK_CELLS) | set(COVERED_BY) == (
      with_fixtures) == set(TPU_EXPERIMENTS) | {REGRESSION_CELL}
  assert set(tpu_check_runs) == set(TPU_CHECK_CELLS) | set(TEACHERS.values())
  assert set(SHIPPED_RUNS) <= set(TPU_CHECK_CELLS)
  assert set(COVERED_BY.values()) <= set(TPU_CHECK_CELLS)


def _macro_names_and_other_lines(gin_file):
  """({MACRO names assigned}, [every other line: includes and bindings]) of a
  gin file, comments and continuation lines of a macro's value left out;
  an include of a models/ file stands for the macros it assigns."""
  macros, others = set(), []
  for line in open(os.path.join(REPO, gin_file)).read().splitlines():
    text = line.split("#")[0].rstrip()
    if not text or text[0].isspace():
      continue
    name = text.split("=")[0].strip()
    included = text.split()[-1].strip("'\"")
    if "=" in text and name.isupper():
      macros.add(name)
    elif text.startswith("include") and included.startswith("models/"):
      model_macros, model_others = _macro_names_and_other_lines(
          os.path.join("bertexp", "gin", included))
      assert not model_others, f"{included} binds more than macros"
      macros |= model_macros
    else:
      others.append(text)
  return macros, others


# Macros a covered file may set where its cell keeps base.gin's default:
# numbers the optimizer reads, not the shape of the step.
OPTIMIZER_NUMBERS = {"WARMUP_STEPS", "WEIGHT_DECAY", "ADAM_EPSILON"}


@pytest.mark.parametrize("covered", sorted(COVERED_BY))
def test_a_covered_tpu_file_differs_from_its_cell_only_in_macro_values(
    covered):
  """A TPU file without a cell of its own has the includes and bindings of
  the file whose cell covers it (another model's paths aside), and sets no
  macro that file does not but optimizer numbers: the same step on the same
  8 replicas, other data and hyperparameters."""
  macros, others = _macro_names_and_other_lines(covered)
  cell_macros, cell_others = _macro_names_and_other_lines(COVERED_BY[covered])
  assert others and others == cell_others
  assert macros and macros - cell_macros <= OPTIMIZER_NUMBERS


@pytest.mark.parametrize("gin_file", TPU_CHECK_CELLS)
def test_tpu_check_in_float32_equals_one_replica(gin_file, tpu_check_runs):
  """The shipped file on the TPU check's XLA replicas (8 for
  classification, 2 for the other steps: EQUALITY_REPLICAS) in float32
  gives the weights, loss, gradient norm, metrics and predictions of the
  same file on one replica: what the TPU check adds (split batches, XLA,
  static shapes) changes no number beyond float noise, and each kernel
  moved far more than that."""
  runs = tpu_check_runs[gin_file]
  for run in ("float32", "one_replica"):       # not the bfloat16 run's
    runs[run][1].result()
  ours = runs["float32"][0]["MODEL_DIR"]
  reference = runs["one_replica"][0]["MODEL_DIR"]
  replicas = equality_replicas(gin_file)
  config = open(os.path.join(ours, "config.gin")).read()
  assert f"CPU_REPLICAS = {replicas}" in config and "jit_compile = True" in config
  assert mf.summary(ours)["replicas"] == replicas
  assert mf.summary(reference)["replicas"] == 1
  mf.assert_equal_runs(
      ours, reference, runs["float32"][0].get("INIT_CHECKPOINT"),
      gradient_norm_rtol=(mf.COPIED_STUDENT_GRADIENT_NORM_RTOL
                          if gin_file in TEACHERS else mf.GRADIENT_NORM_RTOL))
  _assert_every_example_counted_once(runs["float32"][0], ours)
  assert bool(mf.prediction_files(ours)) == (gin_file in PREDICT_ON_TPU_CHECK)


@pytest.mark.parametrize("gin_file", SHIPPED_RUNS)
def test_tpu_experiment_as_shipped_compiles_and_trains_in_bfloat16(
    gin_file, tpu_check_runs):
  """The shipped file as it is (tpu.gin's mixed_bfloat16, its own batch
  size, learning rate and dropout) compiles with XLA on SHIPPED_REPLICAS CPU
  replicas and trains two steps of its global batch to finite weights."""
  if machine.onednn_isa_cap() in machine.ONEDNN_ISAS_WITHOUT_BF16:
    pytest.skip(f"ONEDNN_MAX_CPU_ISA={machine.onednn_isa_cap()}: bfloat16 "
                "on CPU is refused under this cap (configure_numerics)")
  params, run = tpu_check_runs[gin_file]["shipped"]
  run.result()
  model_dir = params["MODEL_DIR"]
  summary = mf.summary(model_dir)
  assert summary["steps_this_run"] == 2 and summary["nonfinite_steps"] == 0
  assert summary["replicas"] == SHIPPED_REPLICAS
  assert summary["provenance"]["precision"] == "mixed_bfloat16"
  assert "jit_compile = True" in open(os.path.join(model_dir,
                                                   "config.gin")).read()
  assert summary["examples_seen"] == 2 * summary["global_batch_size"]
  assert all(np.isfinite(w).all() for w in mf.model_weights(
      model_dir, step=2).values())


def _batch_sizes(gin_file):
  """{TRAIN_BATCH_SIZE, EVAL_BATCH_SIZE: value} a shipped file sets, itself
  or through an experiment file it includes (its own assignment last)."""
  sizes = {}
  for line in open(os.path.join(REPO, gin_file)).read().splitlines():
    words = line.split("#")[0].split()
    if words[:1] == ["include"] and words[1].strip("'\"").count("/") == 1:
      included = os.path.join("experiments", words[1].strip("'\""))
      if os.path.exists(os.path.join(REPO, included)):
        sizes.update(_batch_sizes(included))
    elif len(words) == 3 and words[0] in ("TRAIN_BATCH_SIZE",
                                          "EVAL_BATCH_SIZE"):
      sizes[words[0]] = int(words[2])
  return sizes


@pytest.mark.parametrize("gin_file", TPU_EXPERIMENTS)
def test_every_shipped_global_batch_splits_8_ways(gin_file):
  """A TPU v2/v3-8 has 8 cores: each file's training and evaluation batch
  divides among them (the runs on 2 replicas would not show it)."""
  sizes = _batch_sizes(gin_file)
  assert set(sizes) == {"TRAIN_BATCH_SIZE", "EVAL_BATCH_SIZE"}, sizes
  assert all(size % TPU_CORES == 0 for size in sizes.values()), sizes


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
