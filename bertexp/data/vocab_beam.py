"""`bertexp build-vocab --runner=beam`: the words of the corpus counted by an
Apache Beam pipeline (each file read and split on a worker, the counts summed
per word across workers), then the same learner as the in-process path on
the driver: the same corpus gives the same vocabulary file.
"""
import collections
import json
import logging
import os
import uuid

import numpy as np
import tensorflow as tf

from bertexp.data import vocab
from bertexp.util import beam_io
from bertexp.util import fileio

_LINES_PER_BATCH = 4096


class _CountFile:
  """(path) -> (word, count) pairs of that file's words."""

  def __init__(self, do_lower_case):
    self.do_lower_case = do_lower_case
    self.split = None

  def __call__(self, path):
    if self.split is None:          # once per worker process
      self.split = vocab.WordSplitter(self.do_lower_case)
    counts = collections.Counter()
    for lines in self._batches(path):
      counts.update(np.asarray(self.split(tf.constant(lines))).tolist())
    return [(word.decode("utf-8"), count) for word, count in counts.items()]

  @staticmethod
  def _batches(path):
    """Lists of non-blank lines (bytes) of `path`.

    Raises:
      beam_io.InputError: a line is not UTF-8 (file and line named), or the
        file cannot be read.
    """
    batch = []
    with beam_io.open_input(path) as stream:
      for number, raw in enumerate(stream, 1):
        try:
          line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
          raise beam_io.InputError(
              f"{path}:{number}: not UTF-8 text ({e.reason})") from None
        if line.strip():
          batch.append(line.rstrip("\r\n").encode("utf-8"))
        if len(batch) == _LINES_PER_BATCH:
          yield batch
          batch = []
    if batch:
      yield batch


def count_words_beam(input_files, temp_prefix, do_lower_case=True,
                     beam_options=""):
  """{word: count} of the files matched by `input_files` (any Beam file
  system), counted by a Beam pipeline run with `beam_options`.

  Args:
    input_files: comma-separated globs.
    temp_prefix: where the workers write their counts (a folder made and
      removed here; remote runners need a path every worker can write,
      e.g. beside the output).
    do_lower_case: as the tokenizer.
    beam_options: Beam's pipeline flags in one string.

  Returns:
    A collections.Counter of words (str).

  Raises:
    ValueError: bad input (file and line named) or no word at all.
    FileNotFoundError: a pattern matches no file.
  """
  beam = beam_io.require_beam()
  files = beam_io.match_files(input_files)
  if "://" not in temp_prefix:    # workers may start in another folder
    temp_prefix = os.path.abspath(temp_prefix)
  temp = f"{temp_prefix}.tmp-{uuid.uuid4().hex[:8]}"
  tf.io.gfile.makedirs(temp)
  try:
    pipeline = beam.Pipeline(options=beam_io.pipeline_options(beam_options))
    _ = (pipeline
         | "Files" >> beam.Create(files)
         | "Spread" >> beam.Reshuffle()
         | "CountFile" >> beam.FlatMap(_CountFile(do_lower_case))
         | "Sum" >> beam.CombinePerKey(sum)
         | "Json" >> beam.Map(json.dumps)
         | "Write" >> beam.io.WriteToText(f"{temp}/counts"))
    beam_io.run(pipeline)
    counts = collections.Counter()
    for path in sorted(tf.io.gfile.glob(f"{temp}/counts*")):
      for line in fileio.read_text(path).splitlines():
        word, count = json.loads(line)
        counts[word] += count
  finally:
    tf.io.gfile.rmtree(temp)
  if not counts:
    raise ValueError(f"{input_files}: no text to learn a vocabulary from")
  logging.info("beam counted %d distinct words in %d files", len(counts),
               len(files))
  return counts


def build_vocab_beam(input_files, vocab_size, output, *, do_lower_case=True,
                     chinese=False, beam_options=""):
  """`build-vocab --runner=beam`: the words counted by Beam (workers write
  their counts beside `output`), the vocabulary learned here and written to
  `output` as vocab.build_vocab writes it; returns it.

  Raises:
    ValueError: no word, bad input, or a vocab_size too small.
    FileNotFoundError: a pattern matches no file.
  """
  vocab.check_size(vocab_size)
  counts = count_words_beam(input_files, output, do_lower_case=do_lower_case,
                            beam_options=beam_options)
  return vocab.learn_vocab(counts, vocab_size, output, chinese=chinese)
