"""`make bench`: end-to-end fine-tuning, bertexp against Hugging Face PyTorch.

    python tools/bench_vs_hf.py [--steps 40] [--rounds 2]

Both sides fine-tune MiniLM-L6 (the demo's weights) for sequence
classification on the demo's real movie-review sentences (seq 48, batch 32,
the batches bertexp's training order gives, the same token ids on both
sides), with AdamW + linear warmup/decay + clipping to norm 1.0, 2 threads.
The input pipeline alone is timed first (it must not be the bottleneck).
bertexp: its real Trainer (`bertexp.train.trainer.Trainer`, one compiled loop of
--steps steps, as `bertexp train` runs it). Hugging Face:
tools/hf_reference.py in the venv .cache/bench_hf (torch and transformers
pinned in the Makefile). Each row is measured --rounds times, the two sides
alternating; the table shows medians and the ratio bertexp / Hugging Face
(> 1: bertexp faster). "fixed" pads every batch to max_seq_length;
"dynamic" cuts each batch to its longest sentence (bertexp: rounded up to
--multiple, default 1 = exact, as `pad_to_multiple_of="auto"` does on a CPU;
Hugging Face: DataCollatorWithPadding's exact longest);
"dynamic+grouped" adds group_by_length (both sides get the same grouped
batches). The demo's sentences at seq 48 nearly always fill a batch's
longest row, so the same sentences are also prepared at --long_seq (128,
the usual fine-tuning length) to show what dynamic padding buys there.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import bertexp  # noqa: E402,F401  (before TensorFlow: legacy Keras, oneDNN)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from bertexp.checkpoints import run_dir  # noqa: E402
from bertexp.data import pipeline  # noqa: E402
from bertexp.model import modeling  # noqa: E402
from bertexp.tasks.classification import task as classification  # noqa: E402
from bertexp.train import optimization  # noqa: E402
from bertexp.train import strategy as strategy_lib  # noqa: E402
from bertexp.train import trainer as trainer_lib  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bertexp.util import machine  # noqa: E402

DATA = os.path.join(REPO, ".cache", "data", "movie_sentiment")
HF_PYTHON = os.path.join(REPO, ".cache", "bench_hf", "bin", "python")
BATCH = 32


MINILM = os.path.join(REPO, ".cache", "minilm_l6")


def _task(data=DATA, name="movie_sentiment", encoder_dir=MINILM):
  return classification.ClassificationTask(
      bert_config_file=os.path.join(encoder_dir, "bert_config.json"),
      meta_data_path=f"{data}/{name}_meta_data",
      train_data_path=f"{data}/{name}_train.tf_record", seed=42)


def prepare_at(max_seq_length, output_dir):
  """The demo's training sentences prepared at another max_seq_length."""
  from bertexp import cli
  assert cli.main([
      "prepare", "classification", "--task_name=movie_sentiment",
      "--train_file=.cache/movie_reviews/train.tsv",
      "--eval_file=.cache/movie_reviews/heldout.tsv",
      "--text_columns=sentence", "--label_column=label", "--labels=neg,pos",
      "--vocab_file=.cache/minilm_l6/vocab.txt", f"--output_dir={output_dir}",
      f"--max_seq_length={max_seq_length}"]) == 0
  return _task(output_dir)


def _train_order(grouped):
  return pipeline.TrainOrder(seed=42, group_by_length=grouped)


def dump_batches(task, steps, path, grouped=False):
  """The first `steps` training batches as numpy arrays, for the HF side."""
  batches = list(task.build_inputs(
      "train", None, BATCH, train_order=_train_order(grouped)).take(steps))
  np.savez(path, **{
      "input_word_ids": np.stack([f["input_word_ids"].numpy() for f, _ in batches]),
      "input_mask": np.stack([f["input_mask"].numpy() for f, _ in batches]),
      "labels": np.stack([l.numpy() for _, l in batches])})
  return batches


def bertexp_rate(task, precision, steps, multiple, grouped=False, warmup=3,
                 jit_compile=False, encoder_dir=MINILM):
  """Examples/s of bertexp's Trainer over `steps` steps after `warmup`."""
  tf_keras.mixed_precision.set_global_policy(
      "mixed_bfloat16" if precision == "bfloat16" else "float32")
  strategy = strategy_lib.make_strategy("default")
  with strategy.scope():
    model = task.build_model()
    run_dir.restore_encoder(model.encoder, encoder_dir)
    optimizer = optimization.create_optimizer(steps + warmup,
                                              (steps + warmup) // 10,
                                              learning_rate=2e-5)
    optimizer.build(model.trainable_variables)
  dataset = task.build_inputs("train", None, BATCH,
                              train_order=_train_order(grouped))
  trainer = trainer_lib.Trainer(
      task=task, model=model, optimizer=optimizer, strategy=strategy,
      settings=trainer_lib.StepSettings(
          global_batch_size=BATCH, eval_batch_size=BATCH,
          pad_to_multiple_of=multiple, jit_compile=jit_compile),
      total_steps=steps + warmup, train_dataset=dataset)
  trainer.train(tf.constant(warmup))
  start = time.perf_counter()
  trainer.train(tf.constant(steps))
  seconds = time.perf_counter() - start
  tf_keras.mixed_precision.set_global_policy("float32")
  return steps * BATCH / seconds


