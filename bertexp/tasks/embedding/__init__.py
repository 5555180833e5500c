"""Sentence embeddings and retrieval. `retrieval`: exact top-k search over
a corpus of embeddings and the ranking metrics retrieval is judged by.
Importing this package imports nothing else."""
