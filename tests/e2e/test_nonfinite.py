"""NaN and Inf on their own paths: the checkpoint manager's own refusal to
write a non-finite variable (the trainer's guard normally stops them before
it), and an INIT_CHECKPOINT holding a NaN refused before training."""
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.checkpoints import run_dir
from bertexp.checkpoints import verified
from conftest import REPO, prepare_tiny_sst2_run


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_the_manager_refuses_a_non_finite_variable_and_keeps_the_good_one(
    tmp_path, caplog, bad):
  weights = tf.Variable(np.ones([3, 4], np.float32), name="weights")
  counter = tf.Variable(0, dtype=tf.int64, name="counter")   # not floating
  manager = verified.VerifiedCheckpointManager(
      tf.train.Checkpoint(weights=weights, counter=counter), str(tmp_path),
      max_to_keep=1, checked_variables=[weights, counter])
  assert manager.save(checkpoint_number=1) == f"{tmp_path}/ckpt-1"
  weights[1, 2].assign(bad)
  with caplog.at_level(logging.ERROR):
    assert manager.save(checkpoint_number=2) is None
  assert "checkpoint NOT written: non-finite values in weights" in caplog.text
  # Nothing of ckpt-2 exists, and the rotation (max_to_keep=1) kept ckpt-1.
  assert not [p for p in os.listdir(tmp_path) if p.startswith("ckpt-2")]
  assert verified.latest_intact_checkpoint(str(tmp_path)) == (
      f"{tmp_path}/ckpt-1")
  assert np.all(tf.train.load_variable(
      f"{tmp_path}/ckpt-1", "weights/.ATTRIBUTES/VARIABLE_VALUE") == 1.0)


def test_an_init_checkpoint_with_a_nan_is_refused_before_training(
    tmp_path, tiny_vocab, tiny_config, capsys):
  paths = prepare_tiny_sst2_run(str(tmp_path / "exp"), tiny_vocab, tiny_config)
  prefix = paths["INIT_CHECKPOINT"]
  name = "encoder/embeddings/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE"
  table = tf.train.load_variable(prefix, name)
  table[5, 0] = np.nan                           # one row of one token
  # The same encoder checkpoint with the poisoned row.
  restored = run_dir.load_encoder(paths["BERT_CONFIG_FILE"], prefix)
  restored.embeddings.word_embeddings.assign(table)
  bad = str(tmp_path / "bad" / "bert_model.ckpt")
  tf.train.Checkpoint(encoder=restored).write(bad)
  gin_file = os.path.join(REPO, "experiments/demo/movie_sentiment_cpu.gin")
  params = [f'--gin_param={k}="{v}"' for k, v in
            dict(paths, INIT_CHECKPOINT=bad).items()] + [
      "--gin_param=TRAIN_BATCH_SIZE=8", "--gin_param=EVAL_BATCH_SIZE=8",
      "--gin_param=TRAIN_STEPS=2"]
  assert cli.main(["train", f"--gin_file={gin_file}"] + params) == 2
  err = capsys.readouterr().err
  assert "non-finite" in err and "word_embeddings" in err and bad in err
  assert not os.path.exists(os.path.join(paths["MODEL_DIR"], "ckpt-1.index"))
