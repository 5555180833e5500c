"""A task defined outside the bertexp package (tests/plugins/mean_pooled.py,
brought in by the gin file's own `import`) trains, evaluates, predicts,
exports and is served by `bertexp serve` with TF Serving's REST API, with
no change to bertexp: the Task interface is the whole seam."""
import json
import os

import numpy as np
import pytest
import requests
import tensorflow as tf

import bertexp
from bertexp import cli
from conftest import (REPO, TESTS, TINY_CONFIG, TINY_VOCAB,
                      prepare_tiny_sst2_run, start_server)

GIN_FILE = os.path.join(TESTS, "plugins", "mean_pooled.gin")


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory):
  """The plugin task's run: trained, evaluated, predicted and exported (one
  `bertexp train` each, as a user runs them)."""
  root = str(tmp_path_factory.mktemp("plugin"))
  vocab = os.path.join(root, "vocab.txt")
  with open(vocab, "w") as f:
    f.write("\n".join(TINY_VOCAB) + "\n")
  config = os.path.join(root, "config.json")
  with open(config, "w") as f:
    json.dump(dict(TINY_CONFIG, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0), f)
  run = prepare_tiny_sst2_run(os.path.join(root, "exp"), vocab, config)
  params = [f"--gin_param={k}={json.dumps(v)}" for k, v in run.items()] + [
      "--gin_param=TRAIN_STEPS=60", "--gin_param=TRAIN_BATCH_SIZE=8",
      "--gin_param=EVAL_BATCH_SIZE=8", "--gin_param=LEARNING_RATE=5e-3",
      "--gin_param=STEPS_PER_LOOP=20", "--gin_param=EVAL_INTERVAL_STEPS=60",
      "--gin_param=SEED=1"]
  for mode in ("train_and_eval", "predict", "export"):
    assert cli.main(["train", f"--gin_file={GIN_FILE}", f"--mode={mode}"] +
                    params) == 0, mode
  return run


def test_the_outside_task_trains_and_evaluates(plugin_run):
  model_dir = plugin_run["MODEL_DIR"]
  with open(os.path.join(model_dir, "training_summary.json")) as f:
    summary = json.load(f)
  assert summary["total_training_steps"] == 60
  metrics = summary["eval_metrics"]
  meta = json.load(open(plugin_run["INPUT_META_DATA_PATH"]))
  assert metrics["num_examples"] == meta["split_sizes"]["eval"]
  # The tiny sentences are separable: mean pooling learns them.
  assert metrics["accuracy"] >= 0.75, metrics
  assert summary["selection_metric"] == "accuracy"
  # The scorer is the plugin's own layer, saved in the run's checkpoint.
  names = [n for n, _ in tf.train.list_variables(
      tf.train.latest_checkpoint(model_dir))]
  assert any("scorer" in n for n in names)


def test_the_outside_task_predicts_through_its_own_writer(plugin_run):
  path = os.path.join(plugin_run["MODEL_DIR"], "mean_pooled_test.txt")
  rows = open(path).read().splitlines()
  meta = json.load(open(plugin_run["INPUT_META_DATA_PATH"]))
  assert len(rows) == meta["split_sizes"]["test"]
  assert set(rows) <= set(meta["label_names"])


def test_the_outside_task_export_is_served_and_read_by_the_predictor(
    plugin_run):
  """serve_text over REST equals the Predictor's generic rows and the
  model's own probabilities; positive and negative sentences part."""
  sentences = ["a great film !", "a dull film ."]
  predictor = bertexp.Predictor(plugin_run["MODEL_DIR"])
  rows = predictor.predict(sentences)
  assert [sorted(row) for row in rows] == [["label", "probabilities"]] * 2
  assert [row["label"] for row in rows] == ["1", "0"]
  export_dir = os.path.join(plugin_run["MODEL_DIR"], "export")
  process, rest, _ = start_server(export_dir, name="plugin")
  try:
    reply = requests.post(f"http://127.0.0.1:{rest}/v1/models/plugin:predict",
                          json={"signature_name": "serve_text",
                                "instances": [{"text": s} for s in sentences]},
                          timeout=120)
    assert reply.status_code == 200, reply.text
    served = reply.json()["predictions"]
  finally:
    process.kill()
  assert [row["label"] for row in served] == ["1", "0"]
  np.testing.assert_allclose([row["probabilities"] for row in served],
                             [row["probabilities"] for row in rows], atol=1e-5)


def test_a_head_named_like_a_shipped_tasks_is_not_exported_as_that_task(
    plugin_run, tmp_path, capsys):
  """The plugin's head layer is `scorer`, the name of the multiple-choice
  task's head: the exporter reads the run's own task from its config.gin,
  so the folder is the encoder (BertModel), and the line says the head was
  left out (it was written as BertForMultipleChoice before)."""
  from safetensors.numpy import load_file
  output = tmp_path / "hf"
  assert cli.main(["convert-checkpoint", "--to=huggingface",
                   f"--input={plugin_run['MODEL_DIR']}",
                   f"--output={output}"]) == 0
  config = json.load(open(output / "config.json"))
  assert config["architectures"] == ["BertModel"]
  assert "num_labels" not in config
  assert not any(name.startswith("classifier")
                 for name in load_file(str(output / "model.safetensors")))
  assert capsys.readouterr().out.rstrip().endswith(
      "not exported (no task of the run declares them for transformers): "
      "scorer")


def test_the_architecture_page_shows_exactly_the_task_these_tests_run():
  """docs/architecture.md's complete example is this plugin's module and
  gin file, character for character: the page's code is what runs here."""
  page = open(os.path.join(REPO, "docs", "architecture.md")).read()
  example = page.split("### A complete task outside the package", 1)[1]
  blocks = [block.split("\n", 1)[1] for block in example.split("```")[1::2]]
  plugins = os.path.join(TESTS, "plugins")
  assert blocks[0] == open(os.path.join(plugins, "mean_pooled.py")).read()
  assert blocks[1] == open(os.path.join(plugins, "mean_pooled.gin")).read()
