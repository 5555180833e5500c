"""SQuAD JSON -> examples -> windowed features, with run_squad's behaviour.

Examples keep the context as whitespace tokens (`doc_tokens`) and the answer
as word positions (via a char-to-word offset map). Features are sliding
windows `[CLS] question [SEP] doc window [SEP]` over the WordPiece tokens of
the context, stride `doc_stride`; each token records its source word and
whether this window is the one where it has the most context.

A training answer whose text cannot be found at its `answer_start` is skipped
and counted (the count is returned and logged), never silently kept wrong.
"""
import dataclasses
import logging
from typing import Dict, List

from bertexp.tasks.squad import squad_json
from bertexp.util import fileio


def _is_whitespace(ch):
  return ch in " \t\r\n" or ord(ch) == 0x202F


@dataclasses.dataclass
class SquadExample:
  """One SQuAD question with its context's whitespace words and answer."""
  qid: str
  question: str
  doc_tokens: List[str]
  answer_text: str = ""
  start_word: int = -1            # -1: no answer (v2.0 impossible / eval)
  end_word: int = -1
  is_impossible: bool = False
  start_char: int = 0             # the answer's first char in start_word
  end_char: int = 0               # its end (exclusive) in end_word
  # The whitespace before each word (byte-level BPE reads a word with it).
  doc_spaces: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ReadStats:
  """Counts of what reading a SQuAD file kept and skipped."""
  questions: int = 0
  impossible: int = 0
  skipped_answer_not_found: int = 0
  skipped_ids: List[str] = dataclasses.field(default_factory=list)


def split_context(context):
  """Whitespace tokens and, for every character, the index of its token."""
  tokens, char_to_word = [], []
  previous_space = True
  for ch in context:
    if _is_whitespace(ch):
      previous_space = True
    else:
      if previous_space:
        tokens.append(ch)
      else:
        tokens[-1] += ch
      previous_space = False
    char_to_word.append(len(tokens) - 1)
  return tokens, char_to_word


def word_spacing(context):
  """The whitespace before each of split_context's tokens."""
  spaces, run = [], ""
  previous_space = True
  for ch in context:
    if _is_whitespace(ch):
      run += ch
      previous_space = True
    else:
      if previous_space:
        spaces.append(run)
        run = ""
      previous_space = False
  return spaces


def _where(path, a, p, q=None):
  return f"{path}: data[{a}].paragraphs[{p}]" + (f".qas[{q}]" if q is not None else "")


def _paragraphs(path, dataset):
  """Yields (a, p, paragraph) of a SQuAD dataset, checking its structure."""
  if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
    raise ValueError(f"{path}: not a SQuAD file (no top-level 'data' list)")
  objects = squad_json.json_objects
  for a, article in enumerate(objects(dataset["data"], f"{path}: data")):
    paragraphs = objects(article.get("paragraphs", []),
                         f"{path}: data[{a}].paragraphs")
    for p, paragraph in enumerate(paragraphs):
      if not isinstance(paragraph.get("context"), str):
        raise ValueError(f"{_where(path, a, p)}: needs a 'context' string")
      objects(paragraph.get("qas"), f"{_where(path, a, p)}.qas")
      yield a, p, paragraph


