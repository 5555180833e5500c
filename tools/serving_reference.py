"""The references of tools/bench_serving.py, run in the venv .cache/bench_hf
(torch, transformers, onnxruntime pinned in the Makefile): bertexp's own
Hugging Face export of a run, at batch 1, in PyTorch eager and in ONNX
Runtime float32 and int8 (dynamic quantization of the MatMul weights, what
ONNX Runtime's quantize_dynamic does), on the same token ids and threads.

    .cache/bench_hf/bin/python tools/serving_reference.py --hf_dir=runs/demo/hf \
        --output=reference.json
"""
import argparse
import json
import os
import tempfile
import time

import numpy as np


def token_ids(length, vocab_size, seed=0):
  """The ids bertexp.serving.benchmark.token_ids draws (same formula)."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(min(1000, vocab_size // 2), vocab_size, size=length)
  return {"input_ids": ids[None].astype(np.int64),
          "attention_mask": np.ones([1, length], np.int64),
          "token_type_ids": np.zeros([1, length], np.int64)}


def latency(call, inputs, calls, warmup):
  for _ in range(warmup):
    call(inputs)
  times = []
  for _ in range(calls):
    start = time.perf_counter()
    call(inputs)
    times.append(time.perf_counter() - start)
  ms = 1000 * np.asarray(times)
  return {"p50_ms": float(np.percentile(ms, 50)),
          "p90_ms": float(np.percentile(ms, 90)),
          "p99_ms": float(np.percentile(ms, 99)), "calls": calls}


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--hf_dir", required=True)
  parser.add_argument("--lengths", default="16,128")
  parser.add_argument("--calls", type=int, default=200)
  parser.add_argument("--warmup", type=int, default=20)
  parser.add_argument("--threads", type=int, default=os.cpu_count())
  parser.add_argument("--output", required=True)
  args = parser.parse_args()
  import onnxruntime as ort
  import torch
  import transformers
  from onnxruntime.quantization import QuantType, quantize_dynamic
  torch.set_num_threads(args.threads)
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      args.hf_dir).eval()
  vocab = model.config.vocab_size
  lengths = [int(v) for v in args.lengths.split(",")]
  rows = []

  def eager(inputs):
    with torch.inference_mode():
      return model(**{k: torch.from_numpy(v) for k, v in inputs.items()})

  for length in lengths:
    rows.append(dict(path="pytorch-eager", tokens=length, **latency(
        eager, token_ids(length, vocab), args.calls, args.warmup)))
  with tempfile.TemporaryDirectory() as tmp:
    float_path, int8_path = f"{tmp}/model.onnx", f"{tmp}/model_int8.onnx"
    sample = token_ids(16, vocab)
    names = list(sample)
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    torch.onnx.export(model, tuple(torch.from_numpy(sample[n]) for n in names),
                      float_path, input_names=names, output_names=["logits"],
                      dynamic_axes=dict(axes, logits={0: "batch"}),
                      opset_version=17, dynamo=False)
    quantize_dynamic(float_path, int8_path, weight_type=QuantType.QInt8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    for name, path in (("onnxruntime-float32", float_path),
                       ("onnxruntime-int8", int8_path)):
      session = ort.InferenceSession(path, options,
                                     providers=["CPUExecutionProvider"])
      for length in lengths:
        rows.append(dict(path=name, tokens=length, **latency(
            lambda inputs: session.run(None, inputs),
            token_ids(length, vocab), args.calls, args.warmup)))
  report = {"versions": {"torch": torch.__version__,
                         "transformers": transformers.__version__,
                         "onnxruntime": ort.__version__},
            "threads": args.threads, "latency": rows}
  with open(args.output, "w") as f:
    json.dump(report, f, indent=2)


if __name__ == "__main__":
  main()
