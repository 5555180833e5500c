"""A task defined outside the bertexp package, two ways with no change to
bertexp: tests/plugins/mean_pooled.py brought in by a gin file's own
`import` (docs/architecture.md shows it), and the same module installed with
pip as a package that declares it through the "bertexp.tasks" entry point
(its task.py, with tests/plugins/mean_pooled_prepare.py as its prepare.py).
The installed one goes the whole way a shipped task goes: its own `bertexp
prepare` verb, train and evaluate, predict through its own writer, export,
the Predictor, `bertexp serve` over TF Serving's REST API, and
`convert-checkpoint --to=huggingface` with its own files."""
import json
import os

import numpy as np
import pytest
import requests
import tensorflow as tf

import bertexp
from bertexp import cli
import task_packages
from conftest import (REPO, TESTS, TINY_CONFIG, TINY_VOCAB, start_server,
                      write_sst2_folder)

GIN_FILE = os.path.join(TESTS, "plugins", "mean_pooled.gin")


def _install(root):
  """The plugin as a distribution, installed by pip into root/site."""
  plugins = os.path.join(TESTS, "plugins")
  read = lambda name: open(os.path.join(plugins, name)).read()
  return task_packages.install(root, {
      "pyproject.toml": task_packages.pyproject(
          "bertexp-mean-pooled", "mean_pooled", "bertexp_mean_pooled",
          "bertexp_mean_pooled"),
      "bertexp_mean_pooled/__init__.py": "",
      "bertexp_mean_pooled/task.py": read("mean_pooled.py"),
      "bertexp_mean_pooled/prepare.py": read("mean_pooled_prepare.py")})


def _gin_without_import(root):
  """mean_pooled.gin less its `import` line: the entry point brings the
  task in."""
  lines = open(GIN_FILE).read().splitlines(keepends=True)
  path = os.path.join(root, "installed.gin")
  open(path, "w").write("".join(l for l in lines if not l.startswith(
      ("import ", "# A task from outside"))))
  return path


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory):
  """The installed plugin's run: data from its own prepare verb, then
  trained, evaluated, predicted and exported (one `bertexp` command each,
  as a user runs them)."""
  root = str(tmp_path_factory.mktemp("plugin"))
  vocab = os.path.join(root, "vocab.txt")
  open(vocab, "w").write("\n".join(TINY_VOCAB) + "\n")
  config = os.path.join(root, "config.json")
  json.dump(dict(TINY_CONFIG, hidden_dropout_prob=0.0,
                 attention_probs_dropout_prob=0.0), open(config, "w"))
  with pytest.MonkeyPatch.context() as patch:
    patch.syspath_prepend(_install(root))
    sst2 = write_sst2_folder(os.path.join(root, "SST-2"))
    data = os.path.join(root, "data")
    assert cli.main(["prepare", "mean_pooled_sst2", f"--input_dir={sst2}",
                     f"--vocab_file={vocab}", f"--output_dir={data}"]) == 0
    run = {"BERT_CONFIG_FILE": config, "INPUT_META_DATA_PATH":
           f"{data}/sst2_meta_data", "MODEL_DIR": os.path.join(root, "model"),
           **{f"{split.upper()}_DATA_PATH": f"{data}/sst2_{split}.tf_record"
              for split in ("train", "eval", "test")}}
    params = [f"--gin_param={k}={json.dumps(v)}" for k, v in run.items()] + [
        "--gin_param=TRAIN_STEPS=60", "--gin_param=TRAIN_BATCH_SIZE=8",
        "--gin_param=EVAL_BATCH_SIZE=8", "--gin_param=LEARNING_RATE=5e-3",
        "--gin_param=STEPS_PER_LOOP=20", "--gin_param=EVAL_INTERVAL_STEPS=60",
        "--gin_param=SEED=1"]
    gin_file = _gin_without_import(root)
    for mode in ("train_and_eval", "predict", "export"):
      assert cli.main(["train", f"--gin_file={gin_file}", f"--mode={mode}"] +
                      params) == 0, mode
    run["hf"] = os.path.join(root, "hf")
    assert cli.main(["convert-checkpoint", "--to=huggingface",
                     f"--input={run['MODEL_DIR']}",
                     f"--output={run['hf']}"]) == 0
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


def test_the_installed_task_goes_to_hugging_face_with_its_own_files(
    plugin_run):
  """Its head layer is `scorer`, the name of the multiple-choice task's
  head: the exporter takes only what the run's own task declares, so the
  folder is the encoder (BertModel, not BertForMultipleChoice) plus the
  plugin's mean_pooled_head.json, whose weights are the checkpoint's."""
  from safetensors.numpy import load_file
  output = plugin_run["hf"]
  config = json.load(open(os.path.join(output, "config.json")))
  assert config["architectures"] == ["BertModel"]
  assert not any(name.startswith("classifier") for name in
                 load_file(os.path.join(output, "model.safetensors")))
  head = json.load(open(os.path.join(output, "mean_pooled_head.json")))
  reader = tf.train.load_checkpoint(plugin_run["MODEL_DIR"])
  kernel = reader.get_tensor("model/scorer/kernel/.ATTRIBUTES/VARIABLE_VALUE")
  np.testing.assert_array_equal(np.array(head["weight"]), kernel.T)
  assert head["pooling"] == "mean" and np.ptp(kernel) > 0.01


def test_the_architecture_page_shows_exactly_the_task_these_tests_run():
  """docs/architecture.md's complete example is this plugin's module and
  gin file, character for character: the page's code is what runs here."""
  page = open(os.path.join(REPO, "docs", "architecture.md")).read()
  example = page.split("### A complete task outside the package", 1)[1]
  blocks = [block.split("\n", 1)[1] for block in example.split("```")[1::2]]
  plugins = os.path.join(TESTS, "plugins")
  assert blocks[0] == open(os.path.join(plugins, "mean_pooled.py")).read()
  assert blocks[1] == open(os.path.join(plugins, "mean_pooled.gin")).read()
