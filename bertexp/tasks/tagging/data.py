"""Tagged sentences -> windows of word pieces -> TFRecords (`bertexp prepare tagging`).

Each word is split into WordPiece pieces; its tag goes to its first piece
and the later pieces are ignored (label -1), or, in `piece_label_ids`,
labelled too (Hugging Face's `label_all_tokens`; the task chooses which it
trains on). A sentence longer than max_seq_length - 2 pieces becomes
overlapping windows `doc_stride` pieces apart. Every word is scored once:
its prediction is taken from the window where it has the most context on
both sides (SQuAD's rule), marked in `word_index`.

Record features (int64):
  input_word_ids, input_mask, input_type_ids [S]: [CLS] pieces [SEP] padding
  label_ids [S]: the word's label id at its first piece, -1 elsewhere
  piece_label_ids [S]: every piece of a word labelled, -1 on [CLS]/[SEP]/pad
  word_index [S]: 1 + the word's index in its sentence at the first piece of
    each word this window scores, 0 elsewhere
  sentence_id [1]: the sentence's index in its split
Beside each record file, `<file>.sentences.jsonl` keeps each sentence's
tokens, gold tags (in the task's scheme), text and token character offsets:
what scoring and --mode=predict read to merge windows back per sentence.
"""
import json
import logging

import numpy as np

from bertexp.data import records
from bertexp.data import tokenization
from bertexp.model.encoders import tokenizers
from bertexp.data import windows
from bertexp.tasks.tagging import formats as tagging_formats
from bertexp.tasks.tagging import schemes as tag_schemes
from bertexp.util import fileio

IGNORED = -1


def sentences_path(record_path):
  """The sentences kept beside a split's records."""
  return record_path + ".sentences.jsonl"


class SentenceEncoder:
  """Sentences -> the record features of their windows."""

  def __init__(self, tokenizer, label_names, scheme, max_seq_length,
               doc_stride):
    self.tokenizer = tokenizer
    self.label_id = {name: i for i, name in enumerate(label_names)}
    self.scheme = scheme
    self.seq = max_seq_length
    self.width = max_seq_length - 2
    self.stride = doc_stride
    self.unknown = tokenizer.unk_id
    self.windows_split = 0

  def word_pieces(self, sentences):
    """Per sentence, per word, its piece ids (a word of no piece -> [UNK])."""
    flat = [t for s in sentences for t in s.tokens]
    prefix = self.tokenizer.word_prefix
    pieces = self.tokenizer.tokenize([prefix + w for w in flat]) if flat else []
    result, k = [], 0
    for sentence in sentences:
      words = []
      for _ in sentence.tokens:
        ids = pieces[k]
        words.append(ids if len(ids) else np.array([self.unknown], np.int32))
        k += 1
      result.append(words)
    return result

  def _piece_labels(self, words, tags):
    first, every = [], []
    for ids, tag in zip(words, tags):
      n = len(ids)
      first += [self.label_id[tag]] + [IGNORED] * (n - 1)
      if self.scheme == "NONE":           # plain tags: every piece the same
        every += [self.label_id[tag]] * n
        continue
      every.append(self.label_id[tag_schemes.first_piece_tag(
          tag, self.scheme, n == 1)])
      every += [self.label_id[tag_schemes.continuation_tag(
          tag, self.scheme, j == n - 1)] for j in range(1, n)]
    return first, every

  def encode(self, sentence_id, words, tags):
    """One sentence -> a list of per-window feature dicts (lists)."""
    ids = [p for w in words for p in w]
    word_of = [i for i, w in enumerate(words) for _ in w]
    firsts = np.cumsum([0] + [len(w) for w in words[:-1]])
    if tags is None:
      first = every = [IGNORED] * len(ids)
    else:
      first, every = self._piece_labels(words, tags)
    starts = windows.window_starts(len(ids), self.width, self.stride)
    self.windows_split += len(starts) > 1
    owner = {w: windows.owning_window(p, starts, self.width, len(ids))
             for w, p in enumerate(firsts)}
    encoded = []
    for k, start in enumerate(starts):
      end = min(start + self.width, len(ids))
      pad = self.seq - (end - start) - 2
      word_index = [word_of[p] + 1 if (p == firsts[word_of[p]] and
                                       owner[word_of[p]] == k) else 0
                    for p in range(start, end)]
      encoded.append({
          "input_word_ids": [self.tokenizer.cls_id, *ids[start:end],
                             self.tokenizer.sep_id] + [self.tokenizer.pad_id] * pad,
          "input_mask": [1] * (end - start + 2) + [0] * pad,
          "label_ids": [IGNORED, *first[start:end]] + [IGNORED] * (pad + 1),
          "piece_label_ids": [IGNORED, *every[start:end]] + [IGNORED] * (pad + 1),
          "word_index": [0, *word_index] + [0] * (pad + 1),
          "sentence_id": sentence_id})
    return encoded


