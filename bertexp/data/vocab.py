"""`bertexp build-vocab`: a WordPiece vocabulary from raw text with
tensorflow_text's vocabulary learner.

Words are found as the tokenizer will find them (bertexp's FullTokenizer
cleaning and lower-casing, then split on whitespace and punctuation, one word
per CJK character), so every CJK character of the corpus alphabet becomes a
token. The reserved tokens come first: [PAD] [UNK] [CLS] [SEP] [MASK]. The
same corpus gives the same file, whether its words are counted here or by
the Apache Beam pipeline of bertexp.data.vocab_beam.
"""
import logging

import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

from bertexp.data import pipeline
from bertexp.data import tokenization
from bertexp.util import fileio
from bertexp.util import private_apis


def _is_cjk_piece(token):
  return token.startswith("##") and len(token) == 3 and tokenization.is_cjk(token[2])


class WordSplitter:
  """Lines -> the words the tokenizer will see (FullTokenizer cleaning and
  lower-casing, split on whitespace and punctuation, CJK one per word)."""

  def __init__(self, do_lower_case=True):
    self.do_lower_case = do_lower_case
    self.splitter = private_apis.basic_tokenizer(lower_case=False)

  def __call__(self, lines):
    """lines: tf.string [N] -> the words of all lines, tf.string [W]."""
    return self.splitter.tokenize(
        tokenization.normalize(lines, self.do_lower_case)).flat_values


def count_words(files, do_lower_case=True, batch_size=4096):
  """{word: count} over local or TensorFlow-readable files, in-process.

  Raises:
    ValueError: the files hold no word.
  """
  split = WordSplitter(do_lower_case)
  lines = tf.data.TextLineDataset(files).filter(
      lambda line: tf.strings.length(tf.strings.strip(line)) > 0)
  words = lines.batch(batch_size).map(
      split, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  try:
    return learner.count_words(words.as_numpy_iterator())
  except StopIteration:             # the learner's reaction to no word at all
    raise ValueError(f"{files}: no text to learn a vocabulary from") from None


def learn_vocab(counts, vocab_size, output, *, chinese=False):
  """Learns the WordPiece vocabulary of `counts` and writes `output`.

  chinese: a CJK alphabet is large, so the learner may keep up to
  vocab_size / 2 distinct characters (English keeps the top 1,000), and the
  useless "##<CJK character>" pieces are dropped (CJK characters are always
  words of their own).

  Returns:
    The vocabulary, reserved tokens first.

  Raises:
    ValueError: vocab_size leaves no room beside the reserved tokens.
  """
  reserved = list(tokenization.RESERVED_TOKENS)
  check_size(vocab_size)
  # Sorted: the learner's result must not depend on dict order.
  word_counts = sorted(counts.items())
  vocab = learner.learn(word_counts, vocab_size, reserved,
                        max_unique_chars=vocab_size // 2 if chinese else 1000)
  if chinese:
    vocab = [t for t in vocab if not _is_cjk_piece(t)]
  if vocab[:len(reserved)] != reserved:
    vocab = reserved + [t for t in vocab if t not in reserved]
  fileio.write_text(output, "\n".join(vocab) + "\n")
  logging.info("%s: %d tokens from %d distinct words", output, len(vocab),
               len(counts))
  return vocab


def check_size(vocab_size):
  """Raises ValueError when vocab_size leaves no room beside the reserved
  tokens."""
  reserved = list(tokenization.RESERVED_TOKENS)
  if vocab_size <= len(reserved):
    raise ValueError(f"--vocab_size {vocab_size} leaves no room beside the "
                     f"reserved tokens {reserved}")


def build_vocab(input_files, vocab_size, output, *, do_lower_case=True,
                chinese=False, batch_size=4096):
  """Counts the words of `input_files` in-process and writes the learned
  vocabulary to `output` (see `learn_vocab`); returns it.

  Raises:
    ValueError: no word, or a vocab_size too small.
    FileNotFoundError: a pattern matches no file.
  """
  check_size(vocab_size)
  files = pipeline.list_files(input_files)
  counts = count_words(files, do_lower_case, batch_size)
  return learn_vocab(counts, vocab_size, output, chinese=chinese)
