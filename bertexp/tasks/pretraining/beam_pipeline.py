"""`bertexp prepare pretraining --runner=beam`: the same records as the
in-process path, written by an Apache Beam pipeline in ordered shards.

    input files --scan each file--> (file, chunk, byte range) of its chunks
        --reshuffle--> each chunk's bytes read, its instances written to a
        temporary TFRecord file per chunk (any worker, any order)
        --all chunk files, in (file, chunk) order--> shards: consecutive
        chunk files concatenated (TFRecord files concatenate byte for byte)

A chunk's instances depend only on its text and its (file, chunk) place
(bertexp.tasks.pretraining.data.chunk_seed), so the shards, concatenated in
shard order, are byte for byte the file the in-process path writes, whatever
the runner or the number of workers. Everything is written under a temporary
folder beside the output; only when the pipeline has succeeded are the
shards renamed to OUTPUT-00000-of-0000N (older shards of OUTPUT removed) and
the meta data written, last: it lists the shards and their instance counts.
"""
import io
import logging
import math
import os
import time
import uuid

import tensorflow as tf

from bertexp.data import pipeline as data_pipeline
from bertexp.tasks.pretraining import data
from bertexp.util import beam_io
from bertexp.util import fileio

# Default shard size when --num_shards is not given (records, not text).
SHARD_BYTES = 256 << 20
_COPY_BLOCK = 16 << 20


def _find_chunks(element, chunk_bytes):
  """(file index, path) -> (file index, chunk index, path, first byte, end
  byte) of each chunk of that file: only places go through the shuffle,
  and the worker that builds a chunk's instances reads its bytes itself."""
  file_index, path = element
  start = 0
  try:
    with beam_io.open_input(path) as stream:
      for chunk_index, (_, end) in enumerate(
          data.file_chunks(path, stream, chunk_bytes)):
        yield file_index, chunk_index, path, start, end
        start = end
  except ValueError as e:
    raise beam_io.as_input_error(e) from e


def _read_chunk(path, start, end):
  """The documents of bytes [start, end) of `path` (one chunk)."""
  with beam_io.open_input(path) as stream:
    stream.seek(start)
    raw = stream.read(end - start)
  if len(raw) != end - start:
    raise beam_io.InputError(f"{path}: changed while being read (bytes "
                             f"{start}-{end} gave {len(raw)})")
  chunks = list(data.file_chunks(path, io.BytesIO(raw), math.inf))
  return chunks[0][0]


class _WriteChunk:
  """Builds one chunk's instances and writes them to a temporary file."""

  def __init__(self, options, temp_dir):
    self.options, self.temp_dir = options, temp_dir
    self.worker = None

  def __call__(self, element):
    file_index, chunk_index, path, start, end = element
    if self.worker is None:          # once per worker process
      self.worker = data.ChunkWorker(self.options)
    chunk = _read_chunk(path, start, end)
    seed = data.chunk_seed(self.options.random_seed, file_index, chunk_index)
    examples, counts = self.worker.process(chunk, seed)
    path = None
    if examples:
      path = f"{self.temp_dir}/chunk-{file_index:06d}-{chunk_index:06d}.tfrecord"
      with tf.io.TFRecordWriter(path) as writer:
        for record in examples:
          writer.write(record)
    return {"file": file_index, "chunk": chunk_index, "path": path,
            "instances": len(examples), "bytes": tf.io.gfile.stat(path).length
            if path else 0, "counts": counts}


