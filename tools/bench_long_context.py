"""ModernBERT's attention at long context: one sliding-window (local) and
one global layer of base size (H 768, 12 heads, window 128) on one sequence
of 512, 2,048 and 8,192 tokens, forward pass, float32: seconds (median of
3 after a warm-up) and the process's peak resident memory, each cell in a
process of its own. A local layer computes its band only
(bertexp.model.encoders.modernbert.banded_attention), so its time and
memory grow linearly; a global layer's score matrix grows as S^2.

    .venv/bin/python tools/bench_long_context.py
"""
import json
import subprocess
import sys

LENGTHS = (512, 2048, 8192)


def _cell(kind, seq):
  """{"seconds", "peak_mb"} of one layer's forward pass, in this process."""
  import resource
  import time
  import numpy as np
  import tensorflow as tf
  from bertexp.model.encoders import modernbert
  config = modernbert.ModernBertConfig(
      vocab_size=1000, hidden_size=768, num_attention_heads=12,
      intermediate_size=1152, num_hidden_layers=3, local_attention=128,
      global_attn_every_n_layers=3)
  layer = modernbert.RotaryAttention(config, 0 if kind == "global" else 1)
  x = tf.constant(np.random.default_rng(0).normal(size=[1, seq, 768]),
                  tf.float32)
  mask = tf.ones([1, seq], tf.float32)
  run = tf.function(lambda x, mask: layer(x, mask)[0])
  run(x, mask).numpy()
  times = []
  for _ in range(3):
    start = time.perf_counter()
    run(x, mask).numpy()
    times.append(time.perf_counter() - start)
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  return {"seconds": float(np.median(times)), "peak_mb": peak}


def main():
  if len(sys.argv) == 3:                      # one cell, in its own process
    print(json.dumps(_cell(sys.argv[1], int(sys.argv[2]))))
    return
  from bertexp.util import machine
  print(machine.cpu_line(), flush=True)
  print("| tokens | local: s | local: peak MB | global: s | global: peak MB |")
  print("|---|---|---|---|---|")
  for seq in LENGTHS:
    row = {}
    for kind in ("local", "global"):
      out = subprocess.run([sys.executable, __file__, kind, str(seq)],
                           capture_output=True, text=True, check=True)
      row[kind] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"| {seq} | {row['local']['seconds']:.3f} | "
          f"{row['local']['peak_mb']:.0f} | {row['global']['seconds']:.3f} | "
          f"{row['global']['peak_mb']:.0f} |", flush=True)


if __name__ == "__main__":
  main()
