"""`make bench`: `bertexp prepare pretraining` on one corpus, in-process and
as an Apache Beam pipeline on its local runner (1 worker in this process, 2
worker processes), with MB/s, the ratios, the CPU, and whether every
output is byte for byte the in-process file.

    python tools/bench_beam.py [--megabytes 64] [--small_megabytes 4] [--files 8]

The corpus: documents of 10-30 real movie-review sentences (the demo's
snippets), reshuffled until it reaches --megabytes, in --files files (and
a --small_megabytes corpus, to tell the start-up from the rate); the
demo's MiniLM vocabulary, whole-word masking, 128 tokens, dupe_factor 1.
"""
import argparse
import glob
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bertexp.util import machine  # noqa: E402

VOCAB = os.path.join(REPO, ".cache", "minilm_l6", "vocab.txt")
BEAM_RUNS = {"beam, 1 worker": "--direct_num_workers=1",
             "beam, 2 processes": "--direct_num_workers=2 "
                                  "--direct_running_mode=multi_processing"}


def _corpus(folder, megabytes, files):
  """`files` files of documents of real sentences, `megabytes` in all."""
  import numpy as np
  from bertexp.util import demo_data
  sentences = [s for s, _ in demo_data.read_movie_reviews()]
  rng = np.random.RandomState(0)
  per_file = megabytes * 1e6 / files
  for index in range(files):
    written = 0
    with open(os.path.join(folder, f"part-{index:03d}.txt"), "w") as f:
      while written < per_file:
        order = rng.permutation(len(sentences))
        for start in range(0, len(order), 20):
          text = "\n".join(sentences[i] for i in order[start:start + rng.randint(10, 31)])
          f.write(text + "\n\n")
          written += len(text.encode()) + 2
          if written >= per_file:
            break


def _runs(tmp, pattern, options):
  """{engine: (seconds, output bytes)} on the corpus of `pattern`."""
  from bertexp.tasks.pretraining import beam_pipeline
  from bertexp.tasks.pretraining import data as pretraining
  results = {}
  for workers in (1, 2):
    label = f"in-process, {workers} process{'es' if workers > 1 else ''}"
    out = os.path.join(tmp, f"direct{workers}.tfrecord")
    start = time.perf_counter()
    pretraining.prepare_pretraining(input_files=pattern, output_file=out,
                                    options=options, num_workers=workers,
                                    progress=False)
    results[label] = (time.perf_counter() - start, open(out, "rb").read())
  for label, beam_options in BEAM_RUNS.items():
    out = os.path.join(tmp, label.replace(" ", "").replace(",", "_"), "pre.tfrecord")
    start = time.perf_counter()
    beam_pipeline.prepare_pretraining_beam(
        input_files=pattern, output_file=out, options=options,
        beam_options=beam_options, num_shards=4)
    results[label] = (time.perf_counter() - start, b"".join(
        open(p, "rb").read() for p in sorted(glob.glob(out + "-*-of-*"))))
  return results


def _measure(tmp, name, megabytes, files, options):
  """Runs every engine on a corpus of `megabytes`; returns (corpus bytes,
  {engine: seconds}, every output equal to the in-process file)."""
  corpus = os.path.join(tmp, name)
  os.makedirs(corpus)
  _corpus(corpus, megabytes, files)
  pattern = os.path.join(corpus, "*.txt")
  size = sum(os.path.getsize(p) for p in glob.glob(pattern))
  results = _runs(tmp, pattern, options)
  reference = results["in-process, 1 process"][1]
  for label, (seconds, _) in results.items():
    print(f"prepare pretraining, {size / 1e6:.0f} MB in {files} files, "
          f"{label}: {seconds:.1f} s = {size / 1e6 / seconds:.2f} MB/s",
          flush=True)
  return size, {k: v[0] for k, v in results.items()}, all(
      v[1] == reference for v in results.values())


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
  parser.add_argument("--megabytes", type=float, default=64)
  parser.add_argument("--small_megabytes", type=float, default=4)
  parser.add_argument("--files", type=int, default=8)
  args = parser.parse_args()
  from bertexp.tasks.pretraining import data as pretraining
  print(machine.cpu_line(), flush=True)
  options = pretraining.Options(vocab_file=VOCAB, max_seq_length=128,
                                max_predictions_per_seq=20, dupe_factor=1,
                                do_whole_word_mask=True)
  with tempfile.TemporaryDirectory() as tmp:
    small, small_seconds, small_same = _measure(
        tmp + "/s", "corpus", args.small_megabytes, args.files, options)
    large, seconds, same = _measure(tmp + "/l", "corpus", args.megabytes,
                                    args.files, options)
  # Per MB past the start-up (worker processes importing TensorFlow): the
  # time a larger corpus adds, from the two corpora.
  marginal = {k: (large - small) / 1e6 / (seconds[k] - small_seconds[k])
              for k in seconds}
  for label, rate in marginal.items():
    print(f"prepare pretraining, {label}: {rate:.2f} MB/s past start-up "
          f"(start-up {small_seconds[label] - small / 1e6 / rate:.1f} s)",
          flush=True)
  one, two = seconds["beam, 1 worker"], seconds["beam, 2 processes"]
  direct = seconds["in-process, 1 process"]
  print(f"beam 1 worker / in-process 1 process: {one / direct:.2f}x the time "
        f"(goal <= 1.5x); beam 2 processes / 1 worker: {one / two:.2f}x the "
        f"speed on {large / 1e6:.0f} MB, {marginal['beam, 2 processes'] / marginal['beam, 1 worker']:.2f}x past start-up (goal >= 1.6x); "
        f"in-process 2 processes / 1: {direct / seconds['in-process, 2 processes']:.2f}x; "
        f"every output byte-identical to the in-process file: {same and small_same}",
        flush=True)


if __name__ == "__main__":
  main()
