"""End to end on a tiny encoder: train + eval, resume, eval, predict, export,
a shipped GLUE experiment with only bindings changed, and a ram:// run."""
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.tasks.classification import data as prepare
from conftest import (DEMO_GIN, REPO, SPREAD_TRAINING, TINY_CONFIG, copy_run,
                      gin_params, prepare_tiny_sst2_run)
import matrix_fixtures as mf


def _params(paths, **more):
  values = dict({k: f'"{v}"' if v is not None else "None"
                 for k, v in paths.items()}, TRAIN_BATCH_SIZE=8,
                EVAL_BATCH_SIZE=5, STEPS_PER_LOOP=1, SEED=1, **more)
  return [f"--gin_param={k}={v}" for k, v in values.items()]


def _train(paths, mode="train_and_eval", gin_file=None, bindings=(), **more):
  gin_file = gin_file or os.path.join(REPO, "experiments/demo/movie_sentiment_cpu.gin")
  code = cli.main(["train", f"--gin_file={gin_file}", f"--mode={mode}"] +
                  _params(paths, **more) +
                  [f"--gin_param={binding}" for binding in bindings])
  assert code == 0


def _read_json(path):
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


@pytest.fixture
def tiny_run(tmp_path, tiny_vocab, tiny_config):
  return prepare_tiny_sst2_run(str(tmp_path / "exp"), tiny_vocab, tiny_config)


