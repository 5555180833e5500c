"""Multiple choice, the task that proves the seams: it lives in
bertexp/tasks/multiple_choice/ and gin/tasks/multiple_choice.gin
alone. Prepared from JSONL and CSV, it trains (and learns), evaluates,
predicts, exports, answers `bertexp serve` and `Predictor.choose` alike, and
gives the same run on 2 mirrored replicas as on one."""
import json
import os
import random
import shutil

import numpy as np
import pytest
import requests

import bertexp
from bertexp import cli
import matrix_fixtures as mf
from conftest import (NEGATIVE, POSITIVE, TINY_CONFIG,
                      TINY_VOCAB, start_server)

GIN_FILE = "gin/tasks/multiple_choice.gin"
CHOICES = 3


def _examples(count, seed):
  """A context (either sentiment) and 3 endings: the correct one is the
  positive ending, at a random place among two negative ones. (Whether an
  ending agrees with its context is more than a 2-layer random encoder
  learns in a test's steps; this rule needs the softmax over the choices
  and the labels' alignment with them.)"""
  rng = random.Random(seed)
  rows = []
  for i in range(count):
    endings = [rng.choice(NEGATIVE), rng.choice(NEGATIVE)]
    label = rng.randrange(CHOICES)
    endings.insert(label, rng.choice(POSITIVE))
    rows.append({"id": f"q{i}", "context": rng.choice(POSITIVE + NEGATIVE),
                 "choices": endings, "label": label})
  return rows


def _write_jsonl(path, rows, labelled=True):
  with open(path, "w") as f:
    for row in rows:
      f.write(json.dumps({k: v for k, v in row.items()
                          if labelled or k != "label"}) + "\n")


def _write_csv(path, rows):
  with open(path, "w") as f:
    f.write("id,context,ending0,ending1,ending2,label\n")
    for row in rows:
      f.write(",".join([row["id"], row["context"], *row["choices"],
                        str(row["label"])]) + "\n")


@pytest.fixture(scope="module")
def mc_data(tmp_path_factory):
  """Prepared with the command line: train JSONL, eval CSV (SWAG's column
  layout), test JSONL without labels; a tiny encoder checkpoint."""
  root = tmp_path_factory.mktemp("mc")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(TINY_VOCAB) + "\n")
  config = root / "bert_config.json"
  config.write_text(json.dumps(dict(TINY_CONFIG, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)))
  _write_jsonl(root / "train.jsonl", _examples(96, 1))
  _write_jsonl(root / "test.jsonl", _examples(10, 3), labelled=False)
  common = [f"--vocab_file={vocab}", "--max_seq_length=12",
            f"--output_dir={root}/data", "--task_name=mc", "--id_column=id"]
  _write_jsonl(root / "eval.jsonl", _examples(24, 2))
  assert cli.main(["prepare", "multiple_choice",
                   f"--train_file={root}/train.jsonl",
                   f"--eval_file={root}/eval.jsonl",
                   f"--test_file={root}/test.jsonl"] + common) == 0
  import tensorflow as tf
  from bertexp.checkpoints import converters
  tf.random.set_seed(0)
  converters.write_checkpoint_folder(
      bertexp.load_encoder(str(config)), str(vocab), str(root / "init"))
  return {"BERT_CONFIG_FILE": str(config),
          "INIT_CHECKPOINT": f"{root}/init/bert_model.ckpt",
          "TRAIN_DATA_PATH": f"{root}/data/mc_train.tf_record",
          "EVAL_DATA_PATH": f"{root}/data/mc_eval.tf_record",
          "TEST_DATA_PATH": f"{root}/data/mc_test.tf_record",
          "INPUT_META_DATA_PATH": f"{root}/data/mc_meta_data"}, root


def test_prepare_reads_jsonl_and_swag_style_csv_alike(mc_data, tmp_path):
  paths, root = mc_data
  meta = json.load(open(paths["INPUT_META_DATA_PATH"]))
  assert meta["num_choices"] == CHOICES
  assert meta["split_sizes"] == {"train": 96, "eval": 24, "test": 10}
  _write_csv(tmp_path / "eval.csv", _examples(24, 2))
  assert cli.main(["prepare", "multiple_choice",
                   f"--train_file={root}/train.jsonl",
                   f"--eval_file={tmp_path}/eval.csv",
                   "--choice_columns=ending0,ending1,ending2",
                   f"--vocab_file={root}/vocab.txt", "--max_seq_length=12",
                   f"--output_dir={tmp_path}/data", "--task_name=mc",
                   "--id_column=id"]) == 0
  for split in ("train", "eval"):
    ours = open(f"{tmp_path}/data/mc_{split}.tf_record", "rb").read()
    assert ours == open(f"{root}/data/mc_{split}.tf_record", "rb").read()


