"""`make demo-retrieval`: SQuAD v1.1 question -> paragraph retrieval.

Fine-tunes the demo's MiniLM (all-MiniLM-L6-v2 as shipped) as a bi-encoder
on training questions and their paragraphs (in-batch negatives over the
batch plus one BM25-mined hard negative per question, questions sharing a
paragraph kept out of each other's negatives),
then searches all dev-set paragraphs for dev questions, against BM25
(bm25s, a maintained implementation) and the model as shipped; and each
model's ranking merged with BM25's by reciprocal rank fusion (hybrid
search: no weight tuned on the dev questions). Writes
runs/retrieval/results.json and results.md (MRR@10, recall@1, recall@10:
mean ± std over the seeds) and keeps seed 1's run, exported, in
runs/retrieval/model and as a sentence-transformers folder in
runs/retrieval/sentence_transformers. A seed's run that finished before is
kept (delete runs/retrieval to train again).

    python tools/retrieval_demo.py [--seeds=1,2,3] [--train_pairs=3200]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np

from bertexp.tasks.embedding import retrieval
from bertexp.util import demo_data
from bertexp.util import machine

OUT = "runs/retrieval"
DATA = ".cache/data/squad_retrieval"
GIN = "experiments/demo/squad_retrieval_cpu.gin"
MEASURES = ("mrr@10", "recall@1", "recall@10")
DEPTH = 100          # documents kept per query, by each retriever and fused
SHIPPED = ".cache/minilm_l6"


def _squad(split):
  with open(os.path.join(demo_data.SQUAD_DIR, f"{split}-v1.1.json")) as f:
    return json.load(f)["data"]


def _paragraphs(articles):
  """[(paragraph id, text, [questions])] in file order."""
  return [(f"{a_index}_{p_index}", p["context"], [q["question"] for q in p["qas"]])
          for a_index, article in enumerate(articles)
          for p_index, p in enumerate(article["paragraphs"])]


def _bm25_index(texts):
  import bm25s
  index = bm25s.BM25()
  index.index(bm25s.tokenize(texts, stopwords="en", show_progress=False),
              show_progress=False)
  return index


def _bm25_search(index, texts, k):
  import bm25s
  found, _ = index.retrieve(bm25s.tokenize(texts, stopwords="en",
                                           show_progress=False),
                            k=k, show_progress=False)
  return found


def _hard_negatives(pairs, paragraphs):
  """Each pair's hard negative, as DPR mines them: the training paragraph
  BM25 ranks highest for the question that is not its own."""
  index = _bm25_index([text for _, text, _ in paragraphs])
  found = _bm25_search(index, [p["query"] for p in pairs], 2)
  for pair, row in zip(pairs, found):
    other = next(j for j in row if paragraphs[j][0] != pair["doc_id"])
    pair["negative"] = paragraphs[other][1]


def write_files(folder, train_pairs, dev_questions, seed=12345):
  """train.jsonl (question, paragraph, its id, a BM25-mined hard
  negative), and the dev evaluation: queries.tsv (a sample of dev
  questions), corpus.tsv (every dev paragraph), qrels.tsv."""
  os.makedirs(folder, exist_ok=True)
  rng = random.Random(seed)
  paragraphs = _paragraphs(_squad("train"))
  pairs = [{"query": q, "positive": text, "doc_id": pid}
           for pid, text, questions in paragraphs for q in questions]
  rng.shuffle(pairs)
  pairs = pairs[:train_pairs]
  _hard_negatives(pairs, paragraphs)
  with open(os.path.join(folder, "train.jsonl"), "w") as f:
    f.write("".join(json.dumps(p) + "\n" for p in pairs))
  dev = _paragraphs(_squad("dev"))
  questions = [(f"q{i}", q, pid) for i, (q, pid) in enumerate(
      (q, pid) for pid, _, qs in dev for q in qs)]
  questions = sorted(rng.sample(questions, dev_questions),
                     key=lambda q: int(q[0][1:]))
  clean = lambda text: " ".join(text.split())       # no tabs or newlines
  with open(os.path.join(folder, "corpus.tsv"), "w") as f:
    f.write("id\ttext\n" + "".join(f"{pid}\t{clean(text)}\n"
                                   for pid, text, _ in dev))
  with open(os.path.join(folder, "queries.tsv"), "w") as f:
    f.write("id\ttext\n" + "".join(f"{qid}\t{clean(q)}\n"
                                   for qid, q, _ in questions))
  with open(os.path.join(folder, "qrels.tsv"), "w") as f:
    f.write("query_id\tdoc_id\n" + "".join(f"{qid}\t{pid}\n"
                                           for qid, _, pid in questions))


def _read_tsv(path):
  with open(path) as f:
    rows = [line.rstrip("\n").split("\t") for line in f][1:]
  return rows


def evaluation_files(folder):
  """(corpus [(id, text)], queries [(id, text)], qrels {query: {doc: 1}})."""
  qrels = {}
  for query, doc in _read_tsv(os.path.join(folder, "qrels.tsv")):
    qrels.setdefault(query, {})[doc] = 1
  return (_read_tsv(os.path.join(folder, "corpus.tsv")),
          _read_tsv(os.path.join(folder, "queries.tsv")), qrels)


def bm25_rankings(corpus, queries):
  """BM25 (bm25s, Lucene's scoring, English stopwords) over the corpus:
  {query id: the best DEPTH document ids}."""
  found = _bm25_search(_bm25_index([text for _, text in corpus]),
                       [text for _, text in queries], DEPTH)
  return {qid: [corpus[j][0] for j in row]
          for (qid, _), row in zip(queries, found)}


def dense_rankings(model_dir, corpus, queries):
  """The exported model's rankings: `Predictor.embed` of every text (its
  serve_text tokenizes in the graph), exact inner-product search."""
  import bertexp
  predictor = bertexp.Predictor(model_dir)
  documents = predictor.embed([text for _, text in corpus])         # [N, D]
  asked = predictor.embed([text for _, text in queries])            # [Q, D]
  _, best = retrieval.top_k(asked, documents, DEPTH)                # [Q, K]
  return {qid: [corpus[j][0] for j in row]
          for (qid, _), row in zip(queries, best)}


def fused(first, second):
  """Reciprocal rank fusion of two {query id: ranking}s."""
  return {qid: retrieval.reciprocal_rank_fusion([first[qid], second[qid]],
                                                depth=DEPTH)
          for qid in first}


def _bertexp(*args):
  subprocess.run([sys.executable, "-m", "bertexp.cli", *args], check=True)


def prepare(folder):
  _bertexp("prepare", "pairs", "--task_name=squad_retrieval",
           f"--train_file={folder}/train.jsonl",
           f"--queries_file={folder}/queries.tsv",
           f"--corpus_file={folder}/corpus.tsv",
           f"--qrels_file={folder}/qrels.tsv",
           "--positive_id_column=doc_id", "--negative_columns=negative",
           "--vocab_file=.cache/minilm_l6/vocab.txt",
           f"--output_dir={DATA}", "--max_seq_length=192",
           "--max_query_length=32")


def fine_tune(seed, model_dir, eval_before):
  """(the run's training summary, its training seconds), the run exported;
  with eval_before the summary also holds the shipped model's metrics. A
  run that finished before (its training_summary.json) is kept: delete
  runs/retrieval to train again."""
  summary_file = os.path.join(model_dir, "training_summary.json")
  if not os.path.exists(summary_file):
    shutil.rmtree(model_dir, ignore_errors=True)
    _bertexp("train", f"--gin_file={GIN}",
             f"--gin_param=MODEL_DIR=\"{model_dir}\"",
             f"--gin_param=SEED={seed}", "--mode=train_and_eval",
             f"--gin_param=bertexp.experiment.eval_before_training={eval_before}")
  if not os.path.isdir(os.path.join(model_dir, "export")):
    export(model_dir)
  with open(summary_file) as f:
    summary = json.load(f)
  return summary, summary["wall_time_seconds"]


def export(model_dir, *bindings):
  """A SavedModel of `model_dir`'s last checkpoint (serve_text returns
  embeddings), or of what `bindings` name."""
  _bertexp("train", f"--gin_file={GIN}", f"--gin_param=MODEL_DIR=\"{model_dir}\"",
           "--mode=export", *[f"--gin_param={b}" for b in bindings])


def publish(run):
  """Copies the exported `run` to runs/retrieval/model, with its
  sentence-transformers folder in runs/retrieval/sentence_transformers."""
  model = os.path.join(OUT, "model")
  shutil.rmtree(model, ignore_errors=True)
  shutil.copytree(run, model)
  folder = os.path.join(OUT, "sentence_transformers")
  shutil.rmtree(folder, ignore_errors=True)
  _bertexp("convert-checkpoint", "--to=huggingface", f"--input={model}",
           f"--output={folder}")


def _mean_std(values):
  return float(np.mean(values)), float(np.std(values, ddof=1)) if len(
      values) > 1 else 0.0


def table(results):
  lines = ["| retriever | " + " | ".join(MEASURES) + " | run (training + evaluation) |",
           "|---|" + "---|" * (len(MEASURES) + 1)]
  for name, row in results["rows"].items():
    cells = []
    for measure in MEASURES:
      mean, std = row[measure]
      cells.append(f"{mean:.3f} ± {std:.3f}" if std else f"{mean:.3f}")
    lines.append(f"| {name} | " + " | ".join(cells) + f" | {row['training']} |")
  return "\n".join(lines) + "\n"


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--train_pairs", type=int, default=3200)
  parser.add_argument("--dev_questions", type=int, default=2000)
  args = parser.parse_args()
  seeds = [int(s) for s in args.seeds.split(",")]
  folder = os.path.join(DATA, "files")
  write_files(folder, args.train_pairs, args.dev_questions)
  prepare(folder)
  corpus, queries, qrels = evaluation_files(folder)
  scored = lambda rankings: retrieval.ranking_metrics(rankings, qrels, MEASURES)
  lexical = bm25_rankings(corpus, queries)
  runs, shipped = [], None
  for seed in seeds:
    summary, seconds = fine_tune(seed, os.path.join(OUT, f"seed_{seed}"),
                                 eval_before=shipped is None)
    shipped = shipped or summary["initial_eval_metrics"]
    dense = dense_rankings(os.path.join(OUT, f"seed_{seed}"), corpus, queries)
    runs.append((summary["eval_metrics"], scored(fused(dense, lexical)),
                 seconds))
  shipped_dir = os.path.join(OUT, "shipped")
  if not os.path.isdir(os.path.join(shipped_dir, "export")):
    export(shipped_dir, f'PREDICT_CHECKPOINT_PATH="{SHIPPED}"')
  shipped_fused = scored(fused(dense_rankings(shipped_dir, corpus, queries),
                               lexical))
  n = len(seeds)
  rows = {
      "BM25 (bm25s 0.3.16)": scored(lexical),
      "all-MiniLM-L6-v2 as shipped": shipped,
      f"fine-tuned ({n} seeds)": [r for r, _, _ in runs],
      "BM25 + all-MiniLM-L6-v2 as shipped, reciprocal rank fusion":
          shipped_fused,
      f"BM25 + fine-tuned, reciprocal rank fusion ({n} seeds)":
          [r for _, r, _ in runs]}
  rows = {name: {m: _mean_std([r[m] for r in value]) if isinstance(
      value, list) else (value[m], 0.0) for m in MEASURES}
          for name, value in rows.items()}
  for row in rows.values():
    row["training"] = "—"
  rows[f"fine-tuned ({n} seeds)"]["training"] = (
      f"{np.mean([s for _, _, s in runs]):.0f} s a seed, {args.train_pairs} "
      "pairs")
  results = {"rows": rows, "seeds": seeds, "train_pairs": args.train_pairs,
             "dev_questions": args.dev_questions,
             "cpu": machine.describe_cpu(),
             "per_seed": [r for r, _, _ in runs],
             "per_seed_fused": [r for _, r, _ in runs]}
  publish(os.path.join(OUT, f"seed_{seeds[0]}"))
  with open(os.path.join(OUT, "results.json"), "w") as f:
    json.dump(results, f, indent=2)
  with open(os.path.join(OUT, "results.md"), "w") as f:
    f.write(table(results))
  print(table(results))
  print(machine.cpu_line())


if __name__ == "__main__":
  main()