def read_examples(path, *, is_training, version_2_with_negative):
  """Reads a SQuAD file; returns (examples, ReadStats)."""
  dataset = fileio.read_json(path)
  has_impossible = any(qa.get("is_impossible") for _, _, paragraph in
                       _paragraphs(path, dataset) for qa in paragraph["qas"])
  if has_impossible and not version_2_with_negative:
    raise ValueError(f"{path}: holds unanswerable (is_impossible) questions, a "
                     "SQuAD v2.0 file: pass --version_2_with_negative")
  examples, stats = [], ReadStats()
  for a, p, paragraph in _paragraphs(path, dataset):
    doc_tokens, char_to_word = split_context(paragraph["context"])
    doc_spaces = word_spacing(paragraph["context"])
    for q, qa in enumerate(paragraph["qas"]):
      where = _where(path, a, p, q)
      for field in ("id", "question"):
        if field not in qa:
          raise ValueError(f"{where}: missing field {field!r}")
        if not isinstance(qa[field], str):
          raise ValueError(f"{where}: field {field!r} must be a string")
      stats.questions += 1
      example = SquadExample(qa["id"], qa["question"], doc_tokens,
                             doc_spaces=doc_spaces)
      if version_2_with_negative and "is_impossible" not in qa:
        raise ValueError(f"{where}: missing 'is_impossible' (a v1.1 file "
                         "read with --version_2_with_negative?)")
      example.is_impossible = bool(qa.get("is_impossible", False))
      stats.impossible += example.is_impossible
      if is_training and not example.is_impossible:
        if not _locate_answer(example, qa, char_to_word, paragraph["context"],
                              where):
          stats.skipped_answer_not_found += 1
          stats.skipped_ids.append(qa["id"])
          continue
      examples.append(example)
  if stats.skipped_answer_not_found:
    logging.warning("%s: skipped %d training question(s) whose answer text is "
                    "not at answer_start (first ids: %s)", path,
                    stats.skipped_answer_not_found, stats.skipped_ids[:5])
  if not examples:
    raise ValueError(f"{path}: no usable questions")
  return examples, stats


def _locate_answer(example, qa, char_to_word, context, where):
  """Sets the answer's word span; False when the text is not where it says."""
  answers = qa.get("answers")
  if not answers:
    raise ValueError(f"{where}: a training question needs one answer "
                     "(or is_impossible true)")
  answer = squad_json.json_objects(answers, f"{where}.answers")[0]
  if not isinstance(answer.get("text"), str) or "answer_start" not in answer:
    raise ValueError(f"{where}.answers[0]: needs a 'text' string and "
                     "'answer_start'")
  text, start = answer["text"], answer["answer_start"]
  if not isinstance(start, int) or start < 0 or start + len(text) > len(context) \
      or not text:
    raise ValueError(f"{where}.answers[0]: answer_start {start!r} with a "
                     f"{len(text)}-character answer lies outside the "
                     f"{len(context)}-character context")
  example.answer_text = text
  example.start_word = char_to_word[start]
  example.end_word = char_to_word[start + len(text) - 1]
  example.start_char = start - char_to_word.index(example.start_word)
  example.end_char = (start + len(text) -
                      char_to_word.index(example.end_word))
  found = " ".join(example.doc_tokens[example.start_word:example.end_word + 1])
  # The answer text, whitespace-normalised, must appear in those words.
  return " ".join(text.split()) in found


@dataclasses.dataclass
class SquadFeature:
  """One window. Positions index the packed sequence of max_seq_length."""
  unique_id: int
  example_index: int
  window_index: int
  input_word_ids: List[int]
  input_mask: List[int]
  input_type_ids: List[int]
  token_to_word: Dict[int, int]          # packed position -> doc word index
  token_is_max_context: Dict[int, bool]
  start_position: int = 0                # 0 ([CLS]) = no answer in window
  end_position: int = 0


def doc_windows(num_tokens, max_tokens, stride):
  """(start, length) windows over the context tokens, as run_squad."""
  windows, start = [], 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens)
    windows.append((start, length))
    if start + length == num_tokens:
      break
    start += min(length, stride)
  return windows or [(0, 0)]


def is_max_context(windows, window_index, position):
  """True when `position` has more context in this window than in any other:
  score = min(left, right) context + 0.01 * window length."""
  best_score, best_index = None, None
  for index, (start, length) in enumerate(windows):
    end = start + length - 1
    if position < start or position > end:
      continue
    score = min(position - start, end - position) + 0.01 * length
    if best_score is None or score > best_score:
      best_score, best_index = score, index
  return best_index == window_index