def test_train_eval_resume_predict_export(tiny_run, caplog, capsys, tmp_path):
  paths = tiny_run
  model_dir = paths["MODEL_DIR"]
  init = tf.train.load_variable(paths["INIT_CHECKPOINT"],
                                "encoder/pooler/kernel/.ATTRIBUTES/VARIABLE_VALUE")
  with caplog.at_level("INFO"):
    _train(paths, TRAIN_STEPS=2,
           bindings=["bertexp.experiment.summary_histograms_every=1"])
  assert "initialised the encoder from" in caplog.text
  assert "(INIT_CHECKPOINT)" in caplog.text
  # One progress line per loop and one per evaluation (bertexp's), without
  # Orbit's echo of them (a dict of numpy scalars on stdout).
  assert "step 2/2  loss" in caplog.text
  assert re.search(r"eval at step 2/2: .*accuracy \d", caplog.text)
  printed = capsys.readouterr().out
  assert "Training Summary:" in printed
  assert "train | step:" not in printed and "np.float32" not in printed
  summary = _read_json(f"{model_dir}/training_summary.json")
  _check_run_records(model_dir, summary)
  assert summary["total_training_steps"] == 2 and summary["steps_this_run"] == 2
  assert summary["eval_metrics"]["num_examples"] == 16
  assert 0.0 <= summary["eval_metrics"]["accuracy"] <= 1.0
  assert summary["selection_metric"] == "accuracy"
  for key in ("train_loss", "last_train_metrics", "examples_per_second",
              "wall_time_seconds"):
    assert key in summary
  assert os.path.exists(f"{model_dir}/config.gin")
  assert "bertexp.ClassificationTask" in open(f"{model_dir}/operative_config.gin").read()
  assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-2")
  assert os.listdir(f"{model_dir}/summaries/train")
  assert os.listdir(f"{model_dir}/summaries/eval")
  # A train step changed the encoder (not only the head).
  trained = tf.train.load_variable(
      tf.train.latest_checkpoint(model_dir),
      "model/encoder/pooler/kernel/.ATTRIBUTES/VARIABLE_VALUE")
  assert not np.allclose(init, trained)

  # Resume: MODEL_DIR's checkpoint wins over INIT_CHECKPOINT.
  caplog.clear()
  with caplog.at_level("INFO"):
    _train(paths, TRAIN_STEPS=4)
  assert "resuming from" in caplog.text and "ckpt-2" in caplog.text
  summary = _read_json(f"{model_dir}/training_summary.json")
  assert summary["resumed_from_step"] == 2 and summary["steps_this_run"] == 2
  assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-4")
  step = tf.train.load_variable(tf.train.latest_checkpoint(model_dir),
                                "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")
  assert step == 4

  # Finished: a rerun (other bindings too) says so and changes nothing.
  record = {name: open(f"{model_dir}/{name}").read()
            for name in ("training_summary.json", "config.gin")}
  checkpoints = sorted(os.listdir(model_dir))
  capsys.readouterr()
  _train(paths, TRAIN_STEPS=4, LEARNING_RATE=0.5)
  assert "has finished training" in capsys.readouterr().out
  for name, text in record.items():
    assert open(f"{model_dir}/{name}").read() == text, name
  assert sorted(os.listdir(model_dir)) == checkpoints

  _train(paths, mode="eval", TRAIN_STEPS=4)
  evaluated = _read_json(f"{model_dir}/eval_results.json")
  assert evaluated["accuracy"] == pytest.approx(summary["eval_metrics"]["accuracy"])

  _train(paths, mode="predict")
  rows = [list(map(float, line.split("\t")))
          for line in open(f"{model_dir}/test_results.tsv").read().splitlines()]
  assert len(rows) == 16 and all(abs(sum(r) - 1) < 1e-5 for r in rows)
  submission = open(f"{model_dir}/submission/SST-2.tsv").read().splitlines()
  assert submission[0] == "index\tprediction" and len(submission) == 17
  assert submission[1].split("\t")[0] == "0"
  assert submission[1].split("\t")[1] in ("0", "1")

  # best_checkpoint/ holds the best eval so far, with its step and metrics.
  best = _read_json(f"{model_dir}/best_checkpoint/best_checkpoint.json")
  assert best["metric"] == "accuracy" and best["mode"] == "max"
  assert best["step"] in (1, 2, 3, 4)
  assert best["checkpoint"] == f"ckpt-{best['step']}"   # relative: movable
  assert tf.io.gfile.exists(f"{model_dir}/best_checkpoint/ckpt-{best['step']}.index")
  assert len(tf.io.gfile.glob(f"{model_dir}/best_checkpoint/ckpt-*.index")) == 1
  _train(paths, mode="eval",
         PREDICT_CHECKPOINT_PATH=f'"{model_dir}/best_checkpoint"')
  assert _read_json(f"{model_dir}/eval_results.json")["accuracy"] == pytest.approx(
      best["metrics"]["accuracy"])

  _train(paths, mode="export_only")
  versions = os.listdir(f"{model_dir}/export")
  assert len(versions) == 1
  loaded = tf.saved_model.load(f"{model_dir}/export/{versions[0]}")
  serve = loaded.signatures["serving_default"]
  batch = next(iter(tf.data.TFRecordDataset(paths["TEST_DATA_PATH"]).batch(16)))
  spec = {n: tf.io.FixedLenFeature([16], tf.int64)
          for n in ("input_word_ids", "input_mask", "input_type_ids")}
  features = {k: tf.cast(v, tf.int32)
              for k, v in tf.io.parse_example(batch, spec).items()}
  probabilities = serve(**features)["probabilities"].numpy()
  np.testing.assert_allclose(probabilities, np.array(rows), atol=1e-5)
  _check_serve_text_in_fresh_process(f"{model_dir}/export/{versions[0]}", rows)
  _check_predictor(model_dir, rows)
  # Each mode kept its own config record; training's is untouched.
  assert open(f"{model_dir}/config.gin").read() == record["config.gin"]
  for mode in ("eval", "predict", "export"):
    assert "MODEL_DIR" in open(f"{model_dir}/config_{mode}.gin").read()

  # The run folder moved elsewhere: its latest and best checkpoints resolve.
  moved = str(tmp_path / "moved_run")
  os.rename(model_dir, moved)
  _train(dict(paths, MODEL_DIR=moved), mode="eval",
         PREDICT_CHECKPOINT_PATH=f'"{moved}/best_checkpoint"')
  assert _read_json(f"{moved}/eval_results.json")["accuracy"] == pytest.approx(
      best["metrics"]["accuracy"])
  _train(dict(paths, MODEL_DIR=moved), mode="eval")
  assert _read_json(f"{moved}/eval_results.json")["checkpoint"].startswith(moved)


def _eval_and_checkpoint_steps(model_dir):
  """([steps evaluated], [checkpoint steps])."""
  checkpoints = sorted(int(p.split("ckpt-")[1].split(".")[0]) for p in
                       tf.io.gfile.glob(f"{model_dir}/ckpt-*.index"))
  return mf.evaluated_steps(model_dir), checkpoints


