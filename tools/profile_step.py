"""Where a bertexp train step's time goes, by subtraction.

    python tools/profile_step.py [--precision mixed_bfloat16] [--seq 48]

MiniLM-L6's shape (random weights do not change the time), batch 32, the
given sequence length, 2 threads. Times, each a compiled tf.function over
the same batch, median of --windows windows of --steps steps:
  forward            the model's forward pass (training=True: dropout on)
  forward+backward   the tape and gradients too
  + optimizer        AdamW's update of every variable too (hand-written step)
  Trainer step       bertexp's real Trainer loop: loss normalisation, the
                     stop/divergence checks, clipping, metrics, the guarded
                     update (from an in-memory dataset)
Differences give backward, optimizer and the Trainer's own overhead.
Then the forward+backward pass is traced with TensorFlow's profiler and the
time is summed by op type (MatMul, Mul, Cast...; IDLE is a thread waiting):
the table TensorBoard's profile plugin shows as "framework op stats".
"""
import argparse
import collections
import dataclasses
import glob
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bertexp  # noqa: E402,F401  (before TensorFlow: legacy Keras, oneDNN)
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from bertexp.model import modeling  # noqa: E402
from bertexp.train import optimization  # noqa: E402
from bertexp.train import strategy as strategy_lib  # noqa: E402
from bertexp.train import trainer as trainer_lib  # noqa: E402
from bertexp.util import machine  # noqa: E402
import memory_probe  # noqa: E402  (tools/)

BATCH = 32


def _median_seconds(fn, windows, steps):
  fn()
  fn()
  times = []
  for _ in range(windows):
    start = time.perf_counter()
    for _ in range(steps):
      out = fn()
    tf.nest.map_structure(lambda t: t.numpy(), out)
    times.append((time.perf_counter() - start) / steps)
  return statistics.median(times)


def _inputs(seq):
  ids = tf.random.stateless_uniform([BATCH, seq], [1, 2], 5, 30522, tf.int32)
  features = {"input_word_ids": ids, "input_mask": tf.ones_like(ids),
              "input_type_ids": tf.zeros_like(ids)}
  return features, tf.zeros([BATCH], tf.int64)


def op_type_times(fn, calls=5):
  """{op type: seconds per call} of `fn` over `calls` traced calls."""
  # TensorBoard's profile plugin converts traces with this function; it is
  # the only converter TensorFlow ships without that plugin installed.
  from tensorflow.python.profiler.internal import _pywrap_profiler_plugin
  fn()
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    for _ in range(calls):
      fn()
    tf.profiler.experimental.stop()
    trace = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
    data, _ = _pywrap_profiler_plugin.xspace_to_tools_data(
        trace, "framework_op_stats", {})
  table = json.loads(data)[0]
  columns = [c["id"] for c in table["cols"]]
  times = collections.Counter()
  for row in table["rows"]:
    values = dict(zip(columns, [c.get("v") if c else None for c in row["c"]]))
    times[values["type"]] += values["total_self_time"] / 1e6 / calls
  return times


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
  parser.add_argument("--precision", default="mixed_bfloat16")
  parser.add_argument("--seq", type=int, default=48)
  parser.add_argument("--windows", type=int, default=5)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--top", type=int, default=12,
                      help="op types to list")
  args = parser.parse_args()
  print(machine.cpu_line(), flush=True)
  tf.config.threading.set_intra_op_parallelism_threads(2)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  tf_keras.mixed_precision.set_global_policy(args.precision)
  config = modeling.BertConfig(vocab_size=30522, hidden_size=384,
                               num_hidden_layers=6, num_attention_heads=12,
                               intermediate_size=1536)
  model = modeling.ClassifierModel(modeling.BertEncoder(config),
                                   2).build_variables()
  optimizer = optimization.create_optimizer(1000, 100, learning_rate=1e-5)
  optimizer.build(model.trainable_variables)
  features, labels = _inputs(args.seq)
  seed = tf.constant([1, 2], tf.int64)
  loss_fn = lambda logits: tf.reduce_mean(
      tf_keras.losses.sparse_categorical_crossentropy(labels, logits,
                                                      from_logits=True))

  @tf.function
  def forward():
    return loss_fn(model(features, training=True, dropout_seed=seed))

  @tf.function
  def backward():
    with tf.GradientTape() as tape:
      loss = loss_fn(model(features, training=True, dropout_seed=seed))
    grads = tape.gradient(loss, model.trainable_variables)
    return [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]

  @tf.function
  def update():
    with tf.GradientTape() as tape:
      loss = loss_fn(model(features, training=True, dropout_seed=seed))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  times = {"forward": _median_seconds(forward, args.windows, args.steps),
           "forward+backward": _median_seconds(backward, args.windows,
                                               args.steps),
           "+ optimizer": _median_seconds(update, args.windows, args.steps)}
  task = memory_probe.classification_task(tempfile.mkdtemp(),
                                         dataclasses.asdict(config), args.seq)
  trainer = trainer_lib.Trainer(
      task=task, model=model, optimizer=optimizer,
      strategy=strategy_lib.make_strategy("default"),
      settings=trainer_lib.StepSettings(global_batch_size=BATCH,
                                        eval_batch_size=BATCH),
      total_steps=1000,
      train_dataset=tf.data.Dataset.from_tensors((features, labels)).repeat())
  times["Trainer step"] = _median_seconds(
      lambda: trainer.train(tf.constant(args.steps))["loss"], args.windows,
      1) / args.steps
  total = times["Trainer step"]
  parts = {"forward": times["forward"],
           "backward": times["forward+backward"] - times["forward"],
           "optimizer": times["+ optimizer"] - times["forward+backward"],
           "Trainer overhead": total - times["+ optimizer"]}
  print(f"MiniLM-L6 shape, batch {BATCH}, seq {args.seq}, {args.precision}: "
        f"Trainer step {total * 1000:.0f} ms")
  for name, seconds in parts.items():
    print(f"  {name:18} {seconds * 1000:7.1f} ms  {seconds / total:6.1%}")
  times = op_type_times(backward)
  busy = sum(t for op, t in times.items() if op != "IDLE")
  print(f"forward+backward by op type (traced; {busy * 1000:.0f} ms busy "
        f"summed over the threads):")
  for op, seconds in times.most_common(args.top):
    print(f"  {op:36} {seconds * 1000:7.1f} ms")


if __name__ == "__main__":
  main()