def shard_plan(chunks, num_shards):
  """Consecutive runs of the written chunks, one per shard, of about equal
  bytes; never an empty shard.

  Args:
    chunks: dicts with "file", "chunk", "path", "instances", "bytes".
    num_shards: wanted shards; 0 = one per SHARD_BYTES of records.

  Returns:
    [[chunk dicts of shard 0], [of shard 1], ...] in (file, chunk) order.
  """
  written = sorted((c for c in chunks if c["instances"]),
                   key=lambda c: (c["file"], c["chunk"]))
  total = sum(c["bytes"] for c in written)
  if not num_shards:
    num_shards = max(1, -(-total // SHARD_BYTES))
  num_shards = min(num_shards, len(written))
  if num_shards < 1:
    return []
  starts, offset = [], 0
  for chunk in written:
    starts.append(offset)
    offset += chunk["bytes"]
  bounds = [0]
  for k in range(1, num_shards):
    target = total * k / num_shards
    index = next((i for i, s in enumerate(starts) if s >= target), len(written))
    # Strictly after the previous bound, and leaving a chunk per later shard.
    index = min(max(index, bounds[-1] + 1), len(written) - (num_shards - k))
    bounds.append(index)
  bounds.append(len(written))
  return [written[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _write_shard(element, temp_dir):
  """(shard index, shard count, chunk paths) -> the chunk files concatenated
  into temp_dir/shard-xxxxx-of-N."""
  index, count, paths = element
  target = data_pipeline.shard_name(f"{temp_dir}/shard", index, count)
  with tf.io.gfile.GFile(target, "wb") as out:
    for path in paths:
      with tf.io.gfile.GFile(path, "rb") as part:
        while True:
          block = part.read(_COPY_BLOCK)
          if not block:
            break
          out.write(block)


def _planned_shards(chunks, num_shards):
  """(shard index, shard count, chunk paths) of each shard."""
  plan = shard_plan(chunks, num_shards)
  for index, shard in enumerate(plan):
    yield index, len(plan), [c["path"] for c in shard]


def _build(pipeline, beam, files, options, temp_dir, chunk_bytes, num_shards):
  """The pipeline: every chunk's instances in a temporary file, the chunk
  table (file, chunk, path, instances, bytes, counts) in
  temp_dir/chunks.json, and the shards in temp_dir."""
  def write_table(rows):
    fileio.write_json(f"{temp_dir}/chunks.json", rows)
  table = (pipeline
           | "Files" >> beam.Create(list(enumerate(files)))
           | "FindChunks" >> beam.FlatMap(_find_chunks, chunk_bytes)
           | "SpreadChunks" >> beam.Reshuffle()
           | "Instances" >> beam.Map(_WriteChunk(options, temp_dir))
           | "Table" >> beam.combiners.ToList())
  _ = table | "WriteTable" >> beam.Map(write_table)
  _ = (table
       | "Plan" >> beam.FlatMap(_planned_shards, num_shards)
       | "SpreadShards" >> beam.Reshuffle()
       | "Concatenate" >> beam.Map(_write_shard, temp_dir))


def _publish(count, output_file, temp_dir):
  """Replaces OUTPUT's shards by the `count` new ones; returns their names."""
  for old in tf.io.gfile.glob(f"{output_file}-[0-9]*-of-[0-9]*"):
    tf.io.gfile.remove(old)
  names = []
  for index in range(count):
    target = data_pipeline.shard_name(output_file, index, count)
    tf.io.gfile.rename(data_pipeline.shard_name(f"{temp_dir}/shard", index, count),
                       target, overwrite=True)
    names.append(target)
  return names


def prepare_pretraining_beam(*, input_files, output_file, options,
                             beam_options="", num_shards=0,
                             chunk_bytes=1 << 20):
  """Writes OUTPUT-xxxxx-of-N shards and OUTPUT's `_meta_data` with Beam.

  Args:
    input_files: comma-separated globs (any Beam file system).
    output_file: the shards' prefix (a TensorFlow-writable path).
    options: a data.Options.
    beam_options: Beam's pipeline flags in one string.
    num_shards: shards to write (0: one per ~256 MB of records; never more
      than the chunks written).
    chunk_bytes: as the in-process path's (the output depends on it).

  Returns:
    The meta data (dict), also written to data.meta_path(output_file).

  Raises:
    ValueError: bad options or input (the file and line named), or no
      instance at all; nothing is left at OUTPUT then.
  """
  beam = beam_io.require_beam()
  options.check()
  # The tokenizer's and segmenter's errors here, before the pipeline runs.
  vocab_size = data.ChunkWorker(options).vocab_size
  files = beam_io.match_files(input_files)
  if "://" not in output_file:    # workers may start in another folder
    output_file = os.path.abspath(output_file)
  start = time.time()
  parent = os.path.dirname(output_file)
  if parent:
    tf.io.gfile.makedirs(parent)
  temp_dir = f"{output_file}.tmp-{uuid.uuid4().hex[:8]}"
  tf.io.gfile.makedirs(temp_dir)
  try:
    pipeline = beam.Pipeline(options=beam_io.pipeline_options(beam_options))
    _build(pipeline, beam, files, options, temp_dir, chunk_bytes, num_shards)
    beam_io.run(pipeline)
    chunks = fileio.read_json(f"{temp_dir}/chunks.json")
    data.check_instances(sum(c["instances"] for c in chunks), input_files)
    counts = {}
    for chunk in sorted(chunks, key=lambda c: (c["file"], c["chunk"])):
      data.add_counts(counts, chunk["counts"])
    plan = shard_plan(chunks, num_shards)       # the pipeline's own plan
    names = _publish(len(plan), output_file, temp_dir)
  finally:
    tf.io.gfile.rmtree(temp_dir)
  shards = [{"file": os.path.basename(name),
             "instances": sum(c["instances"] for c in shard)}
            for name, shard in zip(names, plan)]
  meta = data.build_meta(
      options, files=files, input_bytes=sum(beam_io.file_sizes(files)),
      instances=sum(s["instances"] for s in shards), counts=counts,
      vocab_size=vocab_size, seconds=time.time() - start, runner="beam",
      beam_options=beam_options, chunk_bytes=chunk_bytes, num_shards=len(shards), shards=shards,
      train_data_pattern=data_pipeline.shard_pattern(output_file, len(shards)))
  fileio.write_json(data.meta_path(output_file), meta)
  logging.info("%s: %d instances in %d shards", output_file,
               meta["train_data_size"], len(shards))
  return meta
