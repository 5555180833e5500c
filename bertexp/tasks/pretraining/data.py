"""`bertexp prepare pretraining`: raw text -> MLM/NSP TFRecords with
google-research/bert's create_pretraining_data semantics.

Input: one sentence per line, a blank line between documents (a new file
also starts a document). Per document (and per `dupe_factor` pass) segments
are packed up to max_seq_length - 3 tokens (a shorter random target with
short_seq_prob); A is a random number of whole segments, B is the actual
continuation or, half of the time, text from a random other document; the
pair is truncated at random ends; then masked_lm_prob of the tokens (at most
max_predictions_per_seq) are chosen as whole words when asked, each 80 %
[MASK] / 10 % unchanged / 10 % a random vocab token.

Differences from the original, on purpose: each file is streamed in chunks
of documents (random next sentences come from another document of the same
chunk; a chunk holds ~`chunk_bytes` of text and never spans two files),
instances are shuffled within a chunk, and chunks are processed by parallel
worker processes. Every chunk has its own RNG seeded from (seed, file index,
chunk index), so the output is byte-identical for a seed whatever the number
of workers, and the Apache Beam pipeline (beam_pipeline beside this module)
writes the same records in shards. Whole-word groups never cross [SEP].

Chinese whole-word masking: with `chinese_word_segmenter="jieba"`, the
characters of one segmenter word form one masking group.
"""
import collections
import dataclasses
import logging
import multiprocessing
import os
import random
import sys
import time

import numpy as np

from bertexp.util import extras
from bertexp.util import fileio

FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
            "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


@dataclasses.dataclass(frozen=True)
class Options:
  """The options of `bertexp prepare pretraining` (create_pretraining_data's flags)."""
  vocab_file: str
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  dupe_factor: int = 10
  random_seed: int = 12345
  do_whole_word_mask: bool = False
  chinese_word_segmenter: str = None      # None or "jieba"
  do_lower_case: bool = True
  # None: vocab_file is a WordPiece vocab.txt; else the model_type of a
  # SentencePiece model or byte-level BPE vocab.json in vocab_file
  # (bertexp.data.tokenization.load), as `--tokenizer=FOLDER` gives.
  tokenizer_family: str = None
  keep_accents: bool = False

  def check(self):
    if self.max_seq_length < 5:
      raise ValueError(f"max_seq_length {self.max_seq_length} leaves no room: "
                       "[CLS] A [SEP] B [SEP] needs at least 5 positions")
    if not 0 < self.masked_lm_prob < 1:
      raise ValueError(f"masked_lm_prob {self.masked_lm_prob} is not in (0, 1)")
    if self.max_predictions_per_seq < 1 or self.dupe_factor < 1:
      raise ValueError("max_predictions_per_seq and dupe_factor must be >= 1")
    if self.chinese_word_segmenter not in (None, "jieba"):
      raise ValueError(f"chinese_word_segmenter {self.chinese_word_segmenter!r}"
                       " is not 'jieba'")
    from bertexp.model.encoders import tokenizers
    if self.chinese_word_segmenter and tokenizers.spec_for(
        self.tokenizer_family).kind != "wordpiece":
      raise ValueError(
          f"--chinese_word_segmenter needs a WordPiece vocabulary; the "
          f"{self.tokenizer_family} tokenizer marks its own word starts")


# -- reading -----------------------------------------------------------------

