"""The `serve_text` signature of tagging exports: raw text -> tagged words and
entities with character offsets, all inside the graph (a TF Serving client
gets entities without any Python of ours).

Words are split as BERT's basic tokenizer splits them (whitespace, each
punctuation mark, each CJK character), on the original text so their
offsets point into it; each word is normalised and cut into pieces
(WordPiece, or the family's SentencePiece) as `bertexp prepare` did, and its tag is the model's at its first piece. A
text longer than one window is cut into the windows `bertexp prepare
tagging` cuts (doc_stride apart), and each word takes its tag from the
window where it has the most context, as evaluation does.
Entities follow conlleval's rules (seqeval's default mode): a B-/S- tag, a
type change, or an I-/E- after O, E- or S- starts one.

Outputs (padded; B texts, W words, E entities):
  words [B, W] string, tags [B, W] string, scores [B, W] float32 (the tag's
  probability), word_starts / word_ends [B, W] int32 character offsets
  (-1 on padding), entity_texts / entity_types [B, E] string, entity_starts /
  entity_ends [B, E] int32 (character offsets, end exclusive),
  entity_scores [B, E] float32 (mean word score), num_entities [B] int32.
"""
import tensorflow as tf
import tensorflow_text as tf_text

from bertexp.data import tokenization
from bertexp.model.encoders import tokenizers
from bertexp.util import serving_weights

_TEXT = tf.TensorSpec([None], tf.string)
# BERT's basic tokenizer: split at whitespace; keep every punctuation mark
# (ASCII symbols included) and CJK ideograph as a word of its own.
_KEEP = (r"[!-/:-@\[-`{-~\p{P}\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}"
         r"\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}"
         r"\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")
_SPLIT = r"[\s\p{Zs}]|" + _KEEP


def char_offsets(texts, byte_offsets):
  """Byte offsets [B, (W)] into UTF-8 texts [B] -> character offsets."""
  _, char_starts = tf.strings.unicode_decode_with_offsets(
      texts, "UTF-8", errors="replace")                             # [B, (C)]
  big = tf.constant(2 ** 62, tf.int64)
  dense_chars = char_starts.to_tensor(big)                           # [B, C]
  dense_bytes = byte_offsets.to_tensor(big)                          # [B, W]
  found = tf.searchsorted(dense_chars, dense_bytes, side="left")     # [B, W]
  return tf.RaggedTensor.from_tensor(tf.cast(found, tf.int32),
                                     lengths=byte_offsets.row_lengths())


