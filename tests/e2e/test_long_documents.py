"""Documents longer than max_seq_length: `prepare classification
--doc_stride` cuts them into overlapping windows, training reads windows,
and eval and predict pool each document's windows (`window_pooling`) so
that every document counts once."""
import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf

import bertexp
from bertexp import cli
from bertexp.checkpoints import converters
from bertexp.tasks.classification import data as prepare
from bertexp.tasks.classification import task as classification
from conftest import ONE_LAYER_CONFIG, TINY_CONFIG, TINY_VOCAB
import matrix_fixtures as mf

FLOAT32 = ['bertexp.configure_numerics.precision="float32"']
NEUTRAL = ["the", "movie", "was", "a", "film", "and", "it", "is", "plot", ",",
           "very", "."]


def _documents(count, seed):
  """Documents of 16-22 neutral words whose label word ("good"/"great" or
  "bad"/"dull") is only the last word."""
  rng = random.Random(seed)
  rows = []
  for k in range(count):
    label = k % 2
    words = [rng.choice(NEUTRAL) for _ in range(rng.randint(16, 22))]
    words.append(rng.choice(["good", "great"] if label else ["bad", "dull"]))
    rows.append((" ".join(words), label))
  return rows


def _write_tsv(path, rows):
  with open(path, "w") as f:
    f.write("sentence\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in rows))


def _prepare(root, doc_stride):
  os.makedirs(root, exist_ok=True)
  _write_tsv(f"{root}/train.tsv", _documents(64, 1))
  _write_tsv(f"{root}/eval.tsv", _documents(40, 2))
  with open(f"{root}/vocab.txt", "w") as f:
    f.write("\n".join(TINY_VOCAB) + "\n")
  return prepare.prepare_classification(
      task_name="long", train_file=f"{root}/train.tsv",
      eval_file=f"{root}/eval.tsv", test_file=f"{root}/eval.tsv",
      text_columns=["sentence"], label_column="label", labels=["0", "1"],
      vocab_file=f"{root}/vocab.txt", output_dir=f"{root}/data{doc_stride}",
      max_seq_length=16, doc_stride=doc_stride)


def test_long_texts_become_windows_with_their_label_and_document(tmp_path):
  meta = _prepare(str(tmp_path), 7)
  assert meta["doc_stride"] == 7
  assert meta["document_counts"] == {"train": 64, "eval": 40, "test": 40}
  # 17-23 words in windows of 14 pieces, 7 apart: 2 or 3 windows each.
  assert 2 * 64 <= meta["split_sizes"]["train"] <= 3 * 64
  spec = {n: tf.io.FixedLenFeature([16], tf.int64) for n in (
      "input_word_ids", "input_mask", "input_type_ids")}
  spec.update({n: tf.io.FixedLenFeature([], tf.int64) for n in (
      "label_ids", "example_id", "document_id")})
  batch = next(iter(tf.data.TFRecordDataset(
      f"{tmp_path}/data7/long_eval.tf_record").batch(1000)))
  records = {k: v.numpy() for k, v in tf.io.parse_example(batch, spec).items()}
  rows = _documents(40, 2)
  documents = records["document_id"]
  assert list(np.unique(documents)) == list(range(40))
  assert np.all(np.diff(documents) >= 0)                  # file order kept
  for k, (text, label) in enumerate(rows):
    mine = documents == k
    assert set(records["label_ids"][mine]) == {label}
    words = [TINY_VOCAB[i] for row in records["input_word_ids"][mine]
             for i in row if i > 4]
    # The windows cover the text: its last word is in the last window.
    assert words[-1] == text.split()[-1]


def test_per_document_outputs_are_the_pooled_window_outputs(tmp_path):
  """finalize_eval and the prediction file pool a document's window logits
  (mean or max) and count each document once: equal to a hand pooling."""
  _prepare(str(tmp_path), 7)
  config = str(tmp_path / "bert_config.json")
  with open(config, "w") as f:
    json.dump(ONE_LAYER_CONFIG, f)
  rng = np.random.default_rng(0)
  documents = np.array([0, 0, 1, 2, 2, 2, -1])             # -1: padding row
  outputs = rng.normal(size=[7, 2]).astype(np.float32)
  gathered = {"weights": np.array([1, 1, 1, 1, 1, 1, 0], np.float32),
              "labels": np.array([1, 1, 0, 1, 1, 1, 0]), "outputs": outputs,
              "document_id": documents, "example_id": np.array([0, 0, 1, 2, 2, 2, -1]),
              "loss": np.ones(7, np.float32)}
  for pooling, pool in (("mean", np.mean), ("max", np.max)):
    task = classification.ClassificationTask(
        bert_config_file=config, meta_data_path=f"{tmp_path}/data7/long_meta_data",
        test_data_path=f"{tmp_path}/data7/long_test.tf_record",
        window_pooling=pooling)
    pooled = np.stack([pool(outputs[documents == d], axis=0) for d in range(3)])
    labels, mine, ids = task.documents(gathered)
    np.testing.assert_allclose(mine, pooled, rtol=1e-6)
    assert list(labels) == [1, 0, 1] and list(ids) == [0, 1, 2]
    metrics = task.finalize_eval(gathered)
    assert metrics["num_examples"] == 3 and metrics["num_windows"] == 6
    assert metrics["accuracy"] == pytest.approx(np.mean(
        np.argmax(pooled, 1) == [1, 0, 1]))
    path, _ = task.write_predictions(gathered, str(tmp_path / pooling))
    probabilities = np.loadtxt(path, ndmin=2)
    expected = np.exp(pooled) / np.exp(pooled).sum(1, keepdims=True)
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)