def _improve_span(doc_pieces, start, end, answer_pieces):
  """The tightest piece span inside [start, end] spelling the answer's pieces
  (e.g. "1895" inside "(1895-1943)."), else the given span."""
  for new_start in range(start, end + 1):
    for new_end in range(end, new_start - 1, -1):
      if doc_pieces[new_start:new_end + 1] == answer_pieces:
        return new_start, new_end
  return start, end


def best_windows(windows, num_tokens):
  """For every context token, the index of the window where it has the most
  context (vectorised is_max_context; the first window wins ties)."""
  import numpy as np
  positions = np.arange(num_tokens)
  scores = np.full([len(windows), num_tokens], -np.inf)
  for index, (start, length) in enumerate(windows):
    end = start + length - 1
    inside = (positions >= start) & (positions <= end)
    score = np.minimum(positions - start, end - positions) + 0.01 * length
    scores[index] = np.where(inside, score, -np.inf)
  return np.argmax(scores, axis=0) if num_tokens else np.zeros(0, np.int64)


def _piece_bytes(tokenizer, words):
  """{word: (the word as the tokenizer normalizes it, [(start, end) bytes of
  each of its pieces in it])}."""
  import tensorflow as tf
  if not words:
    return {}
  normalized = [w.decode("utf-8") for w in
                tokenizer.normalize(tf.constant(words)).numpy()]
  _, starts, ends = tokenizer.tokenize_with_offsets_tf(tf.constant(normalized))
  return {word: (text, list(zip(first, last))) for word, text, first, last in
          zip(words, normalized, starts.to_list(), ends.to_list())}


def _segments(example, tokenizer):
  """What the tokenizer reads for each context word: the word (WordPiece,
  SentencePiece), or the whitespace before it and the word (byte-level
  BPE, whose pieces depend on it); and how many characters precede the
  word in it."""
  if tokenizer.tokenizes_words_alone:
    return example.doc_tokens, [0] * len(example.doc_tokens)
  spaces = example.doc_spaces or [""] + [" "] * (len(example.doc_tokens) - 1)
  return ([s + w for s, w in zip(spaces, example.doc_tokens)],
          [len(s) for s in spaces])


def _span_by_offsets(example, word_to_piece, piece_bytes, segments):
  """The answer's first and last piece by offsets, as Hugging Face's run_qa
  finds them (for tokenizers whose pieces run across punctuation), counted
  in bytes so that a character split over byte-level pieces is kept whole:
  the start is the last piece starting at or before the answer's first
  byte (so a lone word-start mark is passed over), the end the piece after
  the last one ending before the answer's end."""
  texts, lead = segments
  first_text, first = piece_bytes[texts[example.start_word]]
  last_text, last = piece_bytes[texts[example.end_word]]
  in_bytes = lambda text, chars: len(text[:chars].encode("utf-8"))
  start_byte = in_bytes(first_text, example.start_char + lead[example.start_word])
  end_byte = in_bytes(last_text, example.end_char + lead[example.end_word])
  start = max((i for i, (a, _) in enumerate(first) if a <= start_byte),
              default=0)
  end = min(1 + max((i for i, (_, b) in enumerate(last)
                     if b < end_byte), default=-1), len(last) - 1)
  return (word_to_piece[example.start_word] + start,
          word_to_piece[example.end_word] + end)


def _context_pieces(doc_tokens, word_pieces):
  piece_to_word, word_to_piece, doc_pieces = [], [], []
  for w, word in enumerate(doc_tokens):
    word_to_piece.append(len(doc_pieces))
    pieces = word_pieces[word]
    piece_to_word.extend([w] * len(pieces))
    doc_pieces.extend(int(p) for p in pieces)
  return piece_to_word, word_to_piece, doc_pieces