class TaggingServing(tf.Module):
  """text [B] -> tagged words and entities (see the module docstring)."""

  def __init__(self, model, *, vocab_file, do_lower_case, max_seq_length,
               doc_stride, label_names, scheme, tokenizer_family=None,
               keep_accents=False):
    """Args:
      model: token ids -> logits [B, S, L].
      vocab_file, do_lower_case, max_seq_length, doc_stride: as `bertexp
        prepare tagging` used (long texts are cut into the same windows).
      label_names: tag names in label-id order.
      scheme: BIO, BIOES or NONE (no entities).
      tokenizer_family, keep_accents: a SentencePiece tokenizer's, as the
        meta data records them (see tokenization.load).
    """
    super().__init__()
    serving_weights.attach_model(self, model)
    self._tokenizer = tokenizers.load(vocab_file, do_lower_case,
                                        tokenizer_family, keep_accents)
    self.tokenizer = self._tokenizer.module           # tracked: saved with us
    self._max_seq_length = max_seq_length
    self._doc_stride = doc_stride
    self._label_names = tf.constant(label_names)
    self._entities = scheme != "NONE"
    split = [n.partition("-") if n != "O" else ("O", "", "")
             for n in label_names]
    self._prefixes = tf.constant([p for p, _, _ in split])
    self._types = tf.constant([t for _, _, t in split])

  def _word_pieces(self, texts):
    """Words [B, (W)] with byte offsets, and their pieces [B, (W), (P)]."""
    words, starts, ends = tf_text.regex_split_with_offsets(
        texts, _SPLIT, _KEEP)                                        # [B, (W)]
    pieces = self._tokenizer.tokenize_tf(tf.strings.join(
        [self._tokenizer.word_prefix, words.flat_values]))          # [N, (P)]
    # A word of no piece (control characters only) reads as [UNK].
    unknown = tf.fill([pieces.nrows(), 1], tf.constant(
        self._tokenizer.unk_id, tf.int64))
    with_unknown = tf.concat([pieces, unknown], axis=1)
    keep = tf.maximum(pieces.row_lengths(), 1)
    pieces = tf.ragged.boolean_mask(
        with_unknown, tf.ragged.range(keep + 1) < keep[:, None])
    return words, starts, ends, words.with_flat_values(pieces)

  def _windows(self, flat):
    """Pieces [B, (P)] -> windows of max_seq_length - 2 pieces, doc_stride
    apart, as `bertexp prepare tagging` cuts them: their start and end
    piece [B, (K)] and their model inputs [sum K, S]."""
    width, stride = self._max_seq_length - 2, self._doc_stride
    length = flat.row_lengths()                                      # [B]
    count = 1 + (tf.maximum(length - width, 0) + stride - 1) // stride
    starts = tf.ragged.range(count) * stride                         # [B, (K)]
    ends = tf.minimum(starts + width, length[:, None])
    rows = starts.value_rowids()                                     # [sum K]
    offsets = tf.gather(flat.row_starts(), rows)[:, None]
    positions = tf.ragged.range(starts.flat_values, ends.flat_values)
    window_ids = tf.gather(flat.flat_values, positions + offsets)    # [sum K, (n)]
    inputs = tokenization.pack_ids_tf(self._tokenizer, window_ids, None,
                                      self._max_seq_length)         # [sum K, S]
    return starts, ends, inputs

  def _owner(self, first, starts, ends):
    """For each word's first piece [B, (W)], the window [B, (W)] where it has
    the most context (min distance to the window's ends; ties: the earlier
    window) and its position in that window's inputs."""
    never = tf.constant(2 ** 40, tf.int64)
    p = first.to_tensor(-1)[:, :, None]                              # [B, W, 1]
    s = starts.to_tensor(never)[:, None, :]                          # [B, 1, K]
    e = ends.to_tensor(never)[:, None, :]
    context = tf.where((s <= p) & (p < e), tf.minimum(p - s, e - 1 - p), -1)
    best = tf.argmax(context, axis=2, output_type=tf.int64)          # [B, W]
    window = best + starts.row_starts()[:, None]                     # global
    position = p[:, :, 0] - tf.gather(starts.to_tensor(0), best,
                                      batch_dims=1) + 1
    lengths = first.row_lengths()
    return (tf.RaggedTensor.from_tensor(window, lengths=lengths),
            tf.RaggedTensor.from_tensor(position, lengths=lengths))

  def _serve(self, texts):
    words, byte_starts, byte_ends, pieces = self._word_pieces(texts)
    flat = pieces.merge_dims(1, 2)                                   # [B, (P)]
    starts, ends, inputs = self._windows(flat)
    logits = self.model(inputs, training=False)                  # [sum K, S, L]
    first = tf.math.cumsum(pieces.row_lengths(axis=2), axis=1,
                           exclusive=True)                           # [B, (W)]
    window, position = self._owner(first, starts, ends)
    where = tf.stack([window.flat_values, position.flat_values], -1)  # [N, 2]
    ids = window.with_flat_values(tf.gather_nd(
        tf.argmax(logits, -1, output_type=tf.int32), where))          # [B, (W)]
    scores = window.with_flat_values(tf.gather_nd(
        tf.reduce_max(tf.nn.softmax(logits, -1), -1), where))
    char_starts = char_offsets(texts, byte_starts)
    char_ends = char_offsets(texts, byte_ends)
    result = {"words": words.to_tensor(""),
              "tags": tf.gather(self._label_names, ids).to_tensor(""),
              "scores": scores.to_tensor(0.0),
              "word_starts": char_starts.to_tensor(-1),
              "word_ends": char_ends.to_tensor(-1)}
    result.update(self._entity_outputs(texts, ids, scores, char_starts,
                                       char_ends, byte_starts, byte_ends))
    return result

  def _entity_outputs(self, texts, ids, scores, starts, ends, byte_starts,
                      byte_ends):
    """Groups tagged words [B, (W)] into entities (conlleval's rules)."""
    prefix = tf.gather(self._prefixes, ids)
    entity_type = tf.gather(self._types, ids)
    inside = prefix != "O"
    if not self._entities:
      inside = inside & False
    previous = lambda t, fill: tf.concat(
        [tf.RaggedTensor.from_tensor(tf.fill([t.nrows(), 1], fill)), t],
        axis=1)[:, :-1]
    before, type_before = previous(prefix, "O"), previous(entity_type, "")
    begins = inside & (
        (prefix == "B") | (prefix == "S") | (before == "O") |
        (before == "E") | (before == "S") | (type_before != entity_type))
    flat_begins = tf.cast(begins.flat_values, tf.int32)
    index = tf.math.cumsum(flat_begins) - 1                          # [N]
    member = inside.flat_values
    segment = tf.boolean_mask(index, member)
    count = tf.reduce_sum(flat_begins)
    take = lambda t: tf.boolean_mask(t.flat_values, member)
    first_of = lambda t: tf.math.unsorted_segment_min(take(t), segment, count)
    last_of = lambda t: tf.math.unsorted_segment_max(take(t), segment, count)
    rows = tf.boolean_mask(begins.value_rowids(), begins.flat_values)  # [E]
    byte_start = first_of(byte_starts)
    entity = lambda values: tf.RaggedTensor.from_value_rowids(
        values, rows, nrows=tf.shape(texts, out_type=tf.int64)[0])
    texts_of = tf.strings.substr(tf.gather(texts, rows), byte_start,
                                 last_of(byte_ends) - byte_start)
    return {
        "entity_texts": entity(texts_of).to_tensor(""),
        "entity_types": entity(tf.boolean_mask(
            entity_type.flat_values, begins.flat_values)).to_tensor(""),
        "entity_starts": entity(first_of(starts)).to_tensor(-1),
        "entity_ends": entity(last_of(ends)).to_tensor(-1),
        "entity_scores": entity(tf.math.unsorted_segment_mean(
            take(scores), segment, count)).to_tensor(0.0),
        "num_entities": tf.cast(entity(rows).row_lengths(), tf.int32)}

  def signature(self):
    """The concrete function of `serve_text`."""
    return tf.function(lambda text: self._serve(text),
                       input_signature=[_TEXT],
                       autograph=False).get_concrete_function()


def predictor_row(outputs, i):
  """Row i of a tagger's `serve_text` outputs ({name: [N, ...] numpy}) as
  `bertexp.Predictor.predict` returns it: {"entities": [{"text", "type",
  "start", "end", "score"}], "words": [{"text", "tag", "start", "end",
  "score"}]}, character offsets into the row's text."""
  entities = [{"text": outputs["entity_texts"][i][k].decode(),
               "type": outputs["entity_types"][i][k].decode(),
               "start": int(outputs["entity_starts"][i][k]),
               "end": int(outputs["entity_ends"][i][k]),
               "score": float(outputs["entity_scores"][i][k])}
              for k in range(int(outputs["num_entities"][i]))]
  words = [{"text": word.decode(), "tag": tag.decode(), "start": int(start),
            "end": int(end), "score": float(score)}
           for word, tag, start, end, score in zip(
               outputs["words"][i], outputs["tags"][i],
               outputs["word_starts"][i], outputs["word_ends"][i],
               outputs["scores"][i]) if start >= 0]
  return {"entities": entities, "words": words}