def file_chunks(path, stream, chunk_bytes):
  """The documents of one file, in chunks of about `chunk_bytes` of text.

  Args:
    path: the file's name, for errors.
    stream: the file opened in binary mode (a line ends at each newline byte).
    chunk_bytes: a chunk ends at the first document end past this size.

  Yields:
    (chunk, bytes of the file read so far); a chunk is a list of documents,
    a document a list of stripped non-blank lines.

  Raises:
    ValueError: a line is not UTF-8, or the file holds no text at all.
  """
  chunk, document, size, done, number = [], [], 0, 0, 0
  yielded = False
  for number, raw in enumerate(stream, 1):
    done += len(raw)
    try:
      line = raw.decode("utf-8").strip()
    except UnicodeDecodeError as e:
      raise ValueError(f"{path}:{number}: not UTF-8 text ({e.reason})") from None
    if line:
      document.append(line)
      size += len(line)
      continue
    if document:
      chunk.append(document)
      document = []
    if size >= chunk_bytes:
      yield chunk, done
      chunk, size, yielded = [], 0, True
  if document:            # a file's end ends its last document
    chunk.append(document)
  if chunk:
    yield chunk, done
  elif not yielded:
    raise ValueError(f"{path}: no text ({number} blank lines); every input "
                     "file must hold at least one document")


def read_chunks(files, chunk_bytes):
  """Streams the chunks of local `files` in order (see `file_chunks`).

  Yields:
    (file index, chunk index within the file, chunk, bytes of all files
    read so far).
  """
  done = 0
  for file_index, path in enumerate(files):
    try:
      stream = open(path, "rb")
    except OSError as e:
      raise ValueError(f"{path}: cannot be read ({e.strerror})") from None
    with stream:
      for chunk_index, (chunk, read) in enumerate(
          file_chunks(path, stream, chunk_bytes)):
        yield file_index, chunk_index, chunk, done + read
        done_in_file = read
    done += done_in_file


def text_files(input_files):
  """The files of comma-separated globs (or a list of paths), each
  pattern's matches sorted; folders are left out (as Beam's file systems
  do).

  Raises:
    FileNotFoundError: a pattern matches no file.
  """
  from bertexp.data import pipeline
  if not isinstance(input_files, str):
    return list(input_files)
  return [f for f in pipeline.list_files(input_files) if not os.path.isdir(f)]


def chunk_seed(random_seed, file_index, chunk_index):
  """The seed of one chunk's RNGs: a chunk's instances depend only on its
  text and its place, so files and chunks can be processed anywhere."""
  return int(np.random.SeedSequence(
      [random_seed, file_index, chunk_index]).generate_state(1, np.uint64)[0])


# -- one chunk (runs in a worker) --------------------------------------------

