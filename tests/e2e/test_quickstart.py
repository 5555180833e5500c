"""The README's "Quick start with your own data", command for command: a
Hugging Face BERT folder (real MiniLM weights) -> convert -> prepare CSV
files -> the shipped template -> train -> predict -> export -> Predictor.
Only the training length is cut short with --gin_param. Each command is a
process of its own, `python -m bertexp.cli` (what the `bertexp` script
runs; the installed script itself is test_install.py's) forked with
TensorFlow imported (forked_python)."""
import csv
import os
import shutil
import subprocess

import numpy as np

import forked_python
from bertexp import gin_setup
from conftest import MINILM_HF, NEGATIVE, POSITIVE, requires_minilm

BERTEXP = ["-m", "bertexp.cli"]
SHORT = ["--gin_param=TRAIN_STEPS=4", "--gin_param=TRAIN_BATCH_SIZE=8",
         "--gin_param=EVAL_BATCH_SIZE=8", "--gin_param=STEPS_PER_LOOP=2"]


def _process(args, cwd):
  """`python ARGS` in `cwd` to its end, its output captured."""
  return forked_python.run(args, cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=900)


def _run(args, cwd):
  result = _process(args, cwd)
  assert result.returncode == 0, (args, result.stdout[-2000:],
                                  result.stderr[-3000:])
  return result.stdout


def _run_quietly(args, cwd):
  """_run, and what a user reads (stdout + log) holds none of TensorFlow's,
  Keras' or Orbit's noise; returns both."""
  result = _process(args, cwd)
  assert result.returncode == 0, (args, result.stdout[-2000:],
                                  result.stderr[-3000:])
  seen = result.stdout + result.stderr
  for noise in ("Sharding callback", "get_config", "contains input name",
                "restoring or initializing", "loop running", "Traceback"):
    assert noise not in seen, (noise, seen[-3000:])
  return seen


def _write_csv(path, rows, header):
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(header)
    writer.writerows(rows)


def test_your_data_in_ten_minutes(tmp_path):
  requires_minilm()
  labelled = [(s, "positive") for s in POSITIVE] + [
      (s, "negative") for s in NEGATIVE]
  _write_csv(tmp_path / "train.csv", labelled * 2, ["text", "label"])
  _write_csv(tmp_path / "dev.csv", labelled, ["text", "label"])
  test_sentences = POSITIVE[:3] + NEGATIVE[:3]
  _write_csv(tmp_path / "test.csv",
             [(f"q{i}", s) for i, s in enumerate(test_sentences)],
             ["id", "text"])

  _run([*BERTEXP, "convert-checkpoint", "--from=huggingface",
        f"--input={MINILM_HF}", "--output=my_bert"], tmp_path)
  _run([*BERTEXP, "prepare", "classification", "--task_name=my_task",
        "--train_file=train.csv", "--eval_file=dev.csv",
        "--test_file=test.csv", "--text_columns=text", "--label_column=label",
        "--id_column=id", "--vocab_file=my_bert/vocab.txt",
        "--output_dir=my_data", "--max_seq_length=32"], tmp_path)
  shutil.copy(os.path.join(gin_setup.EXPERIMENTS_DIR, "templates",
                           "classification.gin"), tmp_path / "my_task.gin")
  out = _run_quietly([*BERTEXP, "train", "--gin_file=my_task.gin"] + SHORT,
                     tmp_path)
  assert out.count("Training Summary:") == 1
  assert out.count("bertexp: training started at step") == 1
  assert out.count(" loss ") >= 2          # one progress line per loop
  _run_quietly([*BERTEXP, "train", "--gin_file=my_task.gin", "--mode=predict"],
               tmp_path)
  out = _run_quietly([*BERTEXP, "train", "--gin_file=my_task.gin",
                      "--mode=export"], tmp_path)
  assert out.count("Exported SavedModel:") == 1

  run = tmp_path / "runs" / "my_task"
  submission = (run / "submission" / "my_task.tsv").read_text().splitlines()
  assert submission[0] == "index\tprediction"
  assert [line.split("\t")[0] for line in submission[1:]] == [
      f"q{i}" for i in range(6)]
  assert {line.split("\t")[1] for line in submission[1:]} <= {
      "negative", "positive"}
  # The exported model, from Python: --mode=predict's probabilities.
  script = ("import json, bertexp\n"
            f"rows = bertexp.Predictor('runs/my_task').predict({test_sentences!r})\n"
            "print(json.dumps(rows))\n")
  served = __import__("json").loads(_run(["-c", script],
                                         tmp_path).strip().splitlines()[-1])
  predicted = np.loadtxt(run / "test_results.tsv", ndmin=2)
  np.testing.assert_allclose([r["probabilities"] for r in served], predicted,
                             atol=1e-5)
  assert [r["label"] for r in served] == [
      ["negative", "positive"][int(np.argmax(p))] for p in predicted]
  # Back to Hugging Face from another folder, after the run folder moved:
  # the relative paths it was trained with (my_bert/, my_data/) resolve
  # from the folder the run was started in (config.gin's first line).
  moved = tmp_path / "elsewhere" / "my_task"
  shutil.move(str(run), str(moved))
  _run([*BERTEXP, "convert-checkpoint", "--to=huggingface",
        f"--input={moved}", "--output=my_task_hf"], moved.parent)
  config = __import__("json").loads(
      (moved.parent / "my_task_hf" / "config.json").read_text())
  assert config["architectures"] == ["BertForSequenceClassification"]
  assert config["id2label"] == {"0": "negative", "1": "positive"}
