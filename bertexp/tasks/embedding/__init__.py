"""Sentence embeddings and retrieval. `pooling`: a sentence vector from
token vectors (mean / CLS / max, L2-normalised or not); `losses`: the
in-batch negatives loss over the global batch; `retrieval`: exact top-k
search over a corpus of embeddings and the ranking metrics retrieval is
judged by. Importing this package imports nothing else."""