class ChunkWorker:
  """Turns chunks of documents into serialised instances; holds the
  tokenizer and vocab tables, built once per process."""

  def __init__(self, options):
    from bertexp.data import tokenization
    from bertexp.model.encoders import tokenizers
    self.options = options
    self.tokenizer = tokenizers.load(
        options.vocab_file, options.do_lower_case, options.tokenizer_family,
        options.keep_accents)
    vocab = self.tokenizer.vocab
    mask = self.tokenizer.mask_token
    if mask not in self.tokenizer.token_to_id:
      raise ValueError(f"{options.vocab_file}: no {mask} token (masked-LM "
                       "data needs it)")
    self.vocab_size = len(vocab)
    self.cls, self.sep = self.tokenizer.cls_id, self.tokenizer.sep_id
    self.pad = self.tokenizer.pad_id
    self.mask = self.tokenizer.token_to_id[mask]
    self.unk = self.tokenizer.unk_id
    # The pair layout: `cls A sep B sep` (BERT), `cls A sep sep B sep`
    # (RoBERTa, XLM-R); B's type ids 1 only where the family has types.
    self.separators = self.tokenizer.pair_separators
    self.segment_ids = self.tokenizer.segment_ids
    self.continuation = self.tokenizer.continues_word()
    self.cjk = np.array([len(t) == 1 and tokenization.is_cjk(t) for t in vocab])
    self.segment = None
    if options.chinese_word_segmenter == "jieba":
      jieba = extras.require(
          "jieba", "pip install 'bertexp[chinese]'",
          "--chinese_word_segmenter=jieba")
      jieba.setLogLevel(logging.WARNING)
      self.segment = jieba.lcut

  def tokenize_lines(self, lines):
    """-> [(ids int32 [n], word_start bool [n])] per line."""
    if self.segment is None:
      return [(x, _line_word_starts(~self.continuation[x]))
              for x in self.tokenizer.tokenize(lines)]
    words_per_line = [[w for w in self.segment(line) if w.strip()] for line in lines]
    flat = [w for words in words_per_line for w in words]
    word_ids = self.tokenizer.tokenize(flat) if flat else []
    result, k = [], 0
    for words in words_per_line:
      pieces, starts = [], []
      for ids in word_ids[k:k + len(words)]:
        # A word's first token starts it; inside a segmenter word, CJK
        # characters and ## pieces continue it.
        start = ~(self.continuation[ids] | self.cjk[ids])
        start[:1] = True
        pieces.append(ids)
        starts.append(start)
      k += len(words)
      result.append((np.concatenate(pieces) if pieces else np.zeros(0, np.int32),
                     np.concatenate(starts) if starts else np.zeros(0, bool)))
    return result

  def process(self, chunk, seed):
    """One chunk's instances.

    Args:
      chunk: a list of documents (lists of lines).
      seed: the chunk's seed (`chunk_seed`).

    Returns:
      (serialised tf.train.Examples, a dict of counts for the meta data).
    """
    from bertexp.data import records
    lines = [line for document in chunk for line in document]
    tokenized = self.tokenize_lines(lines)
    stats = {"documents": 0, "lines": len(lines), "empty_lines": 0,
             "tokens": 0, "instances": 0, "masked": 0, "random_next": 0,
             "instance_tokens": 0, "masked_as_mask": 0, "masked_kept": 0, "masked_random": 0,
             "random_next_same_document": 0, "unknown_tokens": 0}
    documents, k = [], 0
    for document in chunk:
      segments = []
      for ids, starts in tokenized[k:k + len(document)]:
        if len(ids):
          segments.append((ids, starts))
          stats["tokens"] += len(ids)
          stats["unknown_tokens"] += int(np.sum(ids == self.unk))
        else:
          stats["empty_lines"] += 1       # nothing left after tokenization
      k += len(document)
      if segments:
        documents.append(segments)
    stats["documents"] = len(documents)
    # Python's RNG for the per-instance decisions, numpy's for the masks.
    rng, np_rng = random.Random(seed), np.random.default_rng(seed)
    instances = []
    for _ in range(self.options.dupe_factor):
      for index in range(len(documents)):
        instances.extend(self._instances(documents, index, rng, np_rng, stats))
    rng.shuffle(instances)
    stats["instances"] = len(instances)
    if not instances:
      return [], stats
    columns = {name: np.stack([inst[i] for inst in instances])
               for i, name in enumerate(FEATURES)}
    return records.serialize_examples(columns), stats

  def _instances(self, documents, index, rng, np_rng, stats):
    options = self.options
    document = documents[index]
    max_tokens = options.max_seq_length - 2 - self.separators
    target = max_tokens
    if rng.random() < options.short_seq_prob:
      target = rng.randint(2, max_tokens)
    result, chunk, length, i = [], [], 0, 0
    while i < len(document):
      chunk.append(document[i])
      length += len(document[i][0])
      if i == len(document) - 1 or length >= target:
        a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
        a = list(chunk[:a_end])
        b = []
        if len(chunk) == 1 or rng.random() < 0.5:
          is_random = True
          b_target = target - sum(len(s[0]) for s in a)
          for _ in range(10):
            other = rng.randint(0, len(documents) - 1)
            if other != index:
              break
          if other == index:
            stats["random_next_same_document"] += 1
          random_document = documents[other]
          b_length = 0
          for j in range(rng.randint(0, len(random_document) - 1),
                         len(random_document)):
            b.append(random_document[j])
            b_length += len(random_document[j][0])
            if b_length >= b_target:
              break
          i -= len(chunk) - a_end            # unused segments go back
        else:
          is_random = False
          b = list(chunk[a_end:])
        result.append(self._instance(a, b, is_random, rng, np_rng, stats))
        chunk, length = [], 0
      i += 1
    return result

  def _instance(self, a, b, is_random, rng, np_rng, stats):
    """One MLM/NSP instance of segments `a` and `b` (lists of (token ids,
    word starts)): truncated to fit, masked, padded; counted in `stats`."""
    options = self.options
    k = self.separators
    ids_a, start_a, ids_b, start_b = _truncate_pair(
        a, b, options.max_seq_length - 2 - k, rng)
    n_a, n_b = len(ids_a), len(ids_b)
    tokens = np.concatenate([[self.cls], ids_a, [self.sep] * k, ids_b,
                             [self.sep]])
    n = len(tokens)
    b_start = 1 + n_a + k
    positions = np.concatenate([np.arange(1, 1 + n_a),
                                np.arange(b_start, b_start + n_b)])
    to_predict = min(options.max_predictions_per_seq,
                     max(1, int(round(n * options.masked_lm_prob))))
    if options.do_whole_word_mask:
      masked = _whole_word_positions(positions, np.concatenate(
          [start_a, start_b]), to_predict, np_rng)
    else:
      masked = np.sort(positions[np_rng.permutation(len(positions))[:to_predict]])
    labels = tokens[masked]
    output = tokens.copy()
    # 80 % [MASK], 10 % unchanged, 10 % a random token (of the whole vocab).
    draw = np_rng.random(len(masked))
    as_mask, as_random = draw < 0.8, draw >= 0.9
    output[masked[as_mask]] = self.mask
    output[masked[as_random]] = np_rng.integers(0, self.vocab_size,
                                                int(as_random.sum()))
    stats["masked_as_mask"] += int(as_mask.sum())
    stats["masked_random"] += int(as_random.sum())
    stats["masked_kept"] += len(masked) - int(as_mask.sum()) - int(as_random.sum())
    stats["masked"] += len(masked)
    stats["instance_tokens"] += n
    stats["random_next"] += int(is_random)
    return _padded_features(output, b_start if self.segment_ids else n,
                            masked, labels, is_random, options.max_seq_length,
                            options.max_predictions_per_seq, self.pad)


