"""RoBERTa's byte-level BPE tokenizer (`vocab.json` + `merges.txt`) in the
graph, with the ids and pair layout of Hugging Face's RobertaTokenizerFast
(add_prefix_space false): `<s> A </s></s> B </s>`, no token types, `<pad>`
for padding.

Three steps, all TensorFlow ops (so `serve_text` tokenizes inside a
SavedModel):
1. GPT-2's pre-tokenizer: contractions, ` ?letters`, ` ?digits`, ` ?other`,
   whitespace. Its `\\s+(?!\\S)` (a run of whitespace leaves its last
   character to the next word) needs a lookahead RE2 does not have: runs of
   whitespace are split off first, and a run followed by a word gives its
   last character to that word before the word is split.
2. Every byte of a word becomes the printable character GPT-2 maps it to.
3. Merges, lowest rank first, leftmost first: one merge per word per step,
   all words at once, until no word has a known pair (what merging every
   occurrence of the best pair gives: a pair that a merge creates always
   ranks after the merge that created it).

Shape legend: B texts, N words, U distinct words, L symbols of a word.
"""
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bertexp.data import tokenizer_base
from bertexp.util import fileio

MERGES_FILE = "merges.txt"
VOCAB_FILE = "vocab.json"
# Unicode White_Space (RE2's \s is ASCII only).
_SPACE = r"\t\n\v\f\r\x{85}\p{Z}"
_SPACES = f"[{_SPACE}]+"
_WORD = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+"
         rf"| ?[^{_SPACE}\p{{L}}\p{{N}}]+|[{_SPACE}]+")
_NO_MERGE = 2 ** 31 - 1


def byte_symbols():
  """GPT-2's map of the 256 bytes to printable characters: printable Latin-1
  bytes stand for themselves, the others take 256, 257, ... in order."""
  printable = (list(range(ord("!"), ord("~") + 1)) +
               list(range(ord("\u00a1"), ord("\u00ac") + 1)) +
               list(range(ord("\u00ae"), ord("\u00ff") + 1)))
  extra = iter(range(256, 512))
  return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def read_merges(path):
  """merges.txt -> ["a b", ...] in rank order (its `#version` line and blank
  lines skipped).

  Raises:
    ValueError: a line that is not two symbols (naming file and line).
  """
  merges = []
  for number, line in enumerate(fileio.read_text(path).splitlines(), 1):
    if not line.strip() or (number == 1 and line.startswith("#version")):
      continue
    if len(line.split(" ")) != 2:
      raise ValueError(f"{path}:{number}: expected two symbols separated by "
                       f"one space, got {line!r}")
    merges.append(line)
  return merges


def read_vocab(path):
  """vocab.json -> tokens in id order.

  Raises:
    ValueError: not a {token: id} object, or ids that are not 0..n-1.
  """
  table = fileio.read_json(path)
  if not isinstance(table, dict) or not all(
      isinstance(i, int) for i in table.values()):
    raise ValueError(f"{path}: expected a JSON object of token -> integer id")
  tokens = sorted(table, key=table.get)
  if [table[t] for t in tokens] != list(range(len(tokens))):
    raise ValueError(f"{path}: ids must be 0..{len(tokens) - 1}, each once")
  return tokens


def _table(keys, values, default):
  return tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(keys, values), default)


class _Tables(tf.Module):
  """The lookup tables (saved with an export that tracks this module)."""

  def __init__(self, vocab, merges, unk_id):
    super().__init__()
    self.byte_symbol = _table([bytes([b]) for b in range(256)],
                              byte_symbols(), "")
    self.merge_rank = _table(merges, tf.range(len(merges), dtype=tf.int64),
                             tf.constant(_NO_MERGE, tf.int64))
    self.token_id = _table(vocab, tf.range(len(vocab), dtype=tf.int64),
                           tf.constant(unk_id, tf.int64))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string),
                                tf.TensorSpec([None], tf.int64)],
               autograph=False)
  def merge(self, values, splits):
    """merge_words on flat symbols and row splits, one graph for every
    batch (eager, the merge loop would run op by op)."""
    tokens = merge_words(tf.RaggedTensor.from_row_splits(values, splits),
                         self.merge_rank)
    return tokens.flat_values, tokens.row_splits