def _features(encoded, seq):
  arrays = {name: np.array([w[name] for w in encoded], np.int64)
            for name in encoded[0]}
  arrays["input_type_ids"] = np.zeros([len(encoded), seq], np.int64)
  return arrays


def write_split(sentences, tags, encoder, path):
  """Writes one split's records and sentences file; returns the window count.

  Args:
    sentences: the split's Sentences.
    tags: per sentence, its tags in the task's scheme (or None).
    encoder: a SentenceEncoder.
    path: the record file.
  """
  writer = records.RecordWriter(path)
  try:
    pieces = encoder.word_pieces(sentences)
    batch = []
    for i, (words, sentence_tags) in enumerate(zip(pieces, tags)):
      batch += encoder.encode(i, words, sentence_tags)
      if len(batch) >= 4096:
        writer.write_batch(_features(batch, encoder.seq))
        batch = []
    if batch:
      writer.write_batch(_features(batch, encoder.seq))
    lines = []
    for sentence, sentence_tags in zip(sentences, tags):
      text, offsets = tagging_formats.text_and_offsets(sentence.tokens)
      lines.append(json.dumps({
          "tokens": sentence.tokens, "tags": sentence_tags, "text": text,
          "offsets": offsets, "document": sentence.document,
          "source": sentence.where(0)}, ensure_ascii=False) + "\n")
    fileio.write_text(sentences_path(path), "".join(lines))
    writer.commit()
  except BaseException:
    writer.abort()
    raise
  return writer.count


def _entity_types(splits, given, input_scheme):
  """Spans of every labelled sentence, and the entity types (given, or the
  training file's sorted); a type outside them is an error at its line."""
  spans = {}
  for name, sentences in splits:
    spans[name] = [None if s.tags is None else tag_schemes.read_spans(
        s.tags, input_scheme, s.where) for s in sentences]
  types = list(given) if given else sorted(
      {span.type for found in spans["train"] if found for span in found})
  for name, sentences in splits:
    for sentence, found in zip(sentences, spans[name]):
      for span in found or ():
        if span.type not in types:
          raise ValueError(f"{sentence.where(span.start)}: unknown entity "
                           f"type {span.type!r}; expected one of {types}")
  return spans, types


def _plain_tags(splits, given):
  """Tags without entities (POS): the tag names (given, or the training
  file's sorted); an unknown tag is an error at its line."""
  names = list(given) if given else sorted(
      {t for s in splits[0][1] for t in s.tags or ()})
  known = set(names)
  for _, sentences in splits:
    for sentence in sentences:
      for i, tag in enumerate(sentence.tags or ()):
        if tag not in known:
          raise ValueError(f"{sentence.where(i)}: unknown tag {tag!r}; "
                           f"expected one of {names}")
  return names


def _training_tags(splits, labels, scheme, input_scheme):
  """(label names, entity types, {split: [each sentence's tags in `scheme`,
  or None when unlabelled]}) of the read splits [(name, sentences)]."""
  if scheme == "NONE":
    tags = {name: [s.tags for s in sentences] for name, sentences in splits}
    return _plain_tags(splits, labels), [], tags
  spans, types = _entity_types(
      splits, labels, tag_schemes.check_scheme(input_scheme or scheme))
  tags = {name: [None if found is None else tag_schemes.write_tags(
      found, len(s.tokens), scheme) for s, found in zip(sentences, spans[name])]
      for name, sentences in splits}
  return tag_schemes.label_names(types, scheme), types, tags