def _truncate_pair(a, b, max_tokens, rng):
  """(ids_a, starts_a, ids_b, starts_b) of the joined segments, the longer
  side cut at a random end until both fit in `max_tokens`."""
  ids_a = np.concatenate([s[0] for s in a])
  ids_b = np.concatenate([s[0] for s in b])
  start_a = np.concatenate([s[1] for s in a])
  start_b = np.concatenate([s[1] for s in b])
  lo_a, hi_a, lo_b, hi_b = 0, len(ids_a), 0, len(ids_b)
  while (hi_a - lo_a) + (hi_b - lo_b) > max_tokens:
    if hi_a - lo_a > hi_b - lo_b:
      if rng.random() < 0.5:
        lo_a += 1
      else:
        hi_a -= 1
    elif rng.random() < 0.5:
      lo_b += 1
    else:
      hi_b -= 1
  start_a, start_b = start_a[lo_a:hi_a].copy(), start_b[lo_b:hi_b].copy()
  start_a[:1] = True        # a cut word still starts its segment's group
  start_b[:1] = True
  return ids_a[lo_a:hi_a], start_a, ids_b[lo_b:hi_b], start_b


def _whole_word_positions(positions, word_starts, to_predict, np_rng):
  """Positions to mask, whole words at a time: groups (a word's tokens) are
  visited in random order and taken while they fit in `to_predict`.
  positions: [T] the tokens' places in the instance (never [CLS]/[SEP]);
  word_starts: [T] bool, True where a word (a group) begins."""
  group = np.cumsum(word_starts) - 1                                  # [T]
  sizes = np.bincount(group)
  order = np_rng.permutation(len(sizes))
  chosen, count = [], 0
  for g in order.tolist():
    if count >= to_predict:
      break
    if count + sizes[g] <= to_predict:
      chosen.append(g)
      count += sizes[g]
  taken = np.zeros(len(sizes), bool)
  taken[chosen] = True
  return positions[taken[group]]


