"""`make bench`: end-to-end fine-tuning, bertexp against Hugging Face PyTorch.

    python tools/bench_vs_hf.py [--steps 40] [--rounds 2]

Both sides fine-tune MiniLM-L6 (the demo's weights) for sequence
classification on the demo's real movie-review sentences (seq 48, batch 32,
the batches bertexp's training order gives, the same token ids on both
sides), with AdamW + linear warmup/decay + clipping to norm 1.0, 2 threads.
bertexp: its real Trainer (`bertexp.trainer.Trainer`, one compiled loop of
--steps steps, as `bertexp train` runs it). Hugging Face:
tools/hf_reference.py in the venv .cache/bench_hf (torch and transformers
pinned in the Makefile). Each row is measured --rounds times, the two sides
alternating; the table shows medians and the ratio bertexp / Hugging Face
(> 1: bertexp faster). "fixed" pads every batch to 48; "dynamic" cuts each
batch to its longest sentence (bertexp: rounded up to --multiple; Hugging
Face: DataCollatorWithPadding's exact longest).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from bertexp import modeling  # noqa: E402
from bertexp import optimization  # noqa: E402
from bertexp import strategy as strategy_lib  # noqa: E402
from bertexp import trainer as trainer_lib  # noqa: E402
from bertexp.tasks import classification  # noqa: E402

DATA = os.path.join(REPO, ".cache", "data", "movie_sentiment")
HF_PYTHON = os.path.join(REPO, ".cache", "bench_hf", "bin", "python")
BATCH = 32


def _task():
  return classification.ClassificationTask(
      bert_config_file=os.path.join(REPO, ".cache/minilm_l6/bert_config.json"),
      meta_data_path=f"{DATA}/movie_sentiment_meta_data",
      train_data_path=f"{DATA}/movie_sentiment_train.tf_record", seed=42)


def dump_batches(task, steps, path):
  """The first `steps` training batches as numpy arrays, for the HF side."""
  batches = list(task.build_inputs("train", None, BATCH).take(steps))
  np.savez(path, **{
      "input_word_ids": np.stack([f["input_word_ids"].numpy() for f, _ in batches]),
      "input_mask": np.stack([f["input_mask"].numpy() for f, _ in batches]),
      "labels": np.stack([l.numpy() for _, l in batches])})
  return batches


def bertexp_rate(task, precision, steps, multiple, warmup=3):
  """Examples/s of bertexp's Trainer over `steps` steps after `warmup`."""
  tf_keras.mixed_precision.set_global_policy(
      "mixed_bfloat16" if precision == "bfloat16" else "float32")
  strategy = strategy_lib.make_strategy("default")
  with strategy.scope():
    model = task.build_model()
    modeling.restore_encoder(model.encoder,
                             os.path.join(REPO, ".cache/minilm_l6"))
    optimizer = optimization.create_optimizer(steps + warmup,
                                              (steps + warmup) // 10,
                                              learning_rate=2e-5)
    optimizer.build(model.trainable_variables)
  dataset = task.build_inputs("train", None, BATCH)
  trainer = trainer_lib.Trainer(
      task=task, model=model, optimizer=optimizer, strategy=strategy,
      global_batch_size=BATCH, eval_batch_size=BATCH,
      total_steps=steps + warmup, train_dataset=dataset,
      pad_to_multiple_of=multiple)
  trainer.train(tf.constant(warmup))
  start = time.perf_counter()
  trainer.train(tf.constant(steps))
  seconds = time.perf_counter() - start
  tf_keras.mixed_precision.set_global_policy("float32")
  return steps * BATCH / seconds


def hf_rate(batches_file, precision, padding, warmup=3):
  out = subprocess.run(
      [HF_PYTHON, os.path.join(REPO, "tools", "hf_reference.py"),
       "--model_dir", os.path.join(REPO, ".cache", "minilm_hf"),
       "--batches", batches_file, "--precision", precision,
       "--padding", padding, "--threads", "2", "--warmup", str(warmup)],
      check=True, capture_output=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])["examples_per_second"]


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--multiple", type=int, default=16)
  args = parser.parse_args()
  if not os.path.exists(HF_PYTHON):
    sys.exit(f"{HF_PYTHON} missing: run `make bench` (it builds that venv)")
  tf.config.threading.set_intra_op_parallelism_threads(2)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  task = _task()
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    batches_file = os.path.join(tmp, "batches.npz")
    batches = dump_batches(task, args.steps + 3, batches_file)
    lengths = [int(f["input_mask"].numpy().sum(1).max()) for f, _ in batches]
    print(f"longest sentence per batch: median {statistics.median(lengths)} "
          f"of 48 tokens", flush=True)
    for padding in ("fixed", "dynamic"):
      for precision in ("float32", "bfloat16"):
        ours, theirs = [], []
        for _ in range(args.rounds):
          ours.append(bertexp_rate(task, precision, args.steps,
                                   args.multiple if padding == "dynamic"
                                   else None))
          theirs.append(hf_rate(batches_file, precision, padding))
        row = (padding, precision, statistics.median(ours),
               statistics.median(theirs))
        rows.append(row)
        print(f"{padding:8} {precision:9} bertexp {row[2]:6.1f} ex/s  "
              f"Hugging Face {row[3]:6.1f} ex/s  ratio {row[2] / row[3]:.2f}",
              flush=True)
  fixed = {r[1]: r[2] for r in rows if r[0] == "fixed"}
  for padding, precision, ours, _ in rows:
    if padding == "dynamic":
      print(f"dynamic / fixed padding, bertexp {precision}: "
            f"{ours / fixed[precision]:.2f}x", flush=True)


if __name__ == "__main__":
  main()
