"""SentencePiece tokenizers of the ALBERT, XLM-RoBERTa and DeBERTa-v2/v3
families, in the graph (tensorflow_text's SentencePiece op), with the ids,
special tokens and pair layout of the Hugging Face fast tokenizers of those
families.

- XLM-RoBERTa (`sentencepiece.bpe.model`): fairseq's vocabulary: `<s>` 0,
  `<pad>` 1, `</s>` 2, `<unk>` 3, every SentencePiece id + 1; pairs are
  `<s> A </s></s> B </s>`, with no token types.
- ALBERT (`spiece.model`): the model's own ids (`<pad>` 0, `<unk>` 1,
  `[CLS]` 2, `[SEP]` 3); `` and '' become ", accents are stripped (NFKD)
  and text lower-cased unless the folder's tokenizer_config.json says
  otherwise; pairs are `[CLS] A [SEP] B [SEP]` with token types 0 and 1.
- DeBERTa-v2/v3 (`spm.model`): the model's own ids (`[PAD]` 0, `[CLS]` 1,
  `[SEP]` 2, `[UNK]` 3); text as it is unless tokenizer_config.json says
  do_lower_case; pairs as ALBERT's.

Both run the model's own normaliser (its precompiled character map, extra
whitespace removed) inside the op, as the fast tokenizer does.
"""
import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bertexp.data import tokenizer_base
from bertexp.util import fileio


# The mark SentencePiece puts before a piece that starts a word.
WORD_START = "\u2581"


@dataclasses.dataclass(frozen=True)
class Layout:
  """How a family lays out SentencePiece ids (each encoder family declares
  its own, see bertexp.model.encoders).

  Attributes:
    model_file: the SentencePiece file name in a Hugging Face folder.
    id_offset: added to every SentencePiece id (fairseq's shift).
    unk_id: the id of an unknown piece, after the shift.
    cls, sep, pad, mask: the special tokens' names in the vocabulary.
    pair_separators: separators between the two texts of a pair.
    segment_ids: the second text's tokens get type id 1.
    albert_text: ALBERT's text rules before the model (quotes, accents,
      lower case).
    hf_tokenizer_class: transformers' tokenizer class for the family.
  """
  model_file: str
  id_offset: int
  unk_id: int
  cls: str
  sep: str
  pad: str
  mask: str
  pair_separators: int
  segment_ids: bool
  albert_text: bool
  hf_tokenizer_class: str


# fairseq's first four ids, before the shifted SentencePiece ids.
_FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