def prepare_tagging(*, task_name, files, file_format, vocab_file, output_dir,
                    scheme="BIO", input_scheme=None, labels=None,
                    max_seq_length=128, doc_stride=None, do_lower_case=True,
                    max_position_embeddings=None, token_column=0,
                    tag_column=-1, tokenizer_family=None, keep_accents=False):
  """`bertexp prepare tagging`: tagged files -> TFRecords + `{task}_meta_data`.

  Args:
    task_name: the prefix of the output files.
    files: [(split, path)], "train" first (then e.g. "eval", "test").
    file_format: one of tagging_formats.FORMATS.
    vocab_file, do_lower_case: the WordPiece vocabulary (or a
      SentencePiece model, with tokenizer_family and keep_accents: see
      tokenization.load). Each word is tokenized alone, as the fast
      tokenizers read words (is_split_into_words; byte-level BPE with a
      space before it, run_ner's add_prefix_space).
    output_dir: where the records and the meta data go.
    scheme: the scheme the task trains in: BIO, BIOES, or NONE (plain tags
      such as POS: no entities, token accuracy only).
    input_scheme: the files' scheme (default: `scheme`; IOB1 for
      CoNLL-2003's original files). People's Daily is read as BIO.
    labels: entity types (or, with NONE, the tags) in order; default: those
      of the training file, sorted.
    max_seq_length: pieces per window, [CLS] and [SEP] included.
    doc_stride: pieces between the starts of a long sentence's windows
      (default: half a window).
    max_position_embeddings: the model's, to check max_seq_length against.
    token_column, tag_column: CoNLL columns (tag_column None: no tags).
  Returns:
    The meta data written.
  Raises:
    ValueError: bad arguments, or a bad line in a file (naming file:line).
  """
  scheme = "NONE" if scheme.upper() == "NONE" else tag_schemes.check_scheme(
      scheme, tag_schemes.TRAIN_SCHEMES)
  windows.check_lengths(max_seq_length, max_position_embeddings, None)
  doc_stride = doc_stride or max(1, (max_seq_length - 2) // 2)
  windows.check_lengths(max_seq_length, None, doc_stride)
  if file_format == "peoples_daily":
    input_scheme = "BIO"
  splits = [(name, tagging_formats.read(
      path, file_format, token_column=token_column, tag_column=tag_column))
      for name, path in files]
  if not splits or splits[0][0] != "train" or not splits[0][1]:
    raise ValueError(f"{files[0][1] if files else 'no files'}: the training "
                     "file has no sentences")
  label_names, types, tags = _training_tags(splits, labels, scheme,
                                            input_scheme)
  tokenizer = tokenizers.load(vocab_file, do_lower_case, tokenizer_family,
                               keep_accents)
  encoder = SentenceEncoder(tokenizer, label_names, scheme, max_seq_length,
                            doc_stride)
  fileio.makedirs(output_dir)
  sizes, sentence_counts, split_long = {}, {}, {}
  with fileio.removed_on_failure(
      lambda path: [sentences_path(path)]) as written:
    for name, sentences in splits:
      path = fileio.join(output_dir, f"{task_name}_{name}.tf_record")
      written.append(path)
      encoder.windows_split = 0
      sizes[name] = write_split(sentences, tags[name], encoder, path)
      sentence_counts[name] = len(sentences)
      split_long[name] = encoder.windows_split
      logging.info("%s: %d sentences -> %d windows (%d sentences split)",
                   path, len(sentences), sizes[name], split_long[name])
    meta = {
        "task": task_name, "task_type": "tagging",
        "max_seq_length": max_seq_length, "doc_stride": doc_stride,
        "scheme": scheme, "entity_types": types,
        "label_names": label_names, "num_labels": len(label_names),
        "label_type": "int", "num_text_features": 1,
        "train_data_size": sizes["train"], "split_sizes": sizes,
        "sentence_counts": sentence_counts,
        "sentences_split_into_windows": split_long,
        "labelled_splits": [n for n, s in splits if s and s[0].tags is not None],
        "do_lower_case": do_lower_case, "vocab_file": vocab_file,
        "vocab_sha256": fileio.sha256(vocab_file),
        "vocab_size": len(tokenizer.vocab),
        **tokenization.meta_fields(tokenizer_family, keep_accents),
    }
    fileio.write_json(fileio.join(output_dir, f"{task_name}_meta_data"), meta)
  return meta
