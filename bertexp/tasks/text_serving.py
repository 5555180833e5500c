"""The `serve_text` signature of classification and regression exports: raw
strings tokenized and packed inside the graph exactly as `bertexp prepare`
does (the same ids and longest-first truncation), then the model.

Shape legend: B batch, S max_seq_length.
"""
import tensorflow as tf

from bertexp.data import tokenization
from bertexp.model.encoders import tokenizers
from bertexp.tasks import base
from bertexp.util import serving_weights

_TEXT = tf.TensorSpec([None], tf.string)


class TextPacker(tf.Module):
  """text [B] (or text_a + text_b [B]) -> token ids {input_word_ids,
  input_mask, input_type_ids} int32 [B, S], packed as `bertexp prepare`
  packs them. Saved beside an ONNX model (`bertexp export-onnx`), it gives
  that model a `serve_text` signature.

  Tracks the tokenizer, so a SavedModel of this module holds its
  vocabulary table (WordPiece) or model (SentencePiece).
  """

  def __init__(self, *, vocab_file, do_lower_case, max_seq_length,
               num_text_features, tokenizer_family=None, keep_accents=False):
    """Args:
      vocab_file, do_lower_case, max_seq_length: as `bertexp prepare` used.
      num_text_features: 1 (`text`) or 2 (`text_a`, `text_b`).
      tokenizer_family, keep_accents: a SentencePiece tokenizer's, as the
        meta data records them (see tokenization.load).
    Raises:
      ValueError: num_text_features is not 1 or 2.
    """
    super().__init__()
    if num_text_features not in (1, 2):
      raise ValueError(f"num_text_features must be 1 or 2, got "
                       f"{num_text_features!r}")
    self._packing = dict(vocab_file=vocab_file, do_lower_case=do_lower_case,
                         max_seq_length=max_seq_length,
                         num_text_features=num_text_features,
                         tokenizer_family=tokenizer_family,
                         keep_accents=keep_accents)
    self._tokenizer = tokenizers.load(vocab_file, do_lower_case,
                                        tokenizer_family, keep_accents)
    self.tokenizer = self._tokenizer.module           # tracked: saved with us
    self._max_seq_length = max_seq_length
    self._pairs = num_text_features == 2

  def _outputs(self, inputs):
    return inputs

  def _serve(self, text_a, text_b):
    inputs = tokenization.pack_tf(self._tokenizer, text_a, text_b,
                                  self._max_seq_length)      # {name: [B, S]}
    return self._outputs(inputs)

  def signature(self):
    """The concrete function of `serve_text`."""
    if self._pairs:
      return tf.function(lambda text_a, text_b: self._serve(text_a, text_b),
                         input_signature=[_TEXT, _TEXT],
                         autograph=False).get_concrete_function()
    return tf.function(lambda text: self._serve(text, None),
                       input_signature=[_TEXT],
                       autograph=False).get_concrete_function()

  def packer(self):
    """A TextPacker with the same tokenizer settings (the ids alone)."""
    return TextPacker(**self._packing)


class PackedTextServing(TextPacker):
  """text [B] (or text_a + text_b [B]) -> the task's serving outputs.

  Tracks the model's variables and the tokenizer, so an export that holds
  this module saves the vocabulary table (or SentencePiece model) with the
  weights.
  """

  def __init__(self, model, serving_outputs, **packing):
    """Args:
      model: token ids -> the model's outputs.
      serving_outputs: the task's outputs -> what the signature returns.
      **packing: vocab_file, do_lower_case, max_seq_length,
        num_text_features (and a SentencePiece tokenizer's settings), as
        for TextPacker.
    Raises:
      ValueError: num_text_features is not 1 or 2.
    """
    super().__init__(**packing)
    serving_weights.attach_model(self, model)
    self._serving_outputs = serving_outputs

  def _outputs(self, inputs):
    return self._serving_outputs(self.model(inputs, training=False))


def from_meta(model, serving_outputs, meta, meta_data_path,
              num_text_features):
  """A PackedTextServing that packs text as `bertexp prepare` recorded in
  its meta data (vocabulary, casing, max_seq_length, tokenizer family), or
  None (with a warning) when the vocabulary file is not there any more.

  Args:
    model, serving_outputs: as for PackedTextServing.
    meta: the meta data; meta_data_path: its file (for the warning).
    num_text_features: 1 (`text`) or 2 (`text_a`, `text_b`).
  """
  vocab = base.serving_vocab(meta, meta_data_path)
  if vocab is None:
    return None
  return PackedTextServing(
      model, serving_outputs, vocab_file=vocab,
      do_lower_case=meta.get("do_lower_case", True),
      max_seq_length=meta["max_seq_length"],
      num_text_features=num_text_features,
      **tokenization.meta_fields(meta.get("tokenizer_family"),
                                 meta.get("keep_accents", False)))
