"""Raw (question, context) -> answer text, inside a SavedModel graph: the
`serve_text` signature of question-answering exports.

The same reading as `bertexp prepare squad` and --mode=predict for a context
that fits one window: whitespace words, the tokenizer's pieces per word
(WordPiece or SentencePiece), [CLS] question [SEP] context [SEP] (or the
family's pair layout); the best span among the n_best start x n_best end
positions (both in the context, start <= end, at most max_answer_length
pieces); its text cut from the original words by the pieces' offsets, as
google-research/bert's get_final_text recovers it. A longer context is cut
to its first window (`context_truncated` says so).

Shape legend: B batch, Q question pieces, W words, T context pieces,
S max_seq_length, K n_best_size.
"""
import tensorflow as tf
import tensorflow_text as tf_text

from bertexp.data import tokenization
from bertexp.model.encoders import tokenizers
from bertexp.util import serving_weights

# run_squad's whitespace: what bertexp.tasks.squad.data.split_context splits on.
_WHITESPACE = r"[ \t\r\n\x{202f}]+"


def _best_spans(start_logits, end_logits, first, last, n_best_size,
                max_answer_length):
  """Best (start, end) among the top-K starts x top-K ends inside [first,
  last]; ties go to the earlier pair, as the n-best sort does."""
  k = tf.minimum(n_best_size, tf.shape(start_logits)[1])
  start_value, start = tf.math.top_k(start_logits, k)                # [B, K]
  end_value, end = tf.math.top_k(end_logits, k)                      # [B, K]
  inside = lambda p: (p >= first[:, None]) & (p <= last[:, None])
  length = end[:, None, :] - start[:, :, None] + 1                    # [B, K, K]
  ok = (inside(start)[:, :, None] & inside(end)[:, None, :] & (length >= 1)
        & (length <= max_answer_length))
  score = start_value[:, :, None] + end_value[:, None, :]
  score = tf.reshape(tf.where(ok, score, -float("inf")), [-1, k * k])
  best = tf.argmax(score, axis=1, output_type=tf.int32)              # [B]
  best_start = tf.gather(start, best // k, batch_dims=1)
  best_end = tf.gather(end, best % k, batch_dims=1)
  found = tf.reduce_any(tf.reshape(ok, [-1, k * k]), axis=1)
  return best_start, best_end, tf.reduce_max(score, axis=1), found


def _char_offset(normalized_word, byte_offset):
  length = tf.cast(byte_offset, tf.int32)
  prefix = tf.strings.substr(normalized_word, tf.zeros_like(length), length)
  return tf.strings.length(prefix, unit="UTF8_CHAR")


def _word_pieces(tokenizer, context, words, starts, ends, normalized):
  """Each context word's pieces and their byte offsets in the normalized
  word, ragged [Nw, (P)]: the word alone, or (byte-level BPE) read with
  the whitespace before it, offsets shifted past that whitespace."""
  if tokenizer.tokenizes_words_alone:
    return tokenizer.tokenize_with_offsets_tf(normalized)
  previous_end = tf.concat([tf.zeros_like(ends[:, :1]), ends[:, :-1]], 1)
  lead = (starts - previous_end).flat_values                         # [Nw]
  spaces = tf.strings.substr(tf.gather(context, words.value_rowids()),
                             previous_end.flat_values, lead)
  pieces, piece_start, piece_end = tokenizer.tokenize_with_offsets_tf(
      tf.strings.join([spaces, normalized]))
  shift = lambda offsets: tf.maximum(offsets - lead[:, None], 0)
  return pieces, shift(piece_start), shift(piece_end)


def _span_text(flat_words, normalized, piece_start, piece_end, words,
               pieces):
  """[B] the context's text from the first to the last piece of each span.

  Args:
    flat_words, normalized: the contexts' words [Nw], as written and as the
      tokenizer normalised them.
    piece_start, piece_end: each word's pieces' byte offsets [Nw, (P)].
    words: (first word, last word) [B] of each span.
    pieces: (first piece, last piece) [B], flat piece indices.
  """
  word_start, word_end = words
  flat_start, flat_end = pieces
  word_chars = tf.strings.length(flat_words, unit="UTF8_CHAR")       # [Nw]
  same_length = tf.equal(word_chars, tf.strings.length(normalized, unit="UTF8_CHAR"))
  # Where normalisation changed a word's length, keep the whole word (as
  # get_final_text falls back to the original text).
  char_start = tf.where(tf.gather(same_length, word_start), _char_offset(
      tf.gather(normalized, word_start),
      tf.gather(piece_start.values, flat_start)), 0)
  char_end = tf.where(tf.gather(same_length, word_end), _char_offset(
      tf.gather(normalized, word_end),
      tf.gather(piece_end.values, flat_end)), tf.gather(word_chars, word_end))
  joined = tf.strings.reduce_join(
      tf.gather(flat_words, tf.ragged.range(word_start, word_end + 1)),
      axis=1, separator=" ")
  position = tf.concat([[0], tf.cumsum(word_chars + 1)], 0)          # word -> char
  last_word_at = tf.gather(position, word_end) - tf.gather(position, word_start)
  text = tf.strings.substr(joined, char_start,
                           last_word_at + char_end - char_start, unit="UTF8_CHAR")
  return text


def answer(tokenizer, model, spec, question, context):
  """question, context: tf.string [B] -> answer [B] string, score [B] (start
  + end logit), context_truncated [B]; v2.0 adds null_score_diff [B] and
  answers "" when it exceeds the threshold."""
  max_seq = spec["max_seq_length"]
  question_ids = tokenizer.tokenize_tf(question)[:, :spec["max_query_length"]]
  words, word_starts, word_ends = tf_text.regex_split_with_offsets(
      context, _WHITESPACE)                                          # [B, (W)]
  flat_words = words.flat_values                                     # [Nw]
  normalized = tokenizer.normalize(flat_words)
  pieces, piece_start, piece_end = _word_pieces(
      tokenizer, context, words, word_starts, word_ends, normalized)  # [Nw, (P)]
  context_ids = tf.RaggedTensor.from_row_splits(
      pieces.values, tf.gather(pieces.row_splits, words.row_splits))  # [B, (T)]
  piece_word = tf.repeat(tf.range(tf.shape(flat_words, out_type=tf.int64)[0]),
                         pieces.row_lengths())                       # [Tflat]
  room = (max_seq - tokenization.special_count(tokenizer, True) -
          question_ids.row_lengths())                                # [B]
  kept = tf.minimum(context_ids.row_lengths(), room)
  truncated = context_ids.row_lengths() > room
  inputs = tokenization.pack_ids_tf(
      tokenizer, question_ids, tf.ragged.boolean_mask(context_ids, tf.ragged.range(
          context_ids.row_lengths()) < kept[:, None]), max_seq)
  logits = tf.cast(model(inputs, training=False), tf.float32)        # [B, S, 2]
  start_logits, end_logits = logits[:, :, 0], logits[:, :, 1]
  first = tf.cast(question_ids.row_lengths() + 1 + tokenizer.pair_separators,
                  tf.int32)                                          # [B]
  last = first + tf.cast(kept, tf.int32) - 1
  start, end, score, found = _best_spans(
      start_logits, end_logits, first, last, spec["n_best_size"],
      spec["max_answer_length"])
  # Sequence positions -> flat context pieces -> words and char offsets.
  flat_start = context_ids.row_starts() + tf.cast(
      tf.maximum(start - first, 0), tf.int64)
  flat_end = context_ids.row_starts() + tf.cast(tf.maximum(end - first, 0), tf.int64)
  found &= kept > 0
  flat_start = tf.where(found, flat_start, 0)
  flat_end = tf.where(found, flat_end, 0)
  word_start = tf.gather(piece_word, flat_start)
  word_end = tf.gather(piece_word, flat_end)
  text = _span_text(flat_words, normalized, piece_start, piece_end,
                    (word_start, word_end), (flat_start, flat_end))
  text = tf.where(found, text, "")
  outputs = {"answer": text, "score": tf.where(found, score, -float("inf")),
             "context_truncated": truncated}
  if spec["version_2_with_negative"]:
    diff = start_logits[:, 0] + end_logits[:, 0] - score
    outputs["null_score_diff"] = diff
    outputs["answer"] = tf.where(diff > spec["null_score_diff_threshold"], "",
                                 text)
  return outputs


class SpanServing(tf.Module):
  """The `serve_text` signature of a question-answering export.

  Tracks the model and the tokenizer, so an export that holds this module
  saves the vocabulary table (WordPiece) or model (SentencePiece) with the
  weights.
  """

  def __init__(self, model, spec):
    """Args:
      model: the span model (token ids -> [B, S, 2] logits).
      spec: vocab_file, do_lower_case, max_seq_length, max_query_length,
        n_best_size, max_answer_length, version_2_with_negative,
        null_score_diff_threshold (and a SentencePiece tokenizer's
        tokenizer_family and keep_accents, see tokenization.load).
    """
    super().__init__()
    serving_weights.attach_model(self, model)
    self.spec = dict(spec)
    self._tokenizer = tokenizers.load(
        spec["vocab_file"], spec["do_lower_case"],
        spec.get("tokenizer_family"), spec.get("keep_accents", False))
    self.tokenizer = self._tokenizer.module           # tracked: saved with us

  def signature(self):
    """(question [B] string, context [B] string) -> answer, score,
    context_truncated (and null_score_diff for v2.0)."""
    text = tf.TensorSpec([None], tf.string)
    return tf.function(
        lambda question, context: answer(self._tokenizer, self.model,
                                         self.spec, question, context),
        input_signature=[text, text], autograph=False).get_concrete_function()