def pre_tokenize(texts):
  """tf.string [B] -> GPT-2's pre-tokenized words, ragged [B, (N)]."""
  chunks = tf_text.regex_split(texts, _SPACES, _SPACES)          # [B, (C)]
  flat = chunks.flat_values
  rows = chunks.value_rowids()
  spaces = tf.strings.regex_full_match(flat, _SPACES)
  next_in_row = tf.concat([tf.equal(rows[1:], rows[:-1]), [False]], 0)
  # A run of whitespace followed by a word keeps all but its last character.
  gives = spaces & next_in_row
  length = tf.strings.length(flat, unit="UTF8_CHAR")
  head = tf.strings.substr(flat, tf.zeros_like(length), length - 1,
                           unit="UTF8_CHAR")
  last = tf.strings.substr(flat, tf.maximum(length - 1, 0),
                           tf.ones_like(length), unit="UTF8_CHAR")
  given = tf.concat([[""], tf.where(gives, last, "")[:-1]], 0)
  regrouped = tf.strings.join([given, tf.where(gives, head, flat)])
  words = tf_text.regex_split(regrouped, _WORD, _WORD)           # [C, (w)]
  return chunks.with_flat_values(words).merge_dims(1, 2)


def _merge_once(values, splits, rank):
  """One merge in every word that has a known pair: its best pair
  (lowest rank, leftmost). Returns the new values, splits and whether any
  word merged."""
  words = tf.RaggedTensor.from_row_splits(values, splits)         # [U, (L)]
  left, right = words[:, :-1], words[:, 1:]                       # [U, (L-1)]
  ranks = left.with_flat_values(rank.lookup(tf.strings.join(
      [left.flat_values, right.flat_values], separator=" ")))
  best = tf.reduce_min(ranks, axis=1)                             # [U]
  position = tf.ragged.range(ranks.row_lengths())
  first = tf.reduce_min(tf.where(
      (ranks == best[:, None]) & (ranks < _NO_MERGE), position,
      tf.constant(_NO_MERGE, tf.int64)), axis=1)                  # [U]
  merging = first < _NO_MERGE
  at = tf.boolean_mask(words.row_starts() + first, merging)       # [M]
  merged = tf.strings.join([tf.gather(values, at), tf.gather(values, at + 1)])
  values = tf.tensor_scatter_nd_update(values, at[:, None], merged)
  keep = tf.tensor_scatter_nd_update(
      tf.ones_like(values, tf.bool), (at + 1)[:, None],
      tf.zeros_like(at, tf.bool))
  words = tf.ragged.boolean_mask(words.with_flat_values(values),
                                 words.with_flat_values(keep))
  return words.flat_values, words.row_splits, tf.reduce_any(merging)


def merge_words(symbols, rank):
  """Symbols ragged [U, (L)] -> the words' BPE tokens, ragged [U, (T)]."""
  def body(values, splits, _):
    return _merge_once(values, splits, rank)
  values, splits, _ = tf.while_loop(
      lambda values, splits, more: more, body,
      [symbols.flat_values, symbols.row_splits, tf.constant(True)],
      shape_invariants=[tf.TensorShape([None]), tf.TensorShape([None]),
                        tf.TensorShape([])])
  return tf.RaggedTensor.from_row_splits(values, splits)


_SYMBOL_BYTE = {symbol: b for b, symbol in enumerate(byte_symbols())}