class SentencePieceTokenizer(tokenizer_base.BatchTokenizer):
  """Text -> the family's ids, in batches, with the SentencePiece op.

  The same interface as tokenization.Tokenizer (tokenize, tokenize_tf,
  cls_id, sep_id, pad_id, vocab, pair_separators, segment_ids,
  truncation), so that
  `prepare` and `serve_text` pack its ids the family's way.
  """

  def __init__(self, model_file, family, layout, do_lower_case=True,
               keep_accents=False):
    """Args:
      model_file: the family's SentencePiece model (a serialized proto).
      family: the Hugging Face model_type ("xlm-roberta", "albert"...).
      layout: its Layout (the encoder family declares it).
      do_lower_case, keep_accents: ALBERT's text rules (its
        tokenizer_config.json); XLM-RoBERTa has neither, DeBERTa
        do_lower_case only.
    Raises:
      ValueError: a file that is no SentencePiece model.
    """
    self.vocab_file = model_file
    self.family = family
    self.spec = layout
    self.do_lower_case = do_lower_case
    self.keep_accents = keep_accents
    proto = fileio.read_bytes(model_file)
    try:
      # A tf.Module: an export that tracks it saves the model in the graph.
      self.module = tf_text.SentencepieceTokenizer(model=proto,
                                                   out_type=tf.int32)
      pieces = self.module.id_to_string(
          tf.range(self.module.vocab_size())).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.InternalError) as e:
      raise ValueError(f"{model_file}: not a SentencePiece model "
                       f"({e.message.splitlines()[0]})") from None
    self.vocab = self._vocab([p.decode("utf-8") for p in pieces])
    self.token_to_id = {t: i for i, t in enumerate(self.vocab)}
    missing = [t for t in (self.spec.cls, self.spec.sep, self.spec.pad)
               if t not in self.token_to_id]
    if missing:
      raise ValueError(f"{model_file}: a {family} SentencePiece model needs "
                       f"the pieces {missing}")
    self.cls_id = self.token_to_id[self.spec.cls]
    self.sep_id = self.token_to_id[self.spec.sep]
    self.pad_id = self.token_to_id[self.spec.pad]
    self.unk_id = self.spec.unk_id
    self.pair_separators = self.spec.pair_separators
    self.segment_ids = self.spec.segment_ids
    self.truncation = "huggingface"        # pairs cut as the fast tokenizer
    self.splits_punctuation = False        # pieces run across punctuation
    self.tokenizes_words_alone = True      # each word starts with "\u2581"
    self.word_prefix = ""                  # what a word alone is read with
    self.mask_token = self.spec.mask       # what masked-LM data shows

  def _vocab(self, pieces):
    """The family's tokens in id order: the model's pieces, and its mask
    token after them where the model has none (DeBERTa-v3: Hugging Face
    adds [MASK] after the SentencePiece vocabulary)."""
    if not self.spec.id_offset:
      return pieces + ([] if self.spec.mask in pieces else [self.spec.mask])
    # fairseq: its four specials, the model's pieces from id 3 on (the
    # model's own <unk>, <s>, </s> at 0-2 map to fairseq's), then <mask>.
    return (list(_FAIRSEQ_SPECIALS) + pieces[3:] + [self.spec.mask])

  def normalize(self, texts):
    """ALBERT's rules before the model's own normaliser (quotes, accents,
    lower case); other families' text goes to the model as it is, lower
    cased when their tokenizer_config.json says do_lower_case."""
    if not self.spec.albert_text:
      return (tf.strings.lower(texts, encoding="utf-8") if self.do_lower_case
              else texts)
    texts = tf.strings.regex_replace(texts, "``|''", '"')
    if not self.keep_accents:
      texts = tf_text.normalize_utf8(texts, "NFKD")
      texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
    if self.do_lower_case:
      texts = tf.strings.lower(texts, encoding="utf-8")
    return texts

  def tokenize_tf(self, texts):
    """tf.string [B] -> ragged int64 [B, (pieces)] in the family's ids."""
    return self._family_ids(self.module.tokenize(self.normalize(texts)))

  def tokenize_with_offsets_tf(self, normalized):
    """Already normalized tf.string [N] -> (ids, start bytes, end bytes),
    each ragged int64 [N, (pieces)], offsets into `normalized` (a piece
    that is only the word-start mark "▁" spans no byte)."""
    ids, starts, ends = self.module.tokenize_with_offsets(normalized)
    return self._family_ids(ids), starts, ends

  def _family_ids(self, ids):
    """The model's ragged ids -> the family's (fairseq's shift), int64."""
    if self.spec.id_offset:
      ids = tf.ragged.map_flat_values(
          lambda v: tf.where(v == 0, self.spec.unk_id, v + self.spec.id_offset),
          ids)
    return tf.cast(ids, tf.int64)

  def continues_word(self):
    """bool [V]: True for the pieces without the word-start mark "\u2581"
    (a word's later pieces, and punctuation written against the word
    before it); whole-word masking keeps them with that word."""
    return np.array([not t.startswith(WORD_START) for t in self.vocab])

  @staticmethod
  def pieces_text(tokens):
    """SentencePiece pieces -> their text, words apart at each "▁"."""
    return " ".join("".join(tokens).replace(WORD_START, " ").split())
