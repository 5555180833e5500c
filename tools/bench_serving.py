"""`make bench`: serving latency of the demo's classifier at batch 1,
bertexp's paths against what users would pick instead, in one run.

    python tools/bench_serving.py [--run runs/demo] [--calls 200]

bertexp: `bertexp benchmark-serving` of the run (its SavedModel in process,
through `bertexp serve` over gRPC and REST, its TFLite float and int8
files, its ONNX float32 and int8 models from `bertexp export-onnx` in
process and the int8 one through gRPC), and of the distilled 3-layer
student of `make demo-distill` when there is one (rows "student ..."). References: the same weights through bertexp's own Hugging Face
export (`convert-checkpoint --to=huggingface`), in PyTorch eager and ONNX
Runtime float32 and int8 (tools/serving_reference.py in the venv
.cache/bench_hf), same token ids, same threads. One table of p50 latency
with each path's ratio to ONNX Runtime float32 and int8 (> 1: slower), the
CPU line first; the JSON of both sides goes to RUN/serving_bench.json.
"""
import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
HF_PYTHON = os.path.join(REPO, ".cache", "bench_hf", "bin", "python")
BERTEXP = os.path.join(os.path.dirname(sys.executable), "bertexp")


def _bertexp(*args):
  subprocess.run([BERTEXP, *args], check=True)


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
  parser.add_argument("--run", default=os.path.join(REPO, "runs", "demo"))
  parser.add_argument("--calls", type=int, default=200)
  parser.add_argument("--lengths", default="16,128")
  parser.add_argument("--student", default=os.path.join(
      REPO, "runs", "distill_l3_distilled_seed1"),
                      help="a distilled student's run (make demo-distill): "
                           "its SavedModel and ONNX rows too, if it exists")
  args = parser.parse_args()
  run = args.run
  if not os.path.isdir(os.path.join(run, "export")):
    raise SystemExit(f"{run}: no export (run `make demo` first)")
  if not os.path.exists(os.path.join(run, "tflite", "model_int8.tflite")):
    _bertexp("export-tflite", "--gin_file=experiments/demo/movie_sentiment_cpu.gin",
             f"--gin_param=MODEL_DIR=\"{run}\"")
  _export_onnx(run, "experiments/demo/movie_sentiment_cpu.gin")
  hf_dir = os.path.join(run, "hf")
  if not os.path.exists(os.path.join(hf_dir, "config.json")):
    _bertexp("convert-checkpoint", "--to=huggingface", f"--input={run}",
             f"--output={hf_dir}")
  ours_file = os.path.join(run, "serving_benchmark.json")
  _bertexp("benchmark-serving", run, f"--lengths={args.lengths}",
           f"--calls={args.calls}", f"--output_json={ours_file}")
  reference_file = os.path.join(run, "serving_reference.json")
  subprocess.run([HF_PYTHON, os.path.join(REPO, "tools", "serving_reference.py"),
                  f"--hf_dir={hf_dir}", f"--lengths={args.lengths}",
                  f"--calls={args.calls}", "--threads", str(os.cpu_count()),
                  f"--output={reference_file}"], check=True)
  with open(ours_file) as f:
    ours = json.load(f)
  if os.path.isdir(args.student):
    _export_onnx(args.student,
                 "experiments/demo/movie_sentiment_distill_cpu.gin")
    student_file = os.path.join(args.student, "serving_benchmark.json")
    _bertexp("benchmark-serving", args.student, "--no_server",
             f"--lengths={args.lengths}", f"--calls={args.calls}",
             "--clients=1", f"--output_json={student_file}")
    with open(student_file) as f:
      ours["latency"] += [dict(row, path=f"student {row['path']}")
                          for row in json.load(f)["latency"]
                          if not row["path"].startswith("tflite")]
  with open(reference_file) as f:
    reference = json.load(f)
  print(table(ours, reference))
  with open(os.path.join(run, "serving_bench.json"), "w") as f:
    json.dump({"bertexp": ours, "reference": reference}, f, indent=2)


def _export_onnx(run, gin_file):
  """export-onnx of `run` unless its onnx/ folder is there."""
  if not os.path.isdir(os.path.join(run, "onnx", "int8")):
    _bertexp("export-onnx", f"--gin_file={gin_file}",
             f"--gin_param=MODEL_DIR=\"{run}\"")


def table(ours, reference):
  """p50 rows of both sides with ratios to ONNX Runtime float32 and int8."""
  env = ours["environment"]
  rows = ours["latency"] + reference["latency"]
  p50 = {(r["path"], r["tokens"]): r["p50_ms"] for r in rows}
  lines = [f"CPU: {env['cpu']}, {env['cores']} logical cores, "
           f"{' '.join(env['flags'])}; TensorFlow {env['tensorflow']}; "
           + ", ".join(f"{k} {v}" for k, v in reference["versions"].items())
           + f"; reference threads {reference['threads']}", "",
           f"{'path (batch 1)':<28}{'tokens':>7}{'p50 ms':>9}{'p99 ms':>9}"
           f"{'/ ORT fp32':>12}{'/ ORT int8':>12}"]
  for row in rows:
    fp32 = p50.get(("onnxruntime-float32", row["tokens"]))
    int8 = p50.get(("onnxruntime-int8", row["tokens"]))
    ratio = lambda ref: f"{row['p50_ms'] / ref:>11.2f}x" if ref else f"{'-':>12}"
    lines.append(f"{row['path']:<28}{row['tokens']:>7}{row['p50_ms']:>9.2f}"
                 f"{row['p99_ms']:>9.2f}{ratio(fp32)}{ratio(int8)}")
  return "\n".join(lines + [""] + server_costs(ours))


def server_costs(ours):
  """What the server adds to a call, and what batching gains, as lines:
  gRPC p50 minus in-process p50 on the same model; requests/s of the most
  clients with batching on / off (same threads); the bound in-process
  batch timing sets on that gain (1-row time x rows / batch time)."""
  p50 = {(r["path"], r["tokens"]): r["p50_ms"] for r in ours["latency"]}
  lines = []
  for served, local in (("grpc-onnx-int8", "onnx-int8"),
                        ("grpc", "savedmodel")):
    for (path, tokens), ms in sorted(p50.items()):
      if path == served and (local, tokens) in p50:
        lines.append(f"server adds (gRPC, {local}, {tokens} tokens): "
                     f"{ms - p50[(local, tokens)]:+.2f} ms")
  most = max((r["clients"] for r in ours["throughput"]), default=0)
  rate = {r["path"]: r["requests_per_second"] for r in ours["throughput"]
          if r["clients"] == most}
  for off, on in (("grpc", "grpc-batching"),
                  ("grpc-1-thread", "grpc-batching-1-thread")):
    if off in rate and on in rate:
      lines.append(f"batching gain, {most} clients ({on} / {off}): "
                   f"{rate[on]:.1f} / {rate[off]:.1f} req/s = "
                   f"{rate[on] / rate[off]:.2f}x")
  batch = {(r["path"], r["rows"]): r["p50_ms"] for r in ours.get("batch", [])}
  for (path, rows), ms in sorted(batch.items()):
    if rows > 1 and (path, 1) in batch:
      lines.append(f"batching bound, {path} in process: {rows} x "
                   f"{batch[(path, 1)]:.2f} ms / {ms:.2f} ms = "
                   f"{rows * batch[(path, 1)] / ms:.2f}x")
  return lines


if __name__ == "__main__":
  main()