def _layout(layouts, key, doc_length, doc_stride, max_seq_length, taken,
            query_length):
  """(windows, each piece's best window) of paragraph `key` when `taken`
  of `max_seq_length` positions hold the question and special tokens; kept
  in `layouts`.

  Raises:
    ValueError: the question leaves no room for the context.
  """
  max_tokens = max_seq_length - taken
  if max_tokens < 1:
    raise ValueError(f"max_seq_length {max_seq_length} leaves no room for "
                     f"the context after a {query_length}-piece question")
  if (key, max_tokens) not in layouts:
    windows = doc_windows(doc_length, max_tokens, doc_stride)
    layouts[(key, max_tokens)] = (windows, best_windows(windows, doc_length))
  return layouts[(key, max_tokens)]


def _span_by_words(example, word_to_piece, doc_pieces, answer_ids):
  """(first, last) context piece of a training answer, from its words,
  narrowed to the pieces of the tokenized answer text (`answer_ids`)."""
  start_piece = word_to_piece[example.start_word]
  end_piece = (word_to_piece[example.end_word + 1] - 1
               if example.end_word + 1 < len(example.doc_tokens)
               else len(doc_pieces) - 1)
  return _improve_span(doc_pieces, start_piece, end_piece,
                       [int(i) for i in answer_ids])


def convert_examples(examples, tokenizer, *, max_seq_length, doc_stride,
                     max_query_length, is_training, first_unique_id=0):
  """Examples -> windowed features (training: with start/end positions).

  doc_stride is google-research's: the step between window starts (Hugging
  Face's `stride` is the overlap instead). Windows follow the tokenizer's
  pair layout (`[CLS] q [SEP] d [SEP]`, XLM-RoBERTa's `<s> q </s></s> d
  </s>` without token types); each whitespace word is tokenized alone, as
  the SentencePiece families' fast tokenizers split a context too.
  """
  from bertexp.data import tokenization
  segments = {}                # per paragraph (questions share doc_tokens)
  for example in examples:
    if id(example.doc_tokens) not in segments:
      segments[id(example.doc_tokens)] = _segments(example, tokenizer)
  words = sorted({w for texts, _ in segments.values() for w in texts})
  word_pieces = dict(zip(words, tokenizer.tokenize(words))) if words else {}
  questions = tokenizer.tokenize([e.question for e in examples])
  answers = (tokenizer.tokenize([e.answer_text for e in examples])
             if is_training else None)
  by_offsets = is_training and not tokenizer.splits_punctuation
  piece_bytes = _piece_bytes(tokenizer, sorted({
      segments[id(e.doc_tokens)][0][w] for e in examples
      if not e.is_impossible for w in (e.start_word, e.end_word)})
                            ) if by_offsets else {}
  contexts, layouts = {}, {}   # per paragraph (questions share doc_tokens)
  special = tokenization.special_count(tokenizer, True)
  features, unique_id = [], first_unique_id
  for index, example in enumerate(examples):
    query = [int(i) for i in questions[index][:max_query_length]]
    key = id(example.doc_tokens)
    if key not in contexts:
      contexts[key] = _context_pieces(segments[key][0], word_pieces)
    piece_to_word, word_to_piece, doc_pieces = contexts[key]
    start_piece = end_piece = None
    if is_training and not example.is_impossible:
      start_piece, end_piece = (
          _span_by_offsets(example, word_to_piece, piece_bytes, segments[key])
          if by_offsets else _span_by_words(example, word_to_piece, doc_pieces,
                                            answers[index]))
    windows, best = _layout(layouts, key, len(doc_pieces), doc_stride,
                            max_seq_length, len(query) + special, len(query))
    prefix = ([tokenizer.cls_id] + query +
              [tokenizer.sep_id] * tokenizer.pair_separators)
    offset, context_type = len(prefix), int(tokenizer.segment_ids)
    for window_index, (start, length) in enumerate(windows):
      ids = prefix + doc_pieces[start:start + length] + [tokenizer.sep_id]
      positions = range(offset, offset + length)
      token_to_word = dict(zip(positions, piece_to_word[start:start + length]))
      max_context = dict(zip(positions, (best[start:start + length] ==
                                         window_index).tolist()))
      padding = max_seq_length - len(ids)
      feature = SquadFeature(
          unique_id, index, window_index, ids + [tokenizer.pad_id] * padding,
          [1] * len(ids) + [0] * padding,
          [0] * offset + [context_type] * (length + 1) + [0] * padding,
          token_to_word,
          max_context)
      if start_piece is not None and start <= start_piece and \
          end_piece <= start + length - 1:
        feature.start_position = start_piece + offset - start
        feature.end_position = end_piece + offset - start
      features.append(feature)
      unique_id += 1
  return features