def test_eval_interval_steps_sets_when_a_run_evaluates_and_checkpoints(
    tiny_run, capsys):
  """64 examples in batches of 8: an epoch is 8 steps, so 10 steps evaluate
  at 8 and 10; with EVAL_INTERVAL_STEPS=3 at 3, 6, 9 and 10, and the
  checkpoints (their default interval is the evaluation's; TensorFlow's
  CheckpointManager writes the first loop's, then one once the interval
  has passed, and the last) follow."""
  _train(tiny_run, mode="plan", TRAIN_STEPS=10, EVAL_INTERVAL_STEPS=3)
  assert "10 steps of 8 examples (3 per evaluation" in capsys.readouterr().out
  _train(tiny_run, TRAIN_STEPS=10, EVAL_INTERVAL_STEPS=3)
  assert _eval_and_checkpoint_steps(tiny_run["MODEL_DIR"]) == (
      [3, 6, 9, 10], [1, 4, 7, 10])
  every_epoch = dict(tiny_run, MODEL_DIR=tiny_run["MODEL_DIR"] + "_epochs")
  _train(every_epoch, TRAIN_STEPS=10)
  assert _eval_and_checkpoint_steps(every_epoch["MODEL_DIR"]) == (
      [8, 10], [1, 9, 10])


def _check_serve_text_in_fresh_process(export_dir, predicted_rows):
  """Raw sentences -> the exported serve_text signature, in a new Python that
  imports no bertexp: same probabilities as --mode=predict."""
  import subprocess
  import sys
  from conftest import NEGATIVE, POSITIVE
  sentences = POSITIVE + NEGATIVE           # the test split, in order
  script = (
      "import json, sys, tensorflow as tf, tensorflow_text\n"
      "serve = tf.saved_model.load(sys.argv[1]).signatures['serve_text']\n"
      "out = serve(text=tf.constant(json.loads(sys.argv[2])))\n"
      "print(json.dumps({'p': out['probabilities'].numpy().tolist(),"
      " 'label': [x.decode() for x in out['label'].numpy()]}))\n")
  result = subprocess.run([sys.executable, "-c", script, export_dir,
                           json.dumps(sentences)], capture_output=True,
                          text=True, check=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert "bertexp" not in script
  served = json.loads(result.stdout.strip().splitlines()[-1])
  np.testing.assert_allclose(np.array(served["p"]), np.array(predicted_rows),
                             atol=1e-5)
  expected = ["0", "1"]
  assert served["label"] == [expected[int(np.argmax(r))] for r in predicted_rows]


def _check_run_records(model_dir, summary):
  """metrics.csv has every loop's and evaluation's metrics; TensorBoard's
  events hold the configuration text and the HParams session (in
  summaries/, whose train/ and eval/ hold its metrics) and the scalars."""
  import csv
  with open(f"{model_dir}/metrics.csv") as f:
    rows = list(csv.DictReader(f))
  train_loss = {int(r["step"]): float(r["value"]) for r in rows
                if r["split"] == "train" and r["metric"] == "loss"}
  assert sorted(train_loss) == [1, 2]
  assert train_loss[2] == pytest.approx(summary["train_loss"])
  eval_accuracy = [float(r["value"]) for r in rows
                   if r["split"] == "eval" and r["metric"] == "accuracy"]
  assert eval_accuracy == [pytest.approx(summary["eval_metrics"]["accuracy"])]
  tags = {}
  for path in tf.io.gfile.glob(f"{model_dir}/summaries/events.*") + (
      tf.io.gfile.glob(f"{model_dir}/summaries/train/events.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        tags[value.tag] = value
  assert "LEARNING_RATE" in tags["config"].tensor.string_val[0].decode()
  session = tags["_hparams_/session_start_info"].metadata.plugin_data.content
  assert b"TRAIN_BATCH_SIZE" in session and b"LEARNING_RATE" in session
  assert {"loss", "learning_rate", "gradient_norm"} <= set(tags)
  # summary_histograms_every=1 through `bertexp train`: per-layer norms and
  # histograms at every step, the histogram counting every weight.
  layers = ("embeddings", "layer_00", "layer_01", "pooler", "head")
  steps = {}
  for path in tf.io.gfile.glob(f"{model_dir}/summaries/train/events.*"):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        steps.setdefault(value.tag, set()).add(event.step)
        if value.tag == "weights/layer_00":
          buckets = tf.make_ndarray(value.tensor)           # [n, 3]
          assert buckets[:, 2].sum() > 1000
  for layer in layers:
    for kind in ("gradient_norm", "weight_norm", "weights", "gradients"):
      assert steps.get(f"{kind}/{layer}") == {1, 2}, (kind, layer, sorted(steps))


def _check_predictor(model_dir, predicted_rows):
  """bertexp.Predictor on the run folder (its newest export), in batches of
  3: --mode=predict's probabilities and labels, in order."""
  import bertexp
  from conftest import NEGATIVE, POSITIVE
  predictor = bertexp.Predictor(model_dir, batch_size=3)
  results = predictor.predict(POSITIVE + NEGATIVE)
  np.testing.assert_allclose([r["probabilities"] for r in results],
                             predicted_rows, atol=1e-5)
  assert [r["label"] for r in results] == [
      str(int(np.argmax(r))) for r in predicted_rows]
  with pytest.raises(ValueError, match="row 1: expected a string"):
    predictor.predict(["fine", 3])
  # `answer` is the question-answering task's method, not a classifier's.
  with pytest.raises(AttributeError, match="has no method 'answer'"):
    predictor.answer("who?", "me")
  with pytest.raises(FileNotFoundError, match="no exported model"):
    bertexp.Predictor(f"{model_dir}/summaries")


def test_predict_without_checkpoint_is_a_clear_error(tiny_run, capsys):
  code = cli.main(["train", "--gin_file=experiments/demo/movie_sentiment_cpu.gin",
                   "--mode=predict"] + _params(tiny_run))
  assert code == 2
  assert "no checkpoint to evaluate, predict or export" in capsys.readouterr().err


def test_shipped_glue_experiment_runs_with_only_bindings_changed(tiny_run):
  """experiments/glue/sst2_base.gin (mirrored strategy) on the tiny fixture."""
  _train(tiny_run, gin_file=os.path.join(REPO, "experiments/glue/sst2_base.gin"),
         NUM_GPUS=0, TRAIN_STEPS=2)
  summary = _read_json(f"{tiny_run['MODEL_DIR']}/training_summary.json")
  assert summary["total_training_steps"] == 2
  assert summary["eval_metrics"]["num_examples"] == 16


def test_full_run_on_a_non_local_file_system(tiny_vocab, tiny_config):
  """Everything under ram://: no code path may assume the local disk."""
  root = "ram://bertexp_test"
  paths = prepare_tiny_sst2_run(root, tiny_vocab, tiny_config)
  _train(paths, TRAIN_STEPS=2)
  _train(paths, mode="predict")
  _train(paths, mode="export")
  model_dir = paths["MODEL_DIR"]
  summary = _read_json(f"{model_dir}/training_summary.json")
  assert summary["eval_metrics"]["num_examples"] == 16
  assert tf.io.gfile.exists(f"{model_dir}/test_results.tsv")
  assert tf.io.gfile.exists(f"{model_dir}/config.gin")
  assert tf.io.gfile.listdir(f"{model_dir}/export")
  assert not os.path.exists("ram:")


def test_mnli_reports_matched_and_mismatched(tmp_path, tiny_vocab, tiny_config):
  """experiments/glue/mnli_base.gin on a tiny MNLI-format folder."""
  from glue_layouts import GLUE_LAYOUTS
  files, _ = GLUE_LAYOUTS["MNLI"]
  folder = tmp_path / "MNLI"
  folder.mkdir()
  for name, text in files.items():
    lines = text.splitlines()
    # 8 copies of each data row: enough for a few batches.
    (folder / name).write_text("\n".join([lines[0]] + lines[1:] * 8) + "\n")
  data = tmp_path / "data"
  prepare.prepare_glue("MNLI", input_dir=str(folder), vocab_file=tiny_vocab,
                       output_dir=str(data), max_seq_length=12)
  paths = {
      "BERT_CONFIG_FILE": tiny_config, "INIT_CHECKPOINT": "None",
      "TRAIN_DATA_PATH": f"{data}/mnli_train.tf_record",
      "EVAL_DATA_PATH": f"{data}/mnli_eval.tf_record",
      "TEST_DATA_PATH": "None",
      "INPUT_META_DATA_PATH": f"{data}/mnli_meta_data",
      "MODEL_DIR": str(tmp_path / "model")}
  extra = {"EXTRA_EVAL_DATA_PATHS":
           f'{{"eval_mismatched": "{data}/mnli_eval_mismatched.tf_record"}}',
           "EXTRA_TEST_DATA_PATHS": f'{{"ax": "{data}/mnli_ax.tf_record"}}'}
  params = [f'--gin_param={k}="{v}"' for k, v in paths.items()
            if v != "None"] + ["--gin_param=INIT_CHECKPOINT=None",
                               "--gin_param=TEST_DATA_PATH=None",
                               "--gin_param=REQUIRE_PRETRAINED_ENCODER=False"] + [
      f"--gin_param={k}={v}" for k, v in extra.items()] + [
      "--gin_param=TRAIN_BATCH_SIZE=4", "--gin_param=EVAL_BATCH_SIZE=3",
      "--gin_param=TRAIN_STEPS=2", "--gin_param=NUM_GPUS=0"]
  gin_file = os.path.join(REPO, "experiments/glue/mnli_base.gin")
  assert cli.main(["train", f"--gin_file={gin_file}"] + params) == 0
  summary = _read_json(f"{tmp_path}/model/training_summary.json")
  assert summary["eval_metrics"]["num_examples"] == 8
  assert summary["eval_metrics"]["mismatched/num_examples"] == 8
  assert "mismatched/accuracy" in summary["eval_metrics"]
  assert cli.main(["train", f"--gin_file={gin_file}", "--mode=predict"] + params) == 0
  submission = (tmp_path / "model" / "submission")
  assert sorted(os.listdir(submission)) == ["AX.tsv"]
  rows = (submission / "AX.tsv").read_text().splitlines()
  assert rows[0] == "index\tprediction" and len(rows) == 9
  assert rows[1].split("\t")[1] in ("contradiction", "entailment", "neutral")


def test_export_tflite_float_and_int8(tmp_path, trained_h64_classifier,
                                      capsys):
  # The shared classifier's kernels are 64 x 64 and more: above TFLite's
  # 1024-element floor for dynamic-range quantisation, so int8 must shrink
  # the model.
  tiny_run = copy_run(trained_h64_classifier, tmp_path / "model")
  assert cli.main(["export-tflite", f"--gin_file={DEMO_GIN}"] +
                  gin_params(tiny_run, **SPREAD_TRAINING)) == 0
  report = _read_json(f"{tiny_run['MODEL_DIR']}/tflite/tflite_report.json")
  assert report["float"]["examples"] == 16
  assert report["float"]["argmax_agreement"] == 1.0
  assert report["float"]["max_probability_diff"] < 1e-5
  assert report["int8"]["argmax_agreement"] >= 0.9
  assert report["int8"]["max_probability_diff"] < 0.05
  assert report["int8"]["bytes"] < 0.5 * report["float"]["bytes"]
  assert "TFLite int8" in capsys.readouterr().out


def test_orbit_echo_filter_keeps_every_other_line():
  import io
  from bertexp.train import console
  out = io.StringIO()
  stream = console.OrbitEchoFilter(out)
  stream.write("ours 1\ntrain | step:     50 | steps/sec:    1.0 | output: \n"
               "    {'accuracy': np.float32(0.5),\n     'loss': np.float32(0.6)}\n"
               "ours 2\n eval | step:    50 | running complete evaluation...\n"
               "saved checkpoint to runs/x/ckpt-50.\n eval | step: 50 | output: "
               "{'a': 1}\nours")
  stream.write(" 3\n{'not': 'orbit'}\nlast")
  stream.finish()
  assert out.getvalue() == "ours 1\nours 2\nours 3\n{'not': 'orbit'}\nlast"


def test_train_eval_predict_without_test_data_fails_before_training(
    tiny_run, capsys):
  paths = dict(tiny_run, TEST_DATA_PATH=None)
  code = cli.main(["train", "--gin_file=demo/movie_sentiment_cpu.gin",
                   "--mode=train_eval_predict"] + _params(paths))
  assert code == 2
  assert "needs TEST_DATA_PATH" in capsys.readouterr().err
  assert not tf.io.gfile.exists(paths["MODEL_DIR"])   # nothing trained


@pytest.mark.parametrize("binding,message", [
    ("TRAIN_BATCH_SIZE=0", "TRAIN_BATCH_SIZE=0: expected a whole number"),
    ("EVAL_BATCH_SIZE=-8", "EVAL_BATCH_SIZE=-8: expected a whole number"),
    ("NUM_TRAIN_EPOCHS=0", "NUM_TRAIN_EPOCHS=0: expected a number above 0"),
])
def test_a_batch_size_or_epochs_that_make_no_schedule_is_one_line(
    tiny_run, capsys, binding, message):
  paths = dict(tiny_run)
  gin_file = os.path.join(REPO, "experiments/demo/movie_sentiment_cpu.gin")
  params = [p for p in _params(paths) if binding.split("=")[0] not in p]
  code = cli.main(["train", f"--gin_file={gin_file}", "--mode=train"] +
                  params + [f"--gin_param={binding}"])
  err = capsys.readouterr().err
  assert code == 2 and message in err
  assert "Traceback" not in err and len(err.strip().splitlines()) == 1
  assert not os.path.exists(os.path.join(paths["MODEL_DIR"], "ckpt-1.index"))
