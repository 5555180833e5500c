"""The in-batch negatives loss of a dual encoder over the global batch.

Each query is scored against every positive document of the *global*
batch: the positives (and hard negatives) of all replicas are gathered
(`ReplicaContext.all_gather`, whose gradient sums every replica's
contribution and hands each replica its own rows' share), so 2 replicas of
16 train what one replica of 32 trains: the same negatives, the same loss,
the same gradients. A document that is the query's own positive elsewhere
in the batch (the same document id) is no negative: it is left out of that
query's softmax.

Shape legend: b examples on this replica, G = b x replicas in the global
batch, D embedding width, M hard negatives per example.
"""
import tensorflow as tf


def in_batch_negatives_loss(queries, positives, document_ids, *, scale=20.0,
                            symmetric=False, hard_negatives=None):
  """Per-example loss [b] of this replica's examples.

  Args:
    queries: float [b, D] query embeddings.
    positives: float [b, D] their positive documents' embeddings.
    document_ids: int64 [b] the positives' ids (equal ids: the same
      document).
    scale: multiplies the inner products before the softmax
      (sentence-transformers' MultipleNegativesRankingLoss: 20 on cosine).
    symmetric: also each positive against every query of the global batch
      (mean of both directions).
    hard_negatives: float [b, M, D] or None: more documents each query is
      scored against, gathered from every replica like the positives.
  Returns:
    float32 [b]: cross-entropy of each query's positive among the global
    batch's documents; the caller sums over the global batch and divides by
    its size, as every bertexp loss.
  """
  queries = tf.cast(queries, tf.float32)
  positives = tf.cast(positives, tf.float32)
  if hard_negatives is not None:
    hard_negatives = tf.cast(hard_negatives, tf.float32)
  context = tf.distribute.get_replica_context()
  rows = tf.shape(queries)[0]
  first = context.replica_id_in_sync_group * rows                    # scalar
  targets = first + tf.range(rows)                                   # [b]
  all_positives = context.all_gather(positives, axis=0)              # [G, D]
  all_ids = context.all_gather(document_ids, axis=0)                 # [G]
  documents = all_positives
  if hard_negatives is not None:
    width = tf.shape(hard_negatives)[-1]
    flat = tf.reshape(hard_negatives, [-1, width])                   # [b*M, D]
    documents = tf.concat([all_positives,
                           context.all_gather(flat, axis=0)], axis=0)  # [G+G*M, D]
  scores = scale * tf.matmul(queries, documents, transpose_b=True)   # [b, G(+GM)]
  # The query's own positive seen again in the batch: not a negative.
  duplicate = tf.logical_and(
      tf.equal(document_ids[:, None], all_ids[None, :]),
      tf.not_equal(targets[:, None], tf.range(tf.shape(all_ids)[0])[None, :]))
  padding = tf.zeros([rows, tf.shape(documents)[0] - tf.shape(all_ids)[0]],
                     tf.bool)
  scores = _masked(scores, tf.concat([duplicate, padding], axis=1))
  loss = tf.nn.sparse_softmax_cross_entropy_with_logits(targets, scores)
  if not symmetric:
    return loss
  all_queries = context.all_gather(queries, axis=0)                  # [G, D]
  reverse = scale * tf.matmul(positives, all_queries, transpose_b=True)  # [b, G]
  # Another query whose positive is this document: not a negative either.
  reverse = _masked(reverse, duplicate)
  back = tf.nn.sparse_softmax_cross_entropy_with_logits(targets, reverse)
  return (loss + back) / 2


def _masked(scores, leave_out):
  """scores with the `leave_out` entries at the dtype's lowest value."""
  return tf.where(leave_out, tf.cast(scores.dtype.min, scores.dtype), scores)


def cosent_loss(text_a, text_b, scores, *, scale=20.0):
  """CoSENT (Su, 2022; sentence-transformers' CoSENTLoss) over the global
  batch, carried by each of this replica's examples.

  For every ordered pair (i, j) of the global batch whose gold scores say
  i > j, the cosine of pair j above pair i's is penalised:
  log(1 + sum over such (i, j) of exp(scale * (cos_j - cos_i))). Only the
  order of the scores matters. The loss is one number for the whole global
  batch (the cosines and scores of every replica are gathered); each
  example carries it, so the trainer's mean over the global batch returns
  it, and the gathered cosines' gradient hands each replica its own rows'
  share: 2 replicas train what one replica of the global batch trains.

  Args:
    text_a, text_b: float [b, D] the two texts' embeddings.
    scores: float [b] the pairs' gold scores.
    scale: multiplies the cosine differences (20: the paper's).
  Returns:
    float32 [b], every entry the global batch's loss.
  """
  a = tf.math.l2_normalize(tf.cast(text_a, tf.float32), axis=-1)
  b = tf.math.l2_normalize(tf.cast(text_b, tf.float32), axis=-1)
  cosines = tf.reduce_sum(a * b, axis=-1)                            # [b]
  context = tf.distribute.get_replica_context()
  all_cosines = context.all_gather(cosines, axis=0)                  # [G]
  all_scores = context.all_gather(tf.cast(scores, tf.float32), axis=0)
  # [i, j]: scale * (cos_j - cos_i), kept where pair i should rank above j.
  differences = scale * (all_cosines[None, :] - all_cosines[:, None])  # [G, G]
  ordered = all_scores[:, None] > all_scores[None, :]
  # Static shapes (XLA): the other pairs at the lowest float, exp() = 0.
  terms = tf.reshape(_masked(differences, tf.logical_not(ordered)), [-1])
  loss = tf.reduce_logsumexp(tf.concat([[0.0], terms], axis=0))      # scalar
  return tf.fill(tf.shape(cosines), loss)                            # [b]