def write_features(features, path, is_training):
  """Features -> one TFRecord file (temporary name, renamed at the end).

  Records: input_word_ids, input_mask, input_type_ids [S]; unique_id; and
  for training start_positions, end_positions.
  """
  import numpy as np
  from bertexp.data import records
  writer = records.RecordWriter(path)
  try:
    for start in range(0, len(features), 20000):
      batch = features[start:start + 20000]
      columns = {name: np.array([getattr(f, name) for f in batch], np.int64)
                 for name in ("input_word_ids", "input_mask", "input_type_ids",
                              "unique_id")}
      if is_training:
        for name in ("start_position", "end_position"):
          columns[name + "s"] = np.array([getattr(f, name) for f in batch],
                                         np.int64)
      writer.write_batch(columns)
    writer.commit()
  except BaseException:
    writer.abort()
    raise
  return writer.count


def prepare_squad(*, squad_file, vocab_file, output_dir, version_2_with_negative,
                  max_seq_length=384, doc_stride=128, max_query_length=64,
                  do_lower_case=True, is_training=True, tokenizer_family=None,
                  keep_accents=False):
  """`bertexp prepare squad`: squad_{version}_{split}.tf_record + meta data
  (tokenizer_family, keep_accents: a SentencePiece tokenizer's, see
  tokenization.load)."""
  from bertexp.data import tokenization
  from bertexp.model.encoders import tokenizers
  version = "v2.0" if version_2_with_negative else "v1.1"
  split = "train" if is_training else "eval"
  examples, stats = read_examples(squad_file, is_training=is_training,
                                  version_2_with_negative=version_2_with_negative)
  tokenizer = tokenizers.load(vocab_file, do_lower_case, tokenizer_family,
                               keep_accents)
  features = convert_examples(examples, tokenizer, max_seq_length=max_seq_length,
                              doc_stride=doc_stride,
                              max_query_length=max_query_length,
                              is_training=is_training)
  fileio.makedirs(output_dir)
  record_path = fileio.join(output_dir, f"squad_{version}_{split}.tf_record")
  count = write_features(features, record_path, is_training)
  meta = {
      "task": f"squad_{version}", "task_type": "question_answering",
      "version_2_with_negative": version_2_with_negative,
      f"{split}_data_size": count, "num_questions": len(examples),
      "questions_read": stats.questions, "impossible_questions": stats.impossible,
      "skipped_answer_not_found": stats.skipped_answer_not_found,
      "max_seq_length": max_seq_length, "doc_stride": doc_stride,
      "max_query_length": max_query_length, "do_lower_case": do_lower_case,
      "vocab_sha256": fileio.sha256(vocab_file),
      "vocab_size": len(tokenizer.vocab), "source_file": squad_file,
      **tokenization.meta_fields(tokenizer_family, keep_accents),
  }
  fileio.write_json(fileio.join(output_dir, f"squad_{version}_{split}_meta_data"),
                    meta)
  logging.info("%s: %d questions -> %d windows in %s (%d skipped: answer not "
               "found)", squad_file, len(examples), count, record_path,
               stats.skipped_answer_not_found)
  return meta
