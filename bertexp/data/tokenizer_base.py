"""What every bertexp tokenizer does the same way on top of its own
in-graph `tokenize_tf`: batches of Python strings to id arrays."""
import numpy as np
import tensorflow as tf


class BatchTokenizer:
  """Mixin: `tokenize` and `convert_ids_to_tokens` from a subclass's
  `tokenize_tf` (tf.string [B] -> ragged int64 [B, (pieces)]) and `vocab`."""

  def tokenize(self, texts, batch_size=8192):
    """list of str -> list of int32 numpy arrays, one per text."""
    result = []
    for start in range(0, len(texts), batch_size):
      ragged = self.tokenize_tf(tf.constant(texts[start:start + batch_size]))
      values = ragged.flat_values.numpy().astype(np.int32)
      splits = ragged.row_splits.numpy()
      result.extend(np.split(values, splits[1:-1]))
    return result

  def convert_ids_to_tokens(self, ids):
    return [self.vocab[i] for i in ids]