@pytest.mark.parametrize("line, message", [
    ({"context": "it is fun", "choices": ["a", "b"], "label": 0},
     "bad.jsonl:2: 2 choices; every example needs the same number"),
    ({"context": "it is fun", "choices": ["a", "b", "c"], "label": 3},
     "bad.jsonl:2: label 3 is neither a choice index 0-2, a letter A-C nor "
     "one of the choices"),
    ({"context": "it is fun", "choices": "a b c", "label": 0},
     "bad.jsonl:2: expected 'choices' to be a list of texts"),
])
def test_bad_multiple_choice_files_are_one_line_errors(tmp_path, tiny_vocab,
                                                        line, message):
  from bertexp.tasks.multiple_choice import prepare as mcp
  path = tmp_path / "bad.jsonl"
  _write_jsonl(path, _examples(1, 5))
  with open(path, "a") as f:
    f.write(json.dumps(line) + "\n")
  with pytest.raises(ValueError) as error:
    mcp.read_examples(str(path), context_column="context",
                      choices_column="choices", choice_columns=None,
                      question_column=None, label_column="label",
                      id_column="id")
  assert str(error.value).startswith(f"{path.parent}/{message}")
  assert "\n" not in str(error.value)


def test_plan_says_in_one_line_why_it_has_no_memory_plan(mc_data, tmp_path,
                                                         capsys):
  """--mode=plan prints the schedule and, for this task, why the memory
  plan is missing, without gin's internals ("In call to configurable
  'memory_report' (<function ... at 0x...>)")."""
  paths, _ = mc_data
  assert cli.main(_args(paths, str(tmp_path / "run"), "plan")) == 0
  printed = capsys.readouterr().out
  assert ("memory plan: unavailable (--mode=plan: MultipleChoiceTask does "
          "not declare a memory plan)\n") in printed, printed
  assert "configurable" not in printed and " at 0x" not in printed


def _snapshot(folder):
  return {name: open(os.path.join(folder, name), "rb").read()
          for name in sorted(os.listdir(folder))}


def test_a_failed_prepare_leaves_the_output_folder_as_it_was(mc_data,
                                                             tmp_path):
  """Re-preparing into a prepared folder with a bad eval file (its train
  file fine, and different) changes nothing there, and a failure into a
  new folder creates none: the files are written aside and move into place
  only when every split was written (the train records had been replaced,
  the meta data kept, before)."""
  _, root = mc_data
  shutil.copytree(root / "data", tmp_path / "data")
  before = _snapshot(tmp_path / "data")
  _write_jsonl(tmp_path / "train.jsonl", _examples(40, 7))
  _write_jsonl(tmp_path / "eval.jsonl", _examples(3, 8) + [
      {"context": "it is fun", "choices": ["a", "b", "c"], "label": 5}])
  for output in ("data", "new"):
    assert cli.main(["prepare", "multiple_choice",
                     f"--train_file={tmp_path}/train.jsonl",
                     f"--eval_file={tmp_path}/eval.jsonl",
                     f"--vocab_file={root}/vocab.txt", "--max_seq_length=12",
                     f"--output_dir={tmp_path}/{output}",
                     "--task_name=mc"]) != 0
  assert _snapshot(tmp_path / "data") == before
  assert sorted(os.listdir(tmp_path)) == ["data", "eval.jsonl", "train.jsonl"]


def _args(paths, model_dir, mode, **more):
  params = dict(paths, MODEL_DIR=model_dir, TRAIN_STEPS=240,
                TRAIN_BATCH_SIZE=8, EVAL_BATCH_SIZE=8, LEARNING_RATE=5e-3,
                STEPS_PER_LOOP=120, EVAL_INTERVAL_STEPS=240, SEED=1, **more)
  return mf.train_args([GIN_FILE, "runtime/cpu.gin"], params,
                       ["bertexp.MultipleChoiceTask.shuffle_buffer_size=0"],
                       mode=mode)


@pytest.fixture(scope="module")
def mc_run(mc_data, tmp_path_factory):
  paths, _ = mc_data
  model_dir = str(tmp_path_factory.mktemp("mc_run"))
  assert cli.main(_args(paths, model_dir, "train_eval_predict")) == 0
  assert cli.main(_args(paths, model_dir, "export")) == 0
  return paths, model_dir


def test_multiple_choice_learns_which_ending_is_right_and_predicts(
    mc_run):
  paths, model_dir = mc_run
  summary = mf.summary(model_dir)
  assert summary["selection_metric"] == "accuracy"
  metrics = summary["eval_metrics"]
  assert metrics["num_examples"] == 24
  assert metrics["accuracy"] >= 0.75, metrics       # chance is 1/3
  rows = open(os.path.join(model_dir, "choices_test.tsv")).read().splitlines()
  assert [r.split("\t")[0] for r in rows] == [f"q{i}" for i in range(10)]
  for row in rows:
    _, choice, *probabilities = row.split("\t")
    assert len(probabilities) == CHOICES
    assert int(choice) == int(np.argmax([float(p) for p in probabilities]))


def test_export_tflite_chooses_as_the_trained_model(mc_run, tmp_path):
  """Multiple choice declares a TFLite graph: export-tflite writes float and
  int8 models of its N-sequence rows whose choices agree with Keras."""
  import shutil
  paths, model_dir = mc_run
  run = str(tmp_path / "run")
  shutil.copytree(model_dir, run)
  assert cli.main(_args(paths, run, "export_tflite")) == 0
  report = json.load(open(os.path.join(run, "tflite", "tflite_report.json")))
  assert report["float"]["examples"] == 24
  assert report["float"]["argmax_agreement"] == 1.0
  assert report["float"]["max_probability_diff"] < 1e-5
  assert report["int8"]["argmax_agreement"] >= 0.75


