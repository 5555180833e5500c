"""Early stopping: `bertexp.experiment.early_stopping_patience` stops
training after that many evaluations without improvement, keeps the best
checkpoint for predict and export, says so in the Training Summary, and a
rerun does not train on; the same on 2 mirrored replicas."""
import glob
import json
import logging
import os

import numpy as np
import pytest

from bertexp import cli
from conftest import prepare_tiny_sst2_run
import matrix_fixtures as mf

FLOAT32 = ['bertexp.configure_numerics.precision="float32"']
GIN = ["experiments/demo/movie_sentiment_cpu.gin"]


def _checkpoints(model_dir):
  """The steps of MODEL_DIR's checkpoints, in order."""
  return sorted(int(os.path.basename(p)[5:-6])
                for p in glob.glob(f"{model_dir}/ckpt-*.index"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Tiny SST-2 (64 training sentences: an evaluation every 8 steps of 8),
  40 steps, patience 2 and a min_delta no evaluation can beat: on 1 and on
  2 mirrored replicas."""
  root = str(tmp_path_factory.mktemp("early"))
  from conftest import TINY_CONFIG, TINY_VOCAB
  vocab, config = f"{root}/vocab_src.txt", f"{root}/config_src.json"
  with open(vocab, "w") as f:
    f.write("\n".join(TINY_VOCAB) + "\n")
  with open(config, "w") as f:
    json.dump(dict(TINY_CONFIG, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0), f)
  params = prepare_tiny_sst2_run(f"{root}/data", vocab, config)
  params.update(TRAIN_BATCH_SIZE=8, EVAL_BATCH_SIZE=8, TRAIN_STEPS=40,
                STEPS_PER_LOOP=8, LEARNING_RATE=5e-3, SEED=3)
  extra = FLOAT32 + ["bertexp.ClassificationTask.shuffle_buffer_size=0",
                     "bertexp.experiment.early_stopping_patience=2",
                     "bertexp.experiment.early_stopping_min_delta=10.0"]
  result = {"params": params, "extra": extra}
  for name, strategy in (("one", "default"), ("mirrored", "mirrored_2")):
    result[name] = f"{root}/{name}"
    assert cli.main(mf.train_args(
        GIN, dict(params, MODEL_DIR=result[name]),
        extra + mf.STRATEGIES[strategy], mode="train_eval_predict")) == 0
  return result


def test_patience_runs_out_stops_training_and_says_so(runs):
  summary = mf.summary(runs["one"])
  assert summary["total_training_steps"] == 40
  # Evaluations at 8 (the first sets the best), 16 and 24 (two without a
  # gain of 10): training stops at 24 with a checkpoint there.
  assert summary["stopped_early_at_step"] == 24
  assert summary["steps_this_run"] == 24
  assert _checkpoints(runs["one"])[-1] == 24
  record = json.load(open(f"{runs['one']}/early_stopping.json"))
  assert record["evaluations_without_improvement"] == 2
  assert record["best_step"] == 8 and record["metric"] == "accuracy"


def test_predict_and_export_use_the_best_checkpoint_after_an_early_stop(
    runs, caplog):
  best = json.load(open(f"{runs['one']}/best_checkpoint/best_checkpoint.json"))
  # The predictions written after training (the default path), read before
  # anything else writes the file.
  after_training = np.loadtxt(f"{runs['one']}/test_results.tsv")
  for mode in ("predict", "export"):
    caplog.clear()
    with caplog.at_level(logging.INFO):
      assert cli.main(mf.train_args(
          GIN, dict(runs["params"], MODEL_DIR=runs["one"]), runs["extra"],
          mode=mode)) == 0
    restored = [r.getMessage() for r in caplog.records
                if r.getMessage().startswith("restored model weights from")]
    assert restored and restored[-1].endswith(
        f"best_checkpoint/{best['checkpoint']}"), (mode, restored)
  np.testing.assert_allclose(np.loadtxt(f"{runs['one']}/test_results.tsv"),
                             after_training, atol=1e-6)
  # ... and they are the best checkpoint's, not the last checkpoint's
  # (ckpt-24).
  assert cli.main(mf.train_args(
      GIN, dict(runs["params"], MODEL_DIR=runs["one"],
                PREDICT_CHECKPOINT_PATH=f"{runs['one']}/ckpt-24"),
      runs["extra"], mode="predict")) == 0
  last = np.loadtxt(f"{runs['one']}/test_results.tsv")
  assert np.abs(after_training - last).max() > 1e-5   # restores give equal outputs


def test_a_rerun_of_a_run_that_stopped_early_does_not_train_on(runs, capsys):
  before = _checkpoints(runs["one"])
  assert cli.main(mf.train_args(GIN, dict(runs["params"], MODEL_DIR=runs["one"]),
                                runs["extra"])) == 0
  assert "has finished training (it stopped early at step 24" in \
      capsys.readouterr().out
  assert _checkpoints(runs["one"]) == before


def test_two_replicas_stop_at_the_same_step_with_the_same_weights(runs):
  assert mf.summary(runs["mirrored"])["stopped_early_at_step"] == 24
  mf.assert_same_weights(mf.model_weights(runs["mirrored"], 24),
                         mf.model_weights(runs["one"], 24))


def test_early_stopping_without_evaluations_is_a_clear_error(runs, capsys,
                                                              tmp_path):
  assert cli.main(mf.train_args(GIN, dict(runs["params"],
                                          MODEL_DIR=str(tmp_path / "m")),
                                runs["extra"], mode="train")) == 2
  assert "early_stopping_patience needs evaluations" in capsys.readouterr().err
