"""WordPiece tokenization (tensorflow_text) and BERT pair packing.

The rules are google-research/bert's FullTokenizer: clean control characters,
lower case + strip accents when `do_lower_case`, split on whitespace and
punctuation, one token per CJK character, greedy longest-match WordPiece.
Packing is `[CLS] a [SEP] b [SEP]` with segment ids 0 for a, 1 for b, and
pairs truncated longest-first (ties shorten b), as run_classifier did; a
tokenizer of another family (bertexp.data.sentencepiece) brings its own
special ids, separators between a pair's texts and token types, which
`pack` and `pack_tf` follow.
"""
import dataclasses
from typing import Any, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bertexp.data import tokenizer_base
from bertexp.util import fileio

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def load_vocab(vocab_file):
  """Returns the vocab tokens in id order; checks the reserved tokens."""
  tokens = fileio.read_text(vocab_file).splitlines()
  tokens = [t.strip() for t in tokens]
  while tokens and not tokens[-1]:
    tokens.pop()
  if not tokens:
    raise ValueError(f"{vocab_file}: empty vocabulary")
  seen = {}
  for line, token in enumerate(tokens, 1):
    if token in seen:
      raise ValueError(f"{vocab_file}:{line}: duplicate token {token!r} "
                       f"(first on line {seen[token]})")
    seen[token] = line
  missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]") if t not in seen]
  if missing:
    raise ValueError(f"{vocab_file}: missing reserved tokens {missing}")
  return tokens


def is_cjk(ch):
  """A CJK ideograph (the ranges FullTokenizer splits into single tokens)."""
  cp = ord(ch)
  return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or
          0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F or
          0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
          0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


# FullTokenizer's WordpieceTokenizer makes a word of more than 200
# characters one [UNK]; FastBertTokenizer counts bytes (default 100). Words
# up to 200 characters (at most 800 UTF-8 bytes) go to FastBertTokenizer
# whole; longer ones are replaced by a word just over its byte limit, which
# it turns into one [UNK].
MAX_CHARS_PER_WORD = 200
MAX_BYTES_PER_WORD = 4 * MAX_CHARS_PER_WORD
_UNKNOWN_WORD = "x" * (MAX_BYTES_PER_WORD + 1)
# A "word" as FullTokenizer's BasicTokenizer splits: no space, no
# punctuation (ASCII symbols included), no CJK ideograph.
_WORD_CHAR = (r"[^ !-/:-@\[-`{-~\p{P}\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}"
              r"\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}"
              r"\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")


def normalize(texts, do_lower_case):
  """FullTokenizer's text cleaning and lower-casing, as string ops; words
  over MAX_CHARS_PER_WORD characters become a word that tokenizes to [UNK]."""
  texts = tf.strings.regex_replace(texts, r"[\t\n\r\p{Zs}]", " ")
  texts = tf.strings.regex_replace(texts, r"[\x{0}\x{fffd}\p{C}]", "")
  if do_lower_case:
    texts = tf.strings.lower(texts, encoding="utf-8")
    texts = tf_text.normalize_utf8(texts, "NFD")
    texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
  return _replace_long_words(texts)


def _replace_long_words(texts):
  """Words over MAX_CHARS_PER_WORD characters -> _UNKNOWN_WORD. The exact
  pattern is slow (RE2 leaves its DFA for it), so it runs only on the texts
  that have such a run of non-space characters at all (a fast test)."""
  long_run = r"(?s).*[^ ]{%d,}.*" % (MAX_CHARS_PER_WORD + 1)
  where = tf.where(tf.strings.regex_full_match(texts, long_run))      # [K, rank]
  replaced = tf.strings.regex_replace(
      tf.gather_nd(texts, where),
      _WORD_CHAR + "{%d,}" % (MAX_CHARS_PER_WORD + 1), _UNKNOWN_WORD)
  return tf.tensor_scatter_nd_update(texts, where, replaced)


