"""Exact nearest-neighbour search over a corpus of embeddings, and the
ranking metrics of retrieval evaluation.

Search: `top_k` scores every query against every corpus row (inner
product: cosine for L2-normalised embeddings) in corpus chunks, keeping a
running top k, so memory grows with queries x (k + chunk), not with the
corpus: a 100,000-row corpus of 384-wide float32 vectors is 154 MB, and its
scores for 1,000 queries are never held whole.

Metrics: `ranking_metrics` computes, per query, from its ranked document
ids and its relevance judgements (qrels: {doc id: grade}, grade > 0 is
relevant), the measures as trec_eval (and ir-measures, which calls it)
computes them, averaged over the judged queries:
  mrr@k     1 / rank of the first relevant document in the top k, else 0
            (trec_eval's recip_rank cut at k, ir-measures' RR@k);
  recall@k  relevant documents in the top k / relevant documents;
  ndcg@k    sum over the top k of grade / log2(rank + 1), divided by the
            same sum over the judgements sorted by grade (linear gains:
            trec_eval's ndcg_cut).
A query whose judgements hold no relevant document is an error: no measure
above is defined for it.

Fusion: `reciprocal_rank_fusion` merges rankings of one query from several
retrievers (a dense model and BM25, say) by the sum of 1 / (k + rank) over
the rankings a document is in (Cormack, Clarke and Buettcher, SIGIR 2009;
k = 60 as there). It reads ranks only, so scores of different scales need
no calibration, and it has no weight to tune on the evaluation queries.

Shape legend: Q queries, N corpus rows, D embedding width, K kept results.
"""
import math
from typing import Dict, List, Mapping, Sequence

import numpy as np
import tensorflow as tf

MEASURES = ("mrr@10", "recall@1", "recall@10", "recall@100", "ndcg@10")


def top_k(queries, corpus, k, chunk_size=16384):
  """The k best corpus rows of each query by inner product, exactly.

  Args:
    queries: float [Q, D].
    corpus: float [N, D].
    k: results per query (at most N).
    chunk_size: corpus rows scored at once.
  Returns:
    (scores float32 [Q, K], indices int32 [Q, K]), best first; equal scores
    in corpus order.
  Raises:
    ValueError: k outside [1, N], or widths that differ.
  """
  queries = tf.convert_to_tensor(queries, tf.float32)
  corpus = tf.convert_to_tensor(corpus, tf.float32)
  rows = int(corpus.shape[0])
  if not 1 <= k <= rows:
    raise ValueError(f"top_k: k={k} must be between 1 and the corpus size "
                     f"{rows}")
  if queries.shape[-1] != corpus.shape[-1]:
    raise ValueError(f"top_k: queries are {queries.shape[-1]} wide, the "
                     f"corpus {corpus.shape[-1]}")
  best_scores = best_indices = None
  for start in range(0, rows, chunk_size):
    chunk = corpus[start:start + chunk_size]                         # [C, D]
    scores = tf.matmul(queries, chunk, transpose_b=True)             # [Q, C]
    indices = tf.range(start, start + tf.shape(chunk)[0])            # [C]
    indices = tf.broadcast_to(indices, tf.shape(scores))             # [Q, C]
    if best_scores is not None:    # earlier rows first: ties keep corpus order
      scores = tf.concat([best_scores, scores], axis=1)
      indices = tf.concat([best_indices, indices], axis=1)
    kept = min(k, int(scores.shape[1]))
    best_scores, position = tf.math.top_k(scores, kept)              # [Q, K]
    best_indices = tf.gather(indices, position, batch_dims=1)        # [Q, K]
  return best_scores.numpy(), best_indices.numpy().astype(np.int32)


def ranking_metrics(rankings: Mapping[str, Sequence[str]],
                    qrels: Mapping[str, Mapping[str, int]],
                    measures: Sequence[str] = MEASURES) -> Dict[str, float]:
  """Mean of each measure over the judged queries (see the module).

  Args:
    rankings: {query id: document ids, best first}.
    qrels: {query id: {document id: grade}}; every judged query must have
      a ranking.
    measures: names "mrr@k", "recall@k" or "ndcg@k".
  Returns:
    {measure: mean over the queries of qrels}.
  Raises:
    ValueError: a judged query without a ranking or without a relevant
      document, or an unknown measure.
  """
  per_query = {name: [] for name in measures}
  for query, judged in qrels.items():
    if query not in rankings:
      raise ValueError(f"query {query!r} is judged but has no ranking")
    relevant = {doc: grade for doc, grade in judged.items() if grade > 0}
    if not relevant:
      raise ValueError(f"query {query!r}: its judgements hold no relevant "
                       "document (grade > 0)")
    grades = [relevant.get(doc, 0) for doc in rankings[query]]
    for name in measures:
      per_query[name].append(_measure(name, grades, relevant))
  return {name: float(np.mean(values)) for name, values in per_query.items()}


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: int = 60,
                           depth: int = 100) -> List[str]:
  """One query's rankings from several retrievers merged into one.

  A document's fused score is the sum over the rankings that hold it of
  1 / (k + rank), ranks from 1; a ranking that lacks it adds nothing.

  Args:
    rankings: one list of document ids per retriever, best first (each
      without repeats; lengths may differ).
    k: the constant that damps the top ranks' weight (60 in the paper).
    depth: how many fused documents to return.
  Returns:
    Document ids, best fused score first; equal scores in the order the
    documents first appear reading the rankings rank by rank, the first
    ranking first at each rank.
  Raises:
    ValueError: no rankings, k < 0, depth < 1, or a ranking that repeats a
      document.
  """
  if not rankings or k < 0 or depth < 1:
    raise ValueError(f"reciprocal_rank_fusion: needs at least one ranking, "
                     f"k >= 0 and depth >= 1 (got {len(rankings)} rankings, "
                     f"k={k}, depth={depth})")
  terms, first_seen = {}, {}
  for which, ranking in enumerate(rankings):
    if len(set(ranking)) != len(ranking):
      raise ValueError(f"reciprocal_rank_fusion: ranking {which} repeats a "
                       "document")
    for rank, doc in enumerate(ranking, start=1):
      terms.setdefault(doc, []).append(1.0 / (k + rank))
      first_seen[doc] = min(first_seen.get(doc, (rank, which)), (rank, which))
  # fsum rounds once: documents at the same ranks tie exactly, whatever
  # the order of the rankings.
  scores = {doc: math.fsum(values) for doc, values in terms.items()}
  fused = sorted(scores, key=lambda doc: (-scores[doc], first_seen[doc]))
  return fused[:depth]


def _measure(name, grades: List[int], relevant: Mapping[str, int]):
  """One query's measure from the grades of its ranking, best first."""
  kind, _, cut = name.partition("@")
  if not cut.isdigit() or int(cut) < 1:
    raise ValueError(f"measure {name!r}: expected mrr@k, recall@k or ndcg@k")
  top = grades[:int(cut)]
  if kind == "mrr":
    return next((1.0 / (rank + 1) for rank, g in enumerate(top) if g > 0), 0.0)
  if kind == "recall":
    return sum(g > 0 for g in top) / len(relevant)
  if kind == "ndcg":
    ideal = sorted(relevant.values(), reverse=True)[:int(cut)]
    return _dcg(top) / _dcg(ideal)
  raise ValueError(f"measure {name!r}: expected mrr@k, recall@k or ndcg@k")


def _dcg(grades):
  """Sum of grade / log2(rank + 1), ranks from 1."""
  return float(sum(g / np.log2(rank + 2) for rank, g in enumerate(grades)))