def _line_word_starts(starts):
  """A line's word starts (bool [n]) with its first token starting a word
  (byte-level BPE's first word has no space before it)."""
  starts[:1] = True
  return starts


def _padded_features(tokens, second_start, masked, labels, is_random, seq,
                     preds, pad_id):
  """The instance's arrays padded to `seq` tokens (with `pad_id`) and
  `preds` predictions: (input_ids, input_mask, segment_ids, lm_positions,
  lm_ids, lm_weights, next_sentence_label). Type id 1 from `second_start`
  (B's first token) to B's closing separator."""
  n = len(tokens)
  input_ids = np.full(seq, pad_id, np.int64)
  input_ids[:n] = tokens
  mask = np.zeros(seq, np.int64)
  mask[:n] = 1
  segments = np.zeros(seq, np.int64)
  segments[second_start:n] = 1
  lm_positions = np.zeros(preds, np.int64)
  lm_positions[:len(masked)] = masked
  lm_ids = np.zeros(preds, np.int64)
  lm_ids[:len(masked)] = labels
  lm_weights = np.zeros(preds, np.float32)
  lm_weights[:len(masked)] = 1.0
  return (input_ids, mask, segments, lm_positions, lm_ids, lm_weights,
          np.array([int(is_random)], np.int64))


_WORKER = None


def _init_worker(options):
  global _WORKER
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  _WORKER = ChunkWorker(options)


def _process(task):
  chunk, seed, bytes_read = task
  return bytes_read, _WORKER.process(chunk, seed)


def _bounded_in_order(pool, tasks, window):
  """Like pool.imap, but at most `window` chunks in flight: imap would read
  the whole corpus into its queue."""
  pending = collections.deque()
  for task in tasks:
    pending.append(pool.apply_async(_process, (task,)))
    if len(pending) >= window:
      yield pending.popleft().get()
  while pending:
    yield pending.popleft().get()


class Progress:
  """MB/s of `prepare pretraining`. On a terminal one line rewritten twice a
  second; in a log file or pipe a whole line every `log_seconds` (a
  carriage return there runs the updates into one line).

  Args:
    total_bytes: the corpus size.
    stream: where to write (sys.stderr).
    log_seconds: seconds between lines when `stream` is no terminal.
  """

  def __init__(self, total_bytes, stream=None, log_seconds=30.0):
    self.total, self.start, self.last = total_bytes, time.time(), 0.0
    self.stream = stream or sys.stderr
    self.terminal = self.stream.isatty()
    self.interval = 0.5 if self.terminal else log_seconds
    self.open_line = False

  def end_line(self):
    """Ends a progress line left open (before an error is printed)."""
    if self.open_line:
      self.stream.write("\n")
      self.open_line = False

  def update(self, done_bytes, instances, final=False):
    now = time.time()
    if not final and now - self.last < self.interval:
      return
    self.last = now
    rate = done_bytes / 1e6 / max(now - self.start, 1e-9)
    line = (f"prepare pretraining: {done_bytes / 1e6:.1f}/"
            f"{self.total / 1e6:.1f} MB, {instances:,} instances, "
            f"{rate:.2f} MB/s")
    if self.terminal:
      self.stream.write("\r" + line + ("\n" if final else ""))
      self.open_line = not final
    else:
      self.stream.write(line + "\n")
    self.stream.flush()


def add_counts(total, counts):
  """Adds a chunk's `counts` (ChunkWorker.process) into `total`."""
  for key, value in counts.items():
    total[key] = total.get(key, 0) + value