class Tokenizer(tokenizer_base.BatchTokenizer):
  """Text -> WordPiece ids, in batches, with tensorflow_text's C++ tokenizer."""

  def __init__(self, vocab_file, do_lower_case=True):
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.vocab = load_vocab(vocab_file)
    self.token_to_id = {t: i for i, t in enumerate(self.vocab)}
    self.cls_id = self.token_to_id["[CLS]"]
    self.sep_id = self.token_to_id["[SEP]"]
    self.pad_id = self.token_to_id["[PAD]"]
    self.unk_id = self.token_to_id["[UNK]"]
    # BERT's pair layout: one [SEP] between the texts, b's type ids are 1;
    # pairs cut as google-research's run_classifier cut them.
    self.pair_separators = 1
    self.segment_ids = True
    self.truncation = "google"
    self.splits_punctuation = True         # punctuation marks are words
    self.tokenizes_words_alone = True      # a word's pieces need no context
    self.word_prefix = ""                  # what a word alone is read with
    self.mask_token = "[MASK]"             # what masked-LM data shows
    # Normalisation is done by `normalize` below, not by FastBertTokenizer's
    # own lower-casing: that one applies NFKC case folding ("²" -> "2",
    # full-width letters -> ASCII), which FullTokenizer does not.
    # A tf.Module: an export that tracks it saves its vocabulary table.
    self.wordpiece = tf_text.FastBertTokenizer(
        vocab=self.vocab, token_out_type=tf.int64, unknown_token="[UNK]",
        max_bytes_per_word=MAX_BYTES_PER_WORD,
        no_pretokenization=False, support_detokenization=True,
        lower_case_nfd_strip_accents=False)
    self.module = self.wordpiece

  def normalize(self, texts):
    return normalize(texts, self.do_lower_case)

  def tokenize_tf(self, texts):
    """tf.string [B] -> ragged int64 [B, (tokens)] (words merged)."""
    return self.wordpiece.tokenize(self.normalize(texts))

  def tokenize_with_offsets_tf(self, normalized):
    """Already normalized tf.string [N] -> (ids, start bytes, end bytes),
    each ragged int64 [N, (pieces)], offsets into `normalized`."""
    return self.wordpiece.tokenize_with_offsets(normalized)

  def continues_word(self):
    """bool [V]: True for the tokens that continue the word before them
    ("##" pieces); whole-word masking keeps them with that word."""
    return np.array([t.startswith("##") for t in self.vocab])

  @staticmethod
  def pieces_text(tokens):
    """WordPiece tokens -> their text, words apart ("##" pieces joined)."""
    return " ".join(" ".join(tokens).replace(" ##", "").replace("##", "")
                    .split())


