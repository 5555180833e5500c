"""Timing helpers shared by `bertexp benchmark-serving` and the references
of tools/bench_serving.py (numpy only: the references run in a venv
without TensorFlow)."""
import time

import numpy as np


def token_ids(length, vocab_size, seed=0):
  """One row of `length` token ids, {name: int32 [1, S]}: input_word_ids
  drawn with a fixed seed, every mask 1, every type 0."""
  rng = np.random.default_rng(seed)
  # Which ids does not change the speed; the count does.
  ids = rng.integers(min(1000, vocab_size // 2), vocab_size, size=length)
  return {"input_word_ids": ids[None].astype(np.int32),
          "input_mask": np.ones([1, length], np.int32),
          "input_type_ids": np.zeros([1, length], np.int32)}


def percentiles(seconds):
  """{"p50_ms", "p90_ms", "p99_ms", "calls"} of durations in seconds."""
  ms = 1000 * np.asarray(seconds)
  return {"p50_ms": float(np.percentile(ms, 50)),
          "p90_ms": float(np.percentile(ms, 90)),
          "p99_ms": float(np.percentile(ms, 99)), "calls": len(ms)}


def latency(call, inputs, *, calls, warmup):
  """p50/p90/p99 of `call(inputs)` one after another, after a warm-up."""
  for _ in range(warmup):
    call(inputs)
  times = []
  for _ in range(calls):
    start = time.perf_counter()
    call(inputs)
    times.append(time.perf_counter() - start)
  return percentiles(times)