class ByteBpeTokenizer(tokenizer_base.BatchTokenizer):
  """Text -> RoBERTa's ids, in batches, with TensorFlow ops; the interface
  of tokenization.Tokenizer (tokenize, tokenize_tf, cls_id, sep_id,
  pad_id, unk_id, vocab, pair_separators, segment_ids, truncation)."""

  def __init__(self, vocab_file, merges_file=None):
    """Args:
      vocab_file: vocab.json ({token: id}).
      merges_file: merges.txt (default: beside vocab_file).
    Raises:
      ValueError: a bad file, or special tokens missing from the vocabulary.
    """
    self.vocab_file = vocab_file
    self.merges_file = merges_file or fileio.join(
        vocab_file.rsplit("/", 1)[0] if "/" in vocab_file else ".",
        MERGES_FILE)
    self.do_lower_case = False
    self.vocab = read_vocab(vocab_file)
    self.token_to_id = {t: i for i, t in enumerate(self.vocab)}
    missing = [t for t in ("<s>", "</s>", "<pad>", "<unk>")
               if t not in self.token_to_id]
    if missing:
      raise ValueError(f"{vocab_file}: a RoBERTa vocabulary needs {missing}")
    self.cls_id = self.token_to_id["<s>"]
    self.sep_id = self.token_to_id["</s>"]
    self.pad_id = self.token_to_id["<pad>"]
    self.unk_id = self.token_to_id["<unk>"]
    self.pair_separators = 2
    self.segment_ids = False
    self.truncation = "huggingface"
    self.splits_punctuation = False
    # A word's pieces depend on the space before it: a context's words are
    # read with the whitespace before each (prepare squad); a tagged word
    # with a space before it, as run_ner reads it (add_prefix_space).
    self.tokenizes_words_alone = False
    self.word_prefix = " "
    self.mask_token = "<mask>"             # what masked-LM data shows
    self.module = _Tables(self.vocab, read_merges(self.merges_file),
                          self.unk_id)

  def normalize(self, texts):
    """Byte-level BPE reads text as it is."""
    return texts

  def _tokens(self, texts):
    """tf.string [B] -> BPE tokens (byte symbols), ragged [B, (T)]."""
    words = pre_tokenize(texts)                                   # [B, (N)]
    distinct, index = tf.unique(words.flat_values)                # [U], [N]
    symbols = tf.ragged.map_flat_values(
        self.module.byte_symbol.lookup,
        tf.strings.bytes_split(distinct))                         # [U, (L)]
    tokens = tf.RaggedTensor.from_row_splits(*self.module.merge(
        symbols.flat_values, symbols.row_splits))                 # [U, (T)]
    return words.with_flat_values(tf.gather(tokens, index)).merge_dims(1, 2)

  def tokenize_tf(self, texts):
    """tf.string [B] -> ragged int64 [B, (tokens)]."""
    return tf.ragged.map_flat_values(self.module.token_id.lookup,
                                     self._tokens(texts))

  def tokenize_with_offsets_tf(self, normalized):
    """tf.string [N] -> (ids, start bytes, end bytes), each ragged int64
    [N, (tokens)]: the tokens cover the text, one symbol per byte."""
    tokens = self._tokens(normalized)                             # [N, (T)]
    ends = tf.math.cumsum(tf.strings.length(tokens, unit="UTF8_CHAR"),
                          axis=1)
    ends = tf.cast(ends, tf.int64)
    starts = ends - tf.cast(tf.strings.length(tokens, unit="UTF8_CHAR"),
                            tf.int64)
    ids = tf.ragged.map_flat_values(self.module.token_id.lookup, tokens)
    return ids, starts, ends

  def continues_word(self):
    """bool [V]: True for the tokens that do not start with the symbol of
    a whitespace byte (a word's later tokens, and punctuation written
    against the word before it); whole-word masking keeps them with that
    word."""
    symbols = byte_symbols()
    spaces = tuple(symbols[ord(c)] for c in " \t\n\r\v\f")
    return np.array([not t.startswith(spaces) for t in self.vocab])

  @staticmethod
  def pieces_text(tokens):
    """BPE tokens -> their text (byte symbols back to UTF-8), words apart."""
    raw = bytes(_SYMBOL_BYTE[c] for c in "".join(tokens))
    return " ".join(raw.decode("utf-8", "replace").split())
