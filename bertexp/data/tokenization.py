"""WordPiece tokenization (tensorflow_text) and BERT pair packing.

The rules are google-research/bert's FullTokenizer: clean control characters,
lower case + strip accents when `do_lower_case`, split on whitespace and
punctuation, one token per CJK character, greedy longest-match WordPiece.
Packing is `[CLS] a [SEP] b [SEP]` with segment ids 0 for a, 1 for b, and
pairs truncated longest-first (ties shorten b), as run_classifier did.
"""
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

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


class Tokenizer:
  """Text -> WordPiece ids, in batches, with tensorflow_text's C++ tokenizer."""

  def __init__(self, vocab_file, do_lower_case=True):
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.vocab = load_vocab(vocab_file)
    self.token_to_id = {t: i for i, t in enumerate(self.vocab)}
    self.cls_id = self.token_to_id["[CLS]"]
    self.sep_id = self.token_to_id["[SEP]"]
    self.pad_id = self.token_to_id["[PAD]"]
    # Normalisation is done by `normalize` below, not by FastBertTokenizer's
    # own lower-casing: that one applies NFKC case folding ("²" -> "2",
    # full-width letters -> ASCII), which FullTokenizer does not.
    # A tf.Module: an export that tracks it saves its vocabulary table.
    self.wordpiece = tf_text.FastBertTokenizer(
        vocab=self.vocab, token_out_type=tf.int64, unknown_token="[UNK]",
        max_bytes_per_word=MAX_BYTES_PER_WORD,
        no_pretokenization=False, support_detokenization=True,
        lower_case_nfd_strip_accents=False)

  def normalize(self, texts):
    return normalize(texts, self.do_lower_case)

  def tokenize_tf(self, texts):
    """tf.string [B] -> ragged int64 [B, (tokens)] (words merged)."""
    return self.wordpiece.tokenize(self.normalize(texts))

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


def truncated_lengths(len_a, len_b, max_tokens):
  """Lengths after google-research's longest-first pair truncation.

  That loop pops from the longer side, from b on ties; its end state is
  a = min(len_a, max(max_tokens - len_b, ceil(max_tokens / 2))), b = rest.
  Works elementwise on numpy arrays.
  """
  len_a, len_b = np.asarray(len_a), np.asarray(len_b)
  over = len_a + len_b > max_tokens
  keep_a = np.minimum(len_a, np.maximum(max_tokens - len_b,
                                        (max_tokens + 1) // 2))
  new_a = np.where(over, keep_a, len_a)
  new_b = np.where(over, max_tokens - keep_a, len_b)
  return new_a, new_b


def pack(tokenizer, ids_a, ids_b, max_seq_length):
  """Packs id lists into [N, S] int32 word ids, mask and segment ids.

  ids_b is None for single sentences. Returns a dict of numpy arrays and the
  number of examples that were truncated.
  """
  n = len(ids_a)
  len_a = np.array([len(x) for x in ids_a])
  if ids_b is None:
    len_b = np.zeros(n, np.int64)
    new_a = np.minimum(len_a, max_seq_length - 2)
    new_b = len_b
  else:
    len_b = np.array([len(x) for x in ids_b])
    new_a, new_b = truncated_lengths(len_a, len_b, max_seq_length - 3)
  truncated = int(np.sum((new_a < len_a) | (new_b < len_b)))
  word_ids = np.full([n, max_seq_length], tokenizer.pad_id, np.int32)
  type_ids = np.zeros([n, max_seq_length], np.int32)
  word_ids[:, 0] = tokenizer.cls_id
  for i in range(n):
    a, b = new_a[i], new_b[i]
    word_ids[i, 1:1 + a] = ids_a[i][:a]
    word_ids[i, 1 + a] = tokenizer.sep_id
    if ids_b is not None:
      word_ids[i, 2 + a:2 + a + b] = ids_b[i][:b]
      word_ids[i, 2 + a + b] = tokenizer.sep_id
      type_ids[i, 2 + a:3 + a + b] = 1
  used = new_a + 2 + (new_b + 1 if ids_b is not None else 0)
  mask = (np.arange(max_seq_length)[None, :] < used[:, None]).astype(np.int32)
  return {"input_word_ids": word_ids, "input_mask": mask,
          "input_type_ids": type_ids}, truncated


def pack_tf(tokenizer, texts_a, texts_b, max_seq_length):
  """In-graph tokenize + pack of string tensors [B]: the same ids, truncation
  (longest-first, ties shorten b) and layout as `pack`, for SavedModels that
  take raw text. Returns int32 [B, max_seq_length] word ids, mask, type ids."""
  a = tokenizer.tokenize_tf(texts_a)                                 # [B, (n)]
  len_a = a.row_lengths()
  if texts_b is None:
    keep_a = tf.minimum(len_a, max_seq_length - 2)
    b = None
  else:
    b = tokenizer.tokenize_tf(texts_b)
    len_b = b.row_lengths()
    budget = tf.constant(max_seq_length - 3, tf.int64)
    over = len_a + len_b > budget
    cut_a = tf.minimum(len_a, tf.maximum(budget - len_b, (budget + 1) // 2))
    keep_a = tf.where(over, cut_a, len_a)
    keep_b = tf.where(over, budget - cut_a, len_b)
    b = tf.ragged.boolean_mask(b, tf.ragged.range(len_b) < keep_b[:, None])
  a = tf.ragged.boolean_mask(a, tf.ragged.range(len_a) < keep_a[:, None])
  return pack_ids_tf(tokenizer, a, b, max_seq_length)


def pack_ids_tf(tokenizer, a, b, max_seq_length):
  """Ragged int64 ids [B, (n)] that already fit -> `[CLS] a [SEP] (b [SEP])`
  as int32 [B, max_seq_length] word ids, mask and type ids (b: None or 1s)."""
  batch = a.nrows()
  cls = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], tf.constant(
      tokenizer.cls_id, tf.int64)))
  sep = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], tf.constant(
      tokenizer.sep_id, tf.int64)))
  pieces, types = [cls, a, sep], [0, 0, 0]
  if b is not None:
    pieces, types = pieces + [b, sep], types + [1, 1]
  ids = tf.concat(pieces, axis=1)
  type_ids = tf.concat([tf.ones_like(p) * t for p, t in zip(pieces, types)], 1)
  shape = [None, max_seq_length]
  return {
      "input_word_ids": tf.cast(ids.to_tensor(tokenizer.pad_id, shape=shape),
                                tf.int32),
      "input_mask": tf.cast(tf.ones_like(ids).to_tensor(0, shape=shape), tf.int32),
      "input_type_ids": tf.cast(type_ids.to_tensor(0, shape=shape), tf.int32),
  }
