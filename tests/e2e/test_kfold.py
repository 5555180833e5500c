"""k-fold cross-validation end to end: `prepare classification --folds=K`
writes each fold's records, `bertexp sweep --folds=K` runs one trial per
fold, reports the fold mean and writes every row's out-of-fold prediction.
The partitions themselves: tests/unit/data/test_folds.py."""
import json
import os

import pytest

from bertexp import cli
from bertexp.sweeps import runner
from conftest import REPO, write_sst2_folder

DEMO = os.path.join(REPO, "experiments/demo/movie_sentiment_cpu.gin")


@pytest.fixture
def kfold_data(tmp_path, tiny_vocab):
  folder = write_sst2_folder(str(tmp_path / "sst"))
  assert cli.main(["prepare", "classification", "--task_name=kf",
                   f"--train_file={folder}/train.tsv",
                   f"--eval_file={folder}/dev.tsv", "--text_columns=sentence",
                   "--label_column=label", f"--vocab_file={tiny_vocab}",
                   f"--output_dir={tmp_path}/data", "--max_seq_length=16",
                   "--folds=2", "--fold_seed=7"]) == 0
  return tmp_path, json.load(open(f"{tmp_path}/data/kf_meta_data"))


def test_prepare_writes_each_folds_training_and_held_out_rows(kfold_data):
  _, meta = kfold_data
  train = meta["train_data_size"]
  assignment = meta["folds"]["assignment"]
  assert meta["folds"]["count"] == 2 and len(assignment) == train
  sizes = meta["split_sizes"]
  for k in range(2):
    assert sizes[f"fold{k}_eval"] == assignment.count(k)
    assert sizes[f"fold{k}_train"] + sizes[f"fold{k}_eval"] == train


def test_a_sweep_over_folds_reports_the_fold_mean_and_out_of_fold_rows(
    kfold_data, one_layer_config):
  root, meta = kfold_data
  grid = root / "grid.py"
  grid.write_text("def grid():\n  return [{'LEARNING_RATE': 1e-3}]\n")
  data = f"{root}/data"
  params = {"BERT_CONFIG_FILE": one_layer_config, "INIT_CHECKPOINT": None,
            "REQUIRE_PRETRAINED_ENCODER": False,
            "TRAIN_DATA_PATH": f"{data}/kf_train.tf_record",
            "EVAL_DATA_PATH": f"{data}/kf_eval.tf_record",
            "INPUT_META_DATA_PATH": f"{data}/kf_meta_data",
            "TRAIN_BATCH_SIZE": 8, "EVAL_BATCH_SIZE": 8, "TRAIN_STEPS": 4,
            "STEPS_PER_LOOP": 4}
  args = ["sweep", f"--gin_file={DEMO}", f"--grid={grid}", "--seeds=1",
          "--folds=2", f"--output_dir={root}/sweep"] + [
      f"--gin_param={k}={json.dumps(v) if isinstance(v, str) else v}"
      for k, v in params.items()] + [
      "--gin_param=bertexp.configure_numerics.precision='float32'"]
  assert cli.main(args) == 0
  trials = sorted(os.listdir(f"{root}/sweep"))
  assert "lr0.001_fold0_seed1" in trials and "lr0.001_fold1_seed1" in trials
  for k in range(2):   # each trial trained on the other fold, scored on its own
    summary = json.load(open(f"{root}/sweep/lr0.001_fold{k}_seed1/"
                             "training_summary.json"))
    assert summary["eval_metrics"]["num_examples"] == \
        meta["folds"]["assignment"].count(k)
  results = open(f"{root}/sweep/results.md").read()
  assert "over folds and seeds" in results and "| 2 |" in results
  rows = open(f"{root}/sweep/out_of_fold/learning_rate0.001_seed1.tsv"
              ).read().splitlines()[1:]
  assert [int(r.split("\t")[0]) for r in rows] == list(
      range(meta["train_data_size"]))
  # The sweep resumes: a rerun skips both finished folds.
  assert cli.main(args) == 0


def test_fold_trials_are_named_and_grouped_without_fold_and_seed():
  trials = runner.expand([{"LEARNING_RATE": 2e-5}], seeds=2, folds=3)
  assert [t.name for t in trials][:3] == [
      "lr2e-05_fold0_seed1", "lr2e-05_fold0_seed2", "lr2e-05_fold1_seed1"]
  assert len(trials) == 6 and {tuple(t.config.items()) for t in trials} == {
      (("LEARNING_RATE", 2e-5),)}
