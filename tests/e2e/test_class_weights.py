"""Class weights for imbalanced labels and the metrics that show them:
`bertexp.ClassificationTask.class_weights` ("balanced" from the counts
`prepare` writes, or by label name), macro-F1 and per-class scores."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import bertexp
from bertexp import cli
from bertexp.checkpoints import converters
from bertexp.tasks.classification import data as prepare
from bertexp.tasks.classification import metrics as glue_metrics
from bertexp.tasks.classification import task as classification
from bertexp.train import trainer
from conftest import (NEGATIVE, POSITIVE, TINY_CONFIG,
                      TINY_VOCAB)
import matrix_fixtures as mf

FLOAT32 = ['bertexp.configure_numerics.precision="float32"']
MINORITY = POSITIVE[:4]


def _imbalanced(root):
  """Train: 4 positive and 36 negative rows (1:9). Each positive sentence
  is also in the file 3 times as negative: unweighted, the best answer for
  it is "neg" (1 against 3); with 'balanced' weights (5 against 3 x 0.56)
  it is "pos" — at convergence, whatever the path there. The others are
  negatives that say "bad" or "dull". Eval: the 4 sentences as positive,
  the 6 negatives."""
  os.makedirs(root, exist_ok=True)
  negative = [s for s in NEGATIVE if "not" not in s]               # 6
  rows = ([(s, "pos") for s in MINORITY] + [(s, "neg") for s in MINORITY] * 3 +
          [(s, "neg") for s in negative] * 4)
  with open(f"{root}/train.tsv", "w") as f:
    f.write("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows))
  with open(f"{root}/eval.tsv", "w") as f:
    f.write("sentence\tlabel\n" + "".join(
        f"{s}\t{l}\n" for s, l in [(s, "pos") for s in MINORITY] +
        [(s, "neg") for s in negative]))
  with open(f"{root}/vocab.txt", "w") as f:
    f.write("\n".join(TINY_VOCAB) + "\n")
  with open(f"{root}/bert_config.json", "w") as f:
    json.dump(dict(TINY_CONFIG, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0), f)
  return prepare.prepare_classification(
      task_name="imb", train_file=f"{root}/train.tsv",
      eval_file=f"{root}/eval.tsv", test_file=f"{root}/eval.tsv",
      text_columns=["sentence"],
      label_column="label", labels=["neg", "pos"],
      vocab_file=f"{root}/vocab.txt", output_dir=f"{root}/data",
      max_seq_length=16)


def _task(root, **kwargs):
  return classification.ClassificationTask(
      bert_config_file=f"{root}/bert_config.json",
      meta_data_path=f"{root}/data/imb_meta_data",
      train_data_path=f"{root}/data/imb_train.tf_record",
      eval_data_path=f"{root}/data/imb_eval.tf_record", **kwargs)


def test_balanced_weights_come_from_prepare_counts_and_weigh_the_loss(
    tmp_path):
  meta = _imbalanced(str(tmp_path))
  assert meta["label_counts"] == {"neg": 36, "pos": 4}
  task = _task(str(tmp_path), class_weights="balanced")
  assert task.class_weights == pytest.approx([40 / (2 * 36), 40 / (2 * 4)])
  assert _task(str(tmp_path), class_weights={"pos": 3.0}).class_weights == [
      1.0, 3.0]
  rng = np.random.default_rng(0)
  logits = rng.normal(size=[6, 2]).astype(np.float32)
  labels = np.array([0, 1, 0, 0, 1, 0])
  weights = np.array(task.class_weights)[labels]
  log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  expected = -(weights * log_softmax[np.arange(6), labels]).sum() / weights.sum()
  totals = {k: tf.reduce_sum(v) for k, v in task.loss_weights(labels).items()}
  loss = trainer.global_batch_loss(task, tf.constant(labels),
                                   tf.constant(logits), totals)
  assert float(loss) == pytest.approx(expected, rel=1e-6)
  unweighted = -log_softmax[np.arange(6), labels].mean()
  assert abs(expected - unweighted) > 0.05          # the weights matter here


@pytest.mark.parametrize("setting,message", [
    ({"positive": 2.0}, "class_weights names ['positive'], not labels"),
    ({"pos": -1.0}, "must be finite, >= 0"),
    ("inverse", "class_weights must be None, 'balanced'")])
def test_bad_class_weights_are_clear_errors(setting, message, tmp_path):
  _imbalanced(str(tmp_path))
  with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(
      "(", r"\(")):
    _task(str(tmp_path), class_weights=setting)


def test_balanced_without_prepared_counts_says_to_prepare_again(tmp_path):
  _imbalanced(str(tmp_path))
  path = f"{tmp_path}/data/imb_meta_data"
  meta = json.load(open(path))
  del meta["label_counts"]
  json.dump(meta, open(path, "w"))
  with pytest.raises(ValueError, match="prepare the data again"):
    _task(str(tmp_path), class_weights="balanced")


def test_macro_f1_and_per_class_scores_counted_by_hand():
  labels = np.array([0, 0, 0, 1, 1, 2])
  logits = np.eye(3)[[0, 0, 1, 1, 2, 2]]
  scores = glue_metrics.classification_metrics(
      ["macro_f1", "per_class"], labels, logits, ["a", "b", "c"])
  # a: tp 2, predicted 2, present 3; b: tp 1, 2, 2; c: tp 1, 2, 1.
  assert scores["precision_a"] == 1.0 and scores["recall_a"] == 2 / 3
  assert scores["f1_b"] == 0.5 and scores["f1_c"] == pytest.approx(2 / 3)
  assert scores["macro_f1"] == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)
  with pytest.raises(ValueError, match="unknown classification metric"):
    glue_metrics.classification_metrics(["recall"], labels, logits)


STEPS = 300                   # long enough to fit the training rows
EQUALITY_STEPS = 3            # as the strategy matrix: noise stays < 1e-5


@pytest.fixture(scope="module")
def imbalanced_runs(tmp_path_factory):
  """The demo's gin file on the 1:9 data: STEPS with and without
  class_weights='balanced' (1 replica); EQUALITY_STEPS of 'balanced' on 1
  and on 2 mirrored replicas."""
  root = str(tmp_path_factory.mktemp("imbalanced"))
  _imbalanced(root)
  tf.random.set_seed(0)
  converters.write_checkpoint_folder(bertexp.load_encoder(
      f"{root}/bert_config.json"), f"{root}/vocab.txt", f"{root}/init")
  params = dict(BERT_CONFIG_FILE=f"{root}/bert_config.json",
                INIT_CHECKPOINT=f"{root}/init/bert_model.ckpt",
                TRAIN_DATA_PATH=f"{root}/data/imb_train.tf_record",
                EVAL_DATA_PATH=f"{root}/data/imb_eval.tf_record",
                TEST_DATA_PATH=f"{root}/data/imb_test.tf_record",
                INPUT_META_DATA_PATH=f"{root}/data/imb_meta_data",
                TRAIN_BATCH_SIZE=8, EVAL_BATCH_SIZE=8, LEARNING_RATE=3e-3,
                SEED=3)
  extra = FLOAT32 + [
      'bertexp.ClassificationTask.metric_names=["macro_f1", "per_class"]']
  runs = {}
  for name, weights, strategy, steps, accumulation in (
      ("plain", [], "default", STEPS, 1),
      ("balanced", ["balanced"], "default", STEPS, 1),
      ("short", ["balanced"], "default", EQUALITY_STEPS, 1),
      ("short_2", ["balanced"], "mirrored_2", EQUALITY_STEPS, 1),
      ("short_accumulated", ["balanced"], "default", EQUALITY_STEPS, 2)):
    runs[name] = f"{root}/{name}"
    bindings = [f'bertexp.ClassificationTask.class_weights="{w}"'
                for w in weights]
    # The equality runs read the file in order: the first batch's halves
    # are all positive and all negative (unequal weight sums per replica).
    order = (["bertexp.ClassificationTask.shuffle_buffer_size=0"]
             if name.startswith("short") else [])
    assert cli.main(mf.train_args(
        ["experiments/demo/movie_sentiment_cpu.gin"],
        dict(params, MODEL_DIR=runs[name], TRAIN_STEPS=steps,
             STEPS_PER_LOOP=steps, EVAL_INTERVAL_STEPS=steps,
             GRADIENT_ACCUMULATION_STEPS=accumulation),
        extra + bindings + order + mf.STRATEGIES[strategy],
        # The equality runs compare weights and evaluations: no predictions.
        mode="train_and_eval" if name.startswith("short")
        else "train_eval_predict")) == 0
  return runs


def _minority_probability(run):
  """Mean P(pos) the run predicts for the held-out positive sentences."""
  probabilities = np.loadtxt(f"{run}/test_results.tsv", ndmin=2)[:, 1]
  return float(probabilities[:len(MINORITY)].mean())


def test_balanced_weights_raise_the_minority_class_recall(imbalanced_runs):
  """The minority sentences are 1 positive against 3 negative copies: the
  unweighted model learns P(pos) ~ 0.25 for them (recall 0), 'balanced'
  weighs the one positive above the three negatives: ~ 0.75 (measured after
  300 steps: 0.24 against 0.68, recall 0 against 1)."""
  plain = mf.summary(imbalanced_runs["plain"])["eval_metrics"]
  balanced = mf.summary(imbalanced_runs["balanced"])["eval_metrics"]
  assert _minority_probability(imbalanced_runs["plain"]) < 0.35
  assert _minority_probability(imbalanced_runs["balanced"]) > 0.55
  assert balanced["recall_pos"] >= plain["recall_pos"] + 0.5
  assert balanced["macro_f1"] >= plain["macro_f1"] + 0.3
  assert {"macro_f1", "precision_pos", "recall_neg", "f1_neg"} <= set(balanced)
  assert mf.summary(imbalanced_runs["balanced"])["selection_metric"] == "macro_f1"


@pytest.mark.parametrize("run", ["short_2", "short_accumulated"])
def test_weighted_loss_is_the_same_on_two_replicas_and_micro_batches(
    imbalanced_runs, run):
  """Global-batch normalisation by the summed weights: 2 mirrored replicas,
  or 2 accumulated micro-batches (each holding a different share of the
  minority class), train the weights of one batch on one replica."""
  ours, reference = imbalanced_runs[run], imbalanced_runs["short"]
  mf.assert_same_weights(mf.model_weights(ours, EQUALITY_STEPS),
                         mf.model_weights(reference, EQUALITY_STEPS))
  mf.assert_differences_far_below_movement(
      ours, reference, mf.summary(reference)["provenance"]["init_checkpoint"][
          "checkpoint"])
  ours, reference = mf.summary(ours), mf.summary(reference)
  assert ours["train_loss"] == pytest.approx(reference["train_loss"], rel=1e-5)
  assert ours["last_train_metrics"]["gradient_norm"] == pytest.approx(
      reference["last_train_metrics"]["gradient_norm"], rel=1e-5)
  mf.assert_same_metrics(ours["eval_metrics"], reference["eval_metrics"])
