"""Exact top-k search and the ranking metrics of retrieval evaluation
(bertexp/tasks/embedding/retrieval.py): hand-checked cases, and equality
with ir-measures (trec_eval through pytrec_eval) on random runs."""
import math

import ir_measures
import numpy as np
import pytest

from bertexp.tasks.embedding import retrieval


def test_hand_checked_queries():
  """q1: its one relevant document second; q2: graded 2 and 1, found
  first and third; q3: its relevant document 12th (outside 10, inside
  100)."""
  rankings = {"q1": ["d3", "d1", "d2"], "q2": ["d6", "d7", "d5"],
              "q3": [f"x{i}" for i in range(11)] + ["d9"]}
  qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d5": 2, "d6": 1},
           "q3": {"d9": 1}}
  got = retrieval.ranking_metrics(rankings, qrels)
  ndcg_q1 = (1 / math.log2(3)) / 1
  ndcg_q2 = (1 / 1 + 2 / math.log2(4)) / (2 / 1 + 1 / math.log2(3))
  want = {"mrr@10": (1 / 2 + 1 + 0) / 3, "recall@1": (0 + 1 / 2 + 0) / 3,
          "recall@10": (1 + 1 + 0) / 3, "recall@100": (1 + 1 + 1) / 3,
          "ndcg@10": (ndcg_q1 + ndcg_q2 + 0) / 3}
  assert got == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equal_to_ir_measures_on_random_runs(seed):
  """30 queries over 300 documents, graded judgements 0-3 (each query at
  least one relevant), distinct scores: every measure equals ir-measures'
  (pytrec_eval's trec_eval) to 1e-9."""
  rng = np.random.default_rng(seed)
  documents = [f"d{i}" for i in range(300)]
  qrels, run, rankings = {}, {}, {}
  for q in range(30):
    query = f"q{q}"
    judged = rng.choice(300, size=int(rng.integers(1, 8)), replace=False)
    grades = rng.integers(0, 4, size=len(judged))
    grades[0] = max(grades[0], 1)
    qrels[query] = {documents[d]: int(g) for d, g in zip(judged, grades)}
    # Judged documents: half lifted among the first ranks, half left where
    # a random run puts them.
    scores = rng.permutation(300).astype(float)
    lifted = judged[rng.random(len(judged)) < 0.5]
    scores[lifted] = 300 + rng.permutation(len(lifted))
    scores = scores + rng.random(300) * 1e-3        # no ties
    run[query] = {documents[d]: float(s) for d, s in enumerate(scores)}
    rankings[query] = [documents[d] for d in np.argsort(-scores)]
  ours = retrieval.ranking_metrics(rankings, qrels)
  names = {"mrr@10": ir_measures.RR @ 10, "recall@1": ir_measures.R @ 1,
           "recall@10": ir_measures.R @ 10, "recall@100": ir_measures.R @ 100,
           "ndcg@10": ir_measures.nDCG @ 10}
  theirs = ir_measures.calc_aggregate(list(names.values()), qrels, run)
  for name, measure in names.items():
    assert ours[name] == pytest.approx(theirs[measure], abs=1e-9), name
  assert 0.05 < ours["mrr@10"] < 0.95            # the cases are not trivial


def test_top_k_is_exact_across_chunks_and_keeps_ties_in_corpus_order():
  rng = np.random.default_rng(4)
  queries = rng.normal(size=(7, 16)).astype(np.float32)
  corpus = rng.normal(size=(1000, 16)).astype(np.float32)
  scores, indices = retrieval.top_k(queries, corpus, 10, chunk_size=96)
  full = queries @ corpus.T                                         # [7, 1000]
  np.testing.assert_array_equal(indices, np.argsort(-full, axis=1)[:, :10])
  np.testing.assert_allclose(scores, np.sort(full, axis=1)[:, ::-1][:, :10],
                             rtol=1e-5)
  # Row 5 repeated at 700: equal scores, the earlier row first.
  corpus[700] = corpus[5]
  _, indices = retrieval.top_k(corpus[5:6] * 10, corpus, 2, chunk_size=96)
  assert indices.tolist() == [[5, 700]]