def check_instances(instances, input_files):
  """Raises ValueError when a corpus gave no instance at all."""
  if not instances:
    raise ValueError(f"{input_files}: no pretraining instance (empty corpus, "
                     "or no line with a token in the vocabulary)")


def build_meta(options, *, files, input_bytes, instances, counts,
               vocab_size, seconds, **extra):
  """The `_meta_data` of prepared pretraining records: the options, the
  input, the instance count, the tokenizer's vocabulary size and the corpus
  counts; `extra` adds fields."""
  return dict(dataclasses.asdict(options), task="pretraining",
              input_files=files, input_bytes=input_bytes,
              train_data_size=instances, vocab_size=vocab_size,
              vocab_sha256=fileio.sha256(options.vocab_file),
              seconds=round(seconds, 2),
              masked_fraction=counts["masked"] / max(1, counts["instance_tokens"]),
              **counts, **extra)


def prepare_pretraining(*, input_files, output_file, options, num_workers=None,
                        chunk_bytes=1 << 20, progress=True):
  """Writes `output_file` (one TFRecord file) and its `_meta_data`.

  Args:
    input_files: a comma-separated list of globs, or a list of paths.
    output_file: the TFRecord file to write (renamed into place when done).
    options: an `Options`.
    num_workers: processes (default up to 2, one per core).
    chunk_bytes: text per chunk; the output depends on it.
    progress: print MB/s to stderr.

  Returns:
    The meta data (a dict), also written to `meta_path(output_file)`.

  Raises:
    ValueError: bad options or input (named), or no instance at all.
  """
  from bertexp.data import records
  options.check()
  # The tokenizer's and segmenter's errors here, before any worker starts.
  worker = ChunkWorker(options)
  files = text_files(input_files)
  total = sum(os.path.getsize(f) for f in files if os.path.exists(f))
  num_workers = num_workers or min(2, os.cpu_count() or 1)
  if os.path.dirname(output_file):
    fileio.makedirs(os.path.dirname(output_file))
  writer = records.RecordWriter(output_file)
  counts, progress_bar = {}, Progress(total) if progress else None
  start = time.time()
  tasks = ((chunk, chunk_seed(options.random_seed, file_index, chunk_index),
            bytes_read) for file_index, chunk_index, chunk, bytes_read
           in read_chunks(files, chunk_bytes))
  pool = None
  try:
    if num_workers > 1:
      pool = multiprocessing.get_context("spawn").Pool(
          num_workers, initializer=_init_worker, initargs=(options,))
      results = _bounded_in_order(pool, tasks, 2 * num_workers)
    else:
      results = ((bytes_read, worker.process(chunk, seed))
                 for chunk, seed, bytes_read in tasks)
    for bytes_read, (examples, chunk_counts) in results:
      writer.write_serialized(examples)
      add_counts(counts, chunk_counts)
      if progress_bar:
        progress_bar.update(bytes_read, writer.count)
    check_instances(writer.count, input_files)
    writer.commit()
  except BaseException:
    writer.abort()
    if progress_bar:
      progress_bar.end_line()
    raise
  finally:
    if pool:
      pool.terminate()
  seconds = time.time() - start
  if progress_bar:
    progress_bar.update(total, writer.count, final=True)
  meta = build_meta(options, files=files, input_bytes=total,
                    instances=writer.count, counts=counts,
                    vocab_size=worker.vocab_size, seconds=seconds,
                    runner="direct", chunk_bytes=chunk_bytes)
  fileio.write_json(meta_path(output_file), meta)
  logging.info("%s: %d instances from %d documents (%d lines, %d without "
               "tokens skipped), %.1f MB in %.1f s", output_file, writer.count,
               counts["documents"], counts["lines"], counts["empty_lines"],
               total / 1e6, seconds)
  return meta


def meta_path(output_file):
  """The meta data file written beside `output_file`."""
  return os.path.splitext(output_file)[0] + "_meta_data"