def truncated_lengths(len_a, len_b, max_tokens, rule="google", ops=np):
  """Lengths after longest-first pair truncation, elementwise.

  rule "google": google-research's loop pops from the longer side, from b on
  ties; its end state is a = min(len_a, max(max_tokens - len_b,
  ceil(max_tokens / 2))), b = the rest (BERT's WordPiece data, as
  run_classifier wrote it). rule "huggingface": Hugging Face tokenizers'
  LongestFirst: only the longer text is cut while the shorter fits in
  half; when both must be cut, each keeps half and the longer one (b on
  equal lengths) the odd token.

  Args:
    len_a, len_b: lengths (numpy arrays, or int64 tensors with ops=tf).
    max_tokens: what the two texts may keep together.
    rule: "google" or "huggingface".
    ops: np, or tf for tensors (in a graph).
  Returns:
    (kept a lengths, kept b lengths).
  """
  if ops is np:
    len_a, len_b = np.asarray(len_a), np.asarray(len_b)
  over = len_a + len_b > max_tokens
  if rule == "google":
    keep_a = ops.minimum(len_a, ops.maximum(max_tokens - len_b,
                                            (max_tokens + 1) // 2))
    keep_b = max_tokens - keep_a
  else:
    # The shorter text keeps itself up to half; the longer one the rest.
    keep_short = ops.minimum(ops.minimum(len_a, len_b), max_tokens // 2)
    keep_long = max_tokens - keep_short
    a_longer = len_a > len_b
    keep_a = ops.where(a_longer, keep_long, keep_short)
    keep_b = ops.where(a_longer, keep_short, keep_long)
  return ops.where(over, keep_a, len_a), ops.where(over, keep_b, len_b)


def special_count(tokenizer, pairs):
  """Special tokens around one text (2) or a pair (3 for BERT's
  `[CLS] a [SEP] b [SEP]`, 4 for RoBERTa's `<s> a </s></s> b </s>`)."""
  return 2 + (tokenizer.pair_separators if pairs else 0)


def pack(tokenizer, ids_a, ids_b, max_seq_length):
  """Packs id lists into [N, S] int32 word ids, mask and segment ids.

  ids_b is None for single sentences. The layout is the tokenizer's:
  `cls a sep (sep...) b sep` (tokenizer.pair_separators seps between the
  texts), b's type ids 1 when tokenizer.segment_ids. Returns a dict of
  numpy arrays and the number of examples that were truncated.
  """
  n = len(ids_a)
  len_a = np.array([len(x) for x in ids_a])
  if ids_b is None:
    len_b = np.zeros(n, np.int64)
    new_a = np.minimum(len_a, max_seq_length - 2)
    new_b = len_b
  else:
    len_b = np.array([len(x) for x in ids_b])
    new_a, new_b = truncated_lengths(
        len_a, len_b, max_seq_length - special_count(tokenizer, True),
        tokenizer.truncation)
  truncated = int(np.sum((new_a < len_a) | (new_b < len_b)))
  word_ids = np.full([n, max_seq_length], tokenizer.pad_id, np.int32)
  type_ids = np.zeros([n, max_seq_length], np.int32)
  word_ids[:, 0] = tokenizer.cls_id
  seps = tokenizer.pair_separators
  for i in range(n):
    a, b = new_a[i], new_b[i]
    word_ids[i, 1:1 + a] = ids_a[i][:a]
    word_ids[i, 1 + a] = tokenizer.sep_id
    if ids_b is not None:
      word_ids[i, 1 + a:1 + a + seps] = tokenizer.sep_id
      start = 1 + a + seps
      word_ids[i, start:start + b] = ids_b[i][:b]
      word_ids[i, start + b] = tokenizer.sep_id
      if tokenizer.segment_ids:
        type_ids[i, start:start + b + 1] = 1
  used = new_a + 2 + (new_b + seps if ids_b is not None else 0)
  mask = (np.arange(max_seq_length)[None, :] < used[:, None]).astype(np.int32)
  return {"input_word_ids": word_ids, "input_mask": mask,
          "input_type_ids": type_ids}, truncated


def pack_tf(tokenizer, texts_a, texts_b, max_seq_length):
  """In-graph tokenize + pack of string tensors [B]: the same ids, truncation
  (the tokenizer's longest-first rule) and layout as `pack`, for SavedModels that
  take raw text. Returns int32 [B, max_seq_length] word ids, mask, type ids."""
  a = tokenizer.tokenize_tf(texts_a)                                 # [B, (n)]
  len_a = a.row_lengths()
  if texts_b is None:
    keep_a = tf.minimum(len_a, max_seq_length - 2)
    b = None
  else:
    b = tokenizer.tokenize_tf(texts_b)
    len_b = b.row_lengths()
    budget = tf.constant(max_seq_length - special_count(tokenizer, True),
                         tf.int64)
    keep_a, keep_b = truncated_lengths(len_a, len_b, budget,
                                       tokenizer.truncation, ops=tf)
    b = tf.ragged.boolean_mask(b, tf.ragged.range(len_b) < keep_b[:, None])
  a = tf.ragged.boolean_mask(a, tf.ragged.range(len_a) < keep_a[:, None])
  return pack_ids_tf(tokenizer, a, b, max_seq_length)


def pack_ids_tf(tokenizer, a, b, max_seq_length):
  """Ragged int64 ids [B, (n)] that already fit -> the tokenizer's layout
  (`[CLS] a [SEP] (b [SEP])` for BERT) as int32 [B, max_seq_length] word
  ids, mask and type ids."""
  batch = a.nrows()
  special = lambda token_id, width=1: tf.RaggedTensor.from_tensor(tf.fill(
      [batch, width], tf.constant(token_id, tf.int64)))
  cls, sep = special(tokenizer.cls_id), special(tokenizer.sep_id)
  pieces, types = [cls, a, sep], [0, 0, 0]
  if b is not None:
    second = 1 if tokenizer.segment_ids else 0
    if tokenizer.pair_separators > 1:
      pieces, types = pieces + [special(
          tokenizer.sep_id, tokenizer.pair_separators - 1)], types + [0]
    pieces, types = pieces + [b, sep], types + [second, second]
  ids = tf.concat(pieces, axis=1)
  type_ids = tf.concat([tf.ones_like(p) * t for p, t in zip(pieces, types)], 1)
  shape = [None, max_seq_length]
  return {
      "input_word_ids": tf.cast(ids.to_tensor(tokenizer.pad_id, shape=shape),
                                tf.int32),
      "input_mask": tf.cast(tf.ones_like(ids).to_tensor(0, shape=shape), tf.int32),
      "input_type_ids": tf.cast(type_ids.to_tensor(0, shape=shape), tf.int32),
  }


# tokenizer_config.json options bertexp's tokenizers do not implement.
REFUSED_OPTIONS = ("split_by_punct",)


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
  """What an encoder family's tokenizer is; each family declares one per
  Hugging Face model_type it reads (bertexp.model.encoders), and the data
  side is handed it instead of keeping tables of families.

  Attributes:
    kind: "wordpiece", "byte_bpe" or "sentencepiece".
    files: the files of a Hugging Face folder it reads; files[0] is the one
      recorded as vocab_file (byte-level BPE's merges sit beside it).
    defaults: do_lower_case (and ALBERT's keep_accents) when the folder's
      tokenizer_config.json says nothing.
    layout: a SentencePiece family's ids, special tokens and pair template
      (bertexp.data.sentencepiece.Layout); None for the others.
    hf_tokenizer_class: transformers' tokenizer class (tokenizer_config.json
      of a folder bertexp writes).
  """
  kind: str
  files: Tuple[str, ...]
  defaults: Dict[str, bool]
  layout: Any = None
  hf_tokenizer_class: Optional[str] = None

  def load(self, vocab_file, family=None, do_lower_case=True,
           keep_accents=False):
    """The tokenizer of `vocab_file` (the family's model_type `family`)."""
    if self.kind == "wordpiece":
      return Tokenizer(vocab_file, do_lower_case)
    if self.kind == "byte_bpe":
      from bertexp.data import byte_bpe  # pylint: disable=g-import-not-at-top
      return byte_bpe.ByteBpeTokenizer(vocab_file)
    if self.kind != "sentencepiece":
      raise ValueError(f"{vocab_file}: bertexp does not read {family}'s "
                       f"{self.kind} tokenizer yet")
    from bertexp.data import sentencepiece  # pylint: disable=g-import-not-at-top
    return sentencepiece.SentencePieceTokenizer(
        vocab_file, family, self.layout, do_lower_case=do_lower_case,
        keep_accents=keep_accents)


def sentencepiece_spec(model_file, defaults, hf_tokenizer_class, **layout):
  """A SentencePiece family's TokenizerSpec: its model file, casing
  defaults, transformers' class and its Layout's fields (ids, special
  tokens, pair template; see bertexp.data.sentencepiece.Layout)."""
  from bertexp.data import sentencepiece  # pylint: disable=g-import-not-at-top
  return TokenizerSpec("sentencepiece", (model_file,), defaults,
                       layout=sentencepiece.Layout(
                           model_file, hf_tokenizer_class=hf_tokenizer_class,
                           **layout),
                       hf_tokenizer_class=hf_tokenizer_class)


WORDPIECE = TokenizerSpec("wordpiece", ("vocab.txt",), {"do_lower_case": True},
                          hf_tokenizer_class="BertTokenizer")
BYTE_BPE = TokenizerSpec("byte_bpe", ("vocab.json", "merges.txt"),
                         {"do_lower_case": False},
                         hf_tokenizer_class="RobertaTokenizer")


def meta_fields(tokenizer_family, keep_accents):
  """What a prepare command adds to its meta data for a SentencePiece
  tokenizer (nothing for WordPiece), so that serve_text loads the same."""
  if not tokenizer_family:
    return {}
  return {"tokenizer_family": tokenizer_family, "keep_accents": keep_accents}
