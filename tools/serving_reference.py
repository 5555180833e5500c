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
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bertexp.serving.benchmarks import timing  # noqa: E402  (numpy only)


def hf_inputs(length, vocab_size):
  """bertexp's benchmark ids under Hugging Face's names, int64."""
  ids = timing.token_ids(length, vocab_size)
  return {"input_ids": ids["input_word_ids"].astype(np.int64),
          "attention_mask": ids["input_mask"].astype(np.int64),
          "token_type_ids": ids["input_type_ids"].astype(np.int64)}


def latency(call, inputs, calls, warmup):
  return timing.latency(call, inputs, calls=calls, warmup=warmup)


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
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
        eager, hf_inputs(length, vocab), args.calls, args.warmup)))
  with tempfile.TemporaryDirectory() as tmp:
    float_path, int8_path = f"{tmp}/model.onnx", f"{tmp}/model_int8.onnx"
    sample = hf_inputs(16, vocab)
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
            hf_inputs(length, vocab), args.calls, args.warmup)))
  report = {"versions": {"torch": torch.__version__,
                         "transformers": transformers.__version__,
                         "onnxruntime": ort.__version__},
            "threads": args.threads, "latency": rows}
  with open(args.output, "w") as f:
    json.dump(report, f, indent=2)


if __name__ == "__main__":
  main()