def test_bad_input_is_a_clear_error():
  with pytest.raises(ValueError, match="k=11 must be between 1 and the "
                                       "corpus size 10"):
    retrieval.top_k(np.ones([1, 4]), np.ones([10, 4]), 11)
  with pytest.raises(ValueError, match="queries are 3 wide, the corpus 4"):
    retrieval.top_k(np.ones([1, 3]), np.ones([10, 4]), 1)
  with pytest.raises(ValueError, match="'q' is judged but has no ranking"):
    retrieval.ranking_metrics({}, {"q": {"d": 1}})
  with pytest.raises(ValueError, match="'q': its judgements hold no relevant"):
    retrieval.ranking_metrics({"q": ["d"]}, {"q": {"d": 0}})
  with pytest.raises(ValueError, match="measure 'map': expected"):
    retrieval.ranking_metrics({"q": ["d"]}, {"q": {"d": 1}}, ["map"])


def test_reciprocal_rank_fusion_by_hand():
  """Dense [a, b, c], BM25 [c, d, a] at k = 60: a 1/61 + 1/63, c 1/63 +
  1/61 (a tie: a reached rank 1 first), d 1/62, b 1/62 (a tie: b is the
  first ranking's at rank 2); a document one retriever missed still
  counts its other rank."""
  dense, bm25 = ["a", "b", "c"], ["c", "d", "a"]
  assert retrieval.reciprocal_rank_fusion([dense, bm25]) == ["a", "c", "b",
                                                             "d"]
  # k = 0: ranks weigh 1, 1/2, 1/3: a 1 + 1/3, c 1/3 + 1, b 1/2, d 1/2.
  assert retrieval.reciprocal_rank_fusion([dense, bm25], k=0, depth=2) == [
      "a", "c"]
  # A document first in both beats one first in one and absent elsewhere.
  assert retrieval.reciprocal_rank_fusion([["x", "y"], ["x"], ["y"]]) == [
      "x", "y"]
  assert retrieval.reciprocal_rank_fusion([["z", "x"], ["x", "z"],
                                           ["x"]]) == ["x", "z"]
  # Ties go to the better rank first reached, not to the first ranking: u
  # (ranks 3 and 2) and v (2 and 3) tie, v reached rank 2 in an earlier
  # ranking; x, y, t are each one ranking's first.
  assert retrieval.reciprocal_rank_fusion(
      [["x", "w", "u"], ["y", "v", "z"], ["t", "u", "v"]]) == [
          "v", "u", "x", "y", "t", "w", "z"]
  # One ranking comes back as it was.
  assert retrieval.reciprocal_rank_fusion([bm25]) == bm25


def test_reciprocal_rank_fusion_lifts_what_both_rank_high():
  """Two noisy retrievers of one relevant document per query: the fused
  ranking finds it higher (mrr@10) than either alone."""
  rng = np.random.default_rng(7)
  documents = [f"d{i}" for i in range(200)]
  qrels, runs = {}, ({}, {}, {})
  for q in range(100):
    relevant = int(rng.integers(200))
    qrels[f"q{q}"] = {documents[relevant]: 1}
    lists = []
    for run in runs[:2]:
      scores = rng.normal(size=200)
      scores[relevant] += 2.0
      run[f"q{q}"] = [documents[d] for d in np.argsort(-scores)]
      lists.append(run[f"q{q}"])
    runs[2][f"q{q}"] = retrieval.reciprocal_rank_fusion(lists)
  first, second, fused = (retrieval.ranking_metrics(r, qrels)["mrr@10"]
                          for r in runs)
  assert fused > max(first, second) + 0.05, (first, second, fused)


def test_reciprocal_rank_fusion_refuses_what_it_cannot_fuse():
  with pytest.raises(ValueError, match="needs at least one ranking"):
    retrieval.reciprocal_rank_fusion([])
  with pytest.raises(ValueError, match="k=-1"):
    retrieval.reciprocal_rank_fusion([["a"]], k=-1)
  with pytest.raises(ValueError, match="ranking 1 repeats a document"):
    retrieval.reciprocal_rank_fusion([["a"], ["b", "b"]])