def test_predictor_misuse_is_one_line_naming_what_to_do(mc_run):
  """Another number of choices than trained with, contexts with unequal
  choices, and predict() on a multiple-choice model are one-line errors
  (the first was TensorFlow's 40-line traceback; the last pointed to
  pairs)."""
  _, model_dir = mc_run
  predictor = bertexp.Predictor(model_dir)
  for call, message in (
      (lambda: predictor.choose("it is fun", ["good", "bad"]),
       r": choices: expected 3 per context$"),
      (lambda: predictor.choose(["it is fun", "dull ."],
                                [["a", "b", "c"], ["a", "b"]]),
       r"^context 1 has 2 choices, context 0 3"),
      (lambda: predictor.predict(["it is fun"]),
       r"this model reads \['choices', 'context'\], not texts or pairs: "
       r"use choose\(\)$")):
    with pytest.raises(ValueError, match=message) as error:
      call()
    assert "\n" not in str(error.value)


def test_served_choices_equal_the_predictor_and_the_predict_files(mc_run):
  paths, model_dir = mc_run
  examples = _examples(10, 3)
  predictor = bertexp.Predictor(model_dir)
  chosen = predictor.choose([e["context"] for e in examples],
                            [e["choices"] for e in examples])
  files = [r.split("\t") for r in open(os.path.join(
      model_dir, "choices_test.tsv")).read().splitlines()]
  assert [c["choice"] for c in chosen] == [int(r[1]) for r in files]
  np.testing.assert_allclose([c["probabilities"] for c in chosen],
                             [[float(p) for p in r[2:]] for r in files],
                             atol=1e-5)
  one = predictor.choose(examples[0]["context"], examples[0]["choices"])
  assert one["text"] == examples[0]["choices"][one["choice"]]
  process, rest, _ = start_server(os.path.join(model_dir, "export"),
                                  name="mc")
  try:
    reply = requests.post(
        f"http://127.0.0.1:{rest}/v1/models/mc:predict",
        json={"signature_name": "serve_text", "instances": [
            {"context": e["context"], "choices": e["choices"]}
            for e in examples]}, timeout=120)
    assert reply.status_code == 200, reply.text
    served = reply.json()["predictions"]
    bad = requests.post(
        f"http://127.0.0.1:{rest}/v1/models/mc:predict",
        json={"signature_name": "serve_text", "instances": [
            {"context": "fun", "choices": ["a", "b"]}]}, timeout=120)
    assert bad.status_code == 400, bad.text
    assert bad.json()["error"] == "choices: expected 3 per context"
  finally:
    process.kill()
  assert [s["choice"] for s in served] == [c["choice"] for c in chosen]
  np.testing.assert_allclose([s["probabilities"] for s in served],
                             [c["probabilities"] for c in chosen], atol=1e-5)


def test_multiple_choice_on_two_replicas_and_two_workers_equals_one(
    mc_data, tmp_path):
  """The task's strategy-matrix cell (a task's cell lives in its own test
  file, built from matrix_fixtures' helpers): 2 mirrored CPU replicas and 2
  MultiWorkerMirrored workers on localhost, over the same global batch,
  give the one-replica weights, loss, gradient norm and metrics (the
  matrix's 3 steps at 1e-3), each evaluating every EVAL_INTERVAL_STEPS=2
  steps (at 2 and 3; an epoch is 12)."""
  paths, _ = mc_data
  spec = {"gin_file": GIN_FILE, "params": dict(paths, EVAL_INTERVAL_STEPS=2),
          "order": ["bertexp.MultipleChoiceTask.shuffle_buffer_size=0",
                    "bertexp.MultipleChoiceTask.dropout_rate=0.0"]}
  runs = {}
  for name, strategy in (("one", "default"), ("mirrored", "mirrored_2")):
    runs[name] = str(tmp_path / name)
    mf.run_in_process(spec, runs[name], mf.STRATEGIES[strategy],
                      ['bertexp.configure_numerics.precision="float32"'])
  runs["workers"] = str(tmp_path / "workers")
  mf.run_two_workers(spec, runs["workers"],
                     ['bertexp.configure_numerics.precision="float32"'])
  # After 3 steps the N scores of an example are still nearly equal (loss
  # ln 3): the gradient sums per-choice terms (p_i - y_i) * ds_i whose ds_i
  # nearly cancel, so the rounding of another summation order is magnified
  # (seen here: 1.5e-5 of a 2.4e-4 norm with dynamic padding on, 2.5e-6
  # without). 1e-4 still fails any gradient scaled by more than 1.0001.
  for other in ("mirrored", "workers"):
    mf.assert_equal_runs(runs[other], runs["one"], paths["INIT_CHECKPOINT"],
                         gradient_norm_rtol=1e-4)
  assert [mf.evaluated_steps(run) for run in runs.values()] == [[2, 3]] * 3
