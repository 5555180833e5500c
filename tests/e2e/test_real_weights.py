"""A reduced version of the demo: real MiniLM weights, real sentences.

Checks that fine-tuning through the whole stack (convert -> prepare -> Orbit
train_and_eval) learns: held-out accuracy well above the untrained ~0.5.
"""
import json
import os

from bertexp import cli
from bertexp.checkpoints import converters
from bertexp.train import strategy
from bertexp.util import demo_data
from conftest import MINILM_HF, REPO, requires_minilm



def test_minilm_learns_movie_sentiment(tmp_path):
  requires_minilm()
  converters.convert_huggingface(MINILM_HF, str(tmp_path / "minilm"))
  rows = demo_data.read_movie_reviews()
  assert len(rows) == 10605
  demo_data.movie_tsv(str(tmp_path / "tsv"), heldout=300, seed=7)
  train = (tmp_path / "tsv" / "train.tsv").read_text().splitlines()
  (tmp_path / "small_train.tsv").write_text("\n".join(train[:1201]) + "\n")
  data = tmp_path / "data"
  assert cli.main([
      "prepare", "classification", "--task_name=movie",
      f"--train_file={tmp_path / 'small_train.tsv'}",
      f"--eval_file={tmp_path / 'tsv' / 'heldout.tsv'}",
      "--text_columns=sentence", "--label_column=label", "--labels=neg,pos",
      f"--vocab_file={tmp_path / 'minilm' / 'vocab.txt'}",
      f"--output_dir={data}", "--max_seq_length=48"]) == 0
  model_dir = tmp_path / "run"
  params = {
      "MODEL_DIR": f'"{model_dir}"',
      "BERT_CONFIG_FILE": f'"{tmp_path / "minilm" / "bert_config.json"}"',
      "INIT_CHECKPOINT": f'"{tmp_path / "minilm" / "bert_model.ckpt"}"',
      "TRAIN_DATA_PATH": f'"{data / "movie_train.tf_record"}"',
      "EVAL_DATA_PATH": f'"{data / "movie_eval.tf_record"}"',
      "TEST_DATA_PATH": "None",
      "INPUT_META_DATA_PATH": f'"{data / "movie_meta_data"}"',
      "TRAIN_BATCH_SIZE": 16, "LEARNING_RATE": 1e-4, "NUM_TRAIN_EPOCHS": 1,
      "STEPS_PER_LOOP": 25, "SEED": 5,
  }
  assert cli.main(["train", "--gin_file=experiments/demo/movie_sentiment_cpu.gin"] +
                  [f"--gin_param={k}={v}" for k, v in params.items()]) == 0
  summary = json.loads((model_dir / "training_summary.json").read_text())
  assert summary["total_training_steps"] == 75
  assert summary["eval_metrics"]["num_examples"] > 290
  assert summary["eval_metrics"]["accuracy"] >= 0.70, summary
  # The demo's precision is "auto": what this CPU computes fastest.
  assert summary["provenance"]["precision"] == strategy.auto_precision("CPU")
