"""`make demo-distill`'s table: held-out accuracy of the teacher and each
student run (mean ± std over seeds), parameters, and each exported
SavedModel's throughput at batch 32 and latency at batch 1 (token ids of
the held-out sentences, after a warm-up, on this CPU).

  python tools/distill_report.py student-config --layers=3 --output=...
  python tools/distill_report.py report --teacher=runs/demo \
      --rows='3-layer distilled=runs/distill_l3_seed*' ...
"""
import argparse
import glob
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
MINILM_CONFIG = ".cache/minilm_l6/bert_config.json"


def student_config(layers, output):
  """MiniLM-L6's config with `layers` layers (the student's width and heads
  equal the teacher's, so its layers can be copied from the teacher)."""
  with open(MINILM_CONFIG) as f:
    config = json.load(f)
  config["num_hidden_layers"] = layers
  os.makedirs(os.path.dirname(output), exist_ok=True)
  with open(output, "w") as f:
    json.dump(config, f, indent=2)
  print(f"wrote {output} ({layers} layers)")


def _export_speed(model_dir, features, batch, calls):
  """(examples per second at `batch`, p50 latency ms at batch 1)."""
  import tensorflow as tf
  import tensorflow_text  # noqa: F401  (ops of the serve_text signature)
  export = sorted(glob.glob(os.path.join(model_dir, "export", "*")))[-1]
  serve = tf.saved_model.load(export).signatures["serving_default"]
  take = lambda n: {k: tf.constant(v[:n]) for k, v in features.items()}
  for size in (batch, 1):
    for _ in range(5):
      serve(**take(size))
  start = time.perf_counter()
  for _ in range(calls):
    serve(**take(batch))
  throughput = calls * batch / (time.perf_counter() - start)
  one, latencies = take(1), []
  for _ in range(calls * 2):
    start = time.perf_counter()
    serve(**one)
    latencies.append(time.perf_counter() - start)
  return throughput, 1000 * float(np.median(latencies))


def _parameters(model_dir):
  import tensorflow as tf
  prefix = tf.train.latest_checkpoint(model_dir)
  return sum(int(np.prod(shape)) for name, shape in
             tf.train.list_variables(prefix) if name.startswith("model/"))


def _heldout_features(meta_path, count=64):
  import tensorflow as tf
  meta = json.load(open(meta_path))
  seq = meta["max_seq_length"]
  path = meta_path.replace("_meta_data", "_eval.tf_record")
  names = ("input_word_ids", "input_mask", "input_type_ids")
  spec = {k: tf.io.FixedLenFeature([seq], tf.int64) for k in names}
  rows = [tf.io.parse_single_example(r, spec) for r in
          tf.data.TFRecordDataset(path).take(count)]
  return {k: np.stack([r[k].numpy() for r in rows]).astype(np.int32)
          for k in names}


def report(teacher, rows, meta_path, batch=32, calls=40):
  """Prints the table (markdown)."""
  from bertexp.train import strategy as strategy_lib
  features = _heldout_features(meta_path)
  flags = set((strategy_lib.cpuinfo_field(("flags", "Features")) or "").split())
  print(f"CPU: {strategy_lib.cpuinfo_field(('model name',))}, "
        f"{os.cpu_count()} cores, flags: "
        f"{' '.join(sorted(f for f in flags if f.startswith(('avx', 'amx'))))}")
  print("| model | held-out accuracy | runs | parameters | ex/s at batch "
        f"{batch} | ×teacher | p50 ms at batch 1 |")
  print("|---|---|---|---|---|---|---|")
  base = None
  for label, pattern in [("teacher (MiniLM-L6, fine-tuned)", teacher)] + rows:
    dirs = sorted(glob.glob(pattern))
    if not dirs:
      print(f"| {label} | (no run at {pattern}) |")
      continue
    accuracy = [json.load(open(os.path.join(d, "training_summary.json")))[
        "eval_metrics"]["accuracy"] for d in dirs]
    spread = (f" ± {statistics.stdev(accuracy):.4f}" if len(accuracy) > 1
              else "")
    throughput, latency = _export_speed(dirs[0], features, batch, calls)
    base = base or throughput
    print(f"| {label} | {statistics.fmean(accuracy):.4f}{spread} | "
          f"{len(dirs)} | {_parameters(dirs[0]) / 1e6:.1f} M | "
          f"{throughput:.0f} | {throughput / base:.2f}× | {latency:.1f} |")


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
  sub = parser.add_subparsers(dest="command", required=True)
  config = sub.add_parser("student-config")
  config.add_argument("--layers", type=int, required=True)
  config.add_argument("--output", required=True)
  table = sub.add_parser("report")
  table.add_argument("--teacher", default="runs/demo")
  table.add_argument("--meta", default=".cache/data/movie_sentiment/"
                     "movie_sentiment_meta_data")
  table.add_argument("--rows", nargs="+", default=[],
                     help="'label=glob of run folders'")
  args = parser.parse_args()
  if args.command == "student-config":
    student_config(args.layers, args.output)
  else:
    report(args.teacher, [tuple(r.split("=", 1)) for r in args.rows],
           args.meta)


if __name__ == "__main__":
  main()