def input_rate(task, batches=300):
  """Examples/s of bertexp's training input pipeline alone (read, order,
  decode, batch): it must outrun the train step by far."""
  dataset = task.build_inputs("train", None, BATCH)
  iterator = iter(dataset)
  next(iterator)
  start = time.perf_counter()
  for _ in range(batches):
    next(iterator)
  return batches * BATCH / (time.perf_counter() - start)


def hf_rate(batches_file, precision, padding, warmup=3,
            model_dir=os.path.join(REPO, ".cache", "minilm_hf")):
  out = subprocess.run(
      [HF_PYTHON, os.path.join(REPO, "tools", "hf_reference.py"),
       "--model_dir", model_dir,
       "--batches", batches_file, "--precision", precision,
       "--padding", padding, "--threads", "2", "--warmup", str(warmup)],
      check=True, capture_output=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])["examples_per_second"]


def compare(task, label, cases, args):
  """Rows of (case, precision, bertexp ex/s, Hugging Face ex/s); each case is
  (name, bertexp pad multiple or None, grouped, Hugging Face padding)."""
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for name, multiple, grouped, hf_padding in cases:
      batches_file = os.path.join(tmp, f"{name}.npz")
      batches = dump_batches(task, args.steps + 3, batches_file, grouped)
      lengths = [int(f["input_mask"].numpy().sum(1).max()) for f, _ in batches]
      print(f"{label} {name}: longest sentence per batch: median "
            f"{statistics.median(lengths)}", flush=True)
      for precision in args.precisions.split(","):
        ours, theirs = [], []
        for _ in range(args.rounds):
          ours.append(bertexp_rate(task, precision, args.steps, multiple,
                                   grouped, jit_compile=args.jit_compile))
          theirs.append(hf_rate(batches_file, precision, hf_padding))
        row = (name, precision, statistics.median(ours),
               statistics.median(theirs))
        rows.append(row)
        print(f"{label} {name:16} {precision:9} bertexp {row[2]:6.1f} ex/s  "
              f"Hugging Face {row[3]:6.1f} ex/s  ratio {row[2] / row[3]:.2f}",
              flush=True)
  fixed = {r[1]: r[2] for r in rows if r[0] == "fixed"}
  for name, precision, ours, _ in rows:
    if name != "fixed":
      print(f"{label} {name} / fixed padding, bertexp {precision}: "
            f"{ours / fixed[precision]:.2f}x", flush=True)
  return rows


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--multiple", type=int, default=1,
                      help="bertexp's pad_to_multiple_of in the dynamic rows")
  parser.add_argument(
      "--precisions", default=None,
      help="comma-separated; default float32,bfloat16 on a CPU with bfloat16 "
      "instructions, float32 elsewhere (emulated bfloat16 compares the two "
      "libraries' emulations: Hugging Face's ran at ~1.5 ex/s on an AMD EPYC)")
  parser.add_argument("--long_seq", type=int, default=128)
  parser.add_argument("--jit_compile", action="store_true",
                      help="XLA-compile bertexp's forward and backward pass")
  args = parser.parse_args()
  print(machine.cpu_line(), flush=True)
  if args.precisions is None:
    native = strategy_lib.cpu_has_native_bfloat16()
    args.precisions = "float32,bfloat16" if native else "float32"
    if not native:
      print("bfloat16 rows skipped: no bfloat16 instructions here "
            "(--precisions=float32,bfloat16 runs them anyway)", flush=True)
  if not os.path.exists(HF_PYTHON):
    sys.exit(f"{HF_PYTHON} missing: run `make bench` (it builds that venv)")
  tf.config.threading.set_intra_op_parallelism_threads(2)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  task = _task()
  print(f"input pipeline alone: {input_rate(task):,.0f} examples/s",
        flush=True)
  compare(task, "seq 48", [("fixed", None, False, "fixed"),
                           ("dynamic", args.multiple, False, "dynamic")], args)
  if args.long_seq:
    with tempfile.TemporaryDirectory() as tmp:
      long_task = prepare_at(args.long_seq, tmp)
      compare(long_task, f"seq {args.long_seq}", [
          ("fixed", None, False, "fixed"),
          ("dynamic", args.multiple, False, "dynamic"),
          ("dynamic+grouped", args.multiple, True, "dynamic")], args)


if __name__ == "__main__":
  main()