def test_pairs_cannot_be_windowed(tmp_path):
  _write_tsv(str(tmp_path / "t.tsv"), [("a b", 0)])
  with open(tmp_path / "t.tsv", "w") as f:
    f.write("a\tb\tlabel\nx\ty\t0\n")
  with open(tmp_path / "vocab.txt", "w") as f:
    f.write("\n".join(TINY_VOCAB) + "\n")
  with pytest.raises(ValueError, match="windows single texts"):
    prepare.prepare_classification(
        task_name="p", train_file=str(tmp_path / "t.tsv"),
        eval_file=str(tmp_path / "t.tsv"), text_columns=["a", "b"],
        label_column="label", vocab_file=str(tmp_path / "vocab.txt"),
        output_dir=str(tmp_path / "out"), max_seq_length=16, doc_stride=4)


@pytest.fixture(scope="module")
def long_runs(tmp_path_factory):
  """The demo's gin file on documents whose label word is their last word:
  prepared with windows and without (truncated), 250 steps each."""
  root = str(tmp_path_factory.mktemp("long"))
  _prepare(root, 7)
  _prepare(root, None)
  config = f"{root}/bert_config.json"
  with open(config, "w") as f:
    json.dump(dict(TINY_CONFIG, hidden_size=32, intermediate_size=64,
                   hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0), f)
  tf.random.set_seed(0)
  converters.write_checkpoint_folder(bertexp.load_encoder(config),
                                     f"{root}/vocab.txt", f"{root}/init")
  runs = {}
  for name, data, steps, strategy in (
      ("windows", "data7", 250, "default"),
      ("truncated", "dataNone", 250, "default"),
      ("short", "data7", mf.TRAIN_STEPS, "default"),
      ("short_2", "data7", mf.TRAIN_STEPS, "mirrored_2")):
    runs[name] = f"{root}/{name}"
    params = dict(BERT_CONFIG_FILE=config,
                  INIT_CHECKPOINT=f"{root}/init/bert_model.ckpt",
                  TRAIN_DATA_PATH=f"{root}/{data}/long_train.tf_record",
                  EVAL_DATA_PATH=f"{root}/{data}/long_eval.tf_record",
                  TEST_DATA_PATH=f"{root}/{data}/long_test.tf_record",
                  INPUT_META_DATA_PATH=f"{root}/{data}/long_meta_data",
                  MODEL_DIR=runs[name], TRAIN_BATCH_SIZE=16, EVAL_BATCH_SIZE=16,
                  TRAIN_STEPS=steps, STEPS_PER_LOOP=steps,
                  EVAL_INTERVAL_STEPS=steps, LEARNING_RATE=3e-3,
                  SEED=3)
    assert cli.main(mf.train_args(
        ["experiments/demo/movie_sentiment_cpu.gin"], params,
        FLOAT32 + ['bertexp.ClassificationTask.window_pooling="max"'] +
        # The equality runs read the file in order, as the strategy matrix.
        (["bertexp.ClassificationTask.shuffle_buffer_size=0"]
         if name.startswith("short") else []) +
        mf.STRATEGIES[strategy], mode="train_eval_predict")) == 0
  return runs


def test_a_label_word_in_the_tail_is_learned_with_windows_only(long_runs):
  windows = mf.summary(long_runs["windows"])["eval_metrics"]
  truncated = mf.summary(long_runs["truncated"])["eval_metrics"]
  assert windows["num_examples"] == truncated["num_examples"] == 40
  assert windows["num_windows"] > 80
  # Measured here: 0.80 with windows, 0.525 truncated (chance: 0.5); with
  # one TensorFlow thread (other summation orders) 0.725 and 0.55.
  assert windows["accuracy"] >= 0.7, windows
  assert windows["accuracy"] >= truncated["accuracy"] + 0.15, truncated
  # One prediction row per document.
  assert len(np.loadtxt(f"{long_runs['windows']}/test_results.tsv",
                        ndmin=2)) == 40


def test_pooled_documents_are_the_same_on_one_and_two_replicas(long_runs):
  """A document's windows evaluated on different replicas are pooled as on
  one: 2 mirrored replicas give the 1-replica weights, per-document metrics
  and per-document predictions."""
  mf.assert_equal_runs(long_runs["short_2"], long_runs["short"],
                       f"{os.path.dirname(long_runs['short'])}/init/"
                       "bert_model.ckpt")
  assert mf.summary(long_runs["short"])["eval_metrics"]["num_examples"] == 40

