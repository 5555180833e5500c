"""`bertexp build-vocab` and `prepare pretraining` with `--runner=beam`
(Apache Beam's local FnApiRunner, in-process and on 2 worker processes)
against the in-process path, on real Chinese and English text: the same
bytes, the same vocabulary, clear errors and nothing half-written; Beam's
Prism runner (a binary fetched from GitHub at run time) never started."""
import json
import os

import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.data import pipeline
from bertexp.util import demo_data

TWO_WORKERS = ("--direct_num_workers=2 --direct_running_mode=multi_processing")
ENGINES = {"1 worker": "--direct_num_workers=1",
           "2 processes": TWO_WORKERS}


@pytest.fixture(autouse=True)
def prism_never_started(monkeypatch):
  """Fails a test whose pipeline went to Beam's Prism runner (Beam's
  DirectRunner tries it first and falls back in silence when it fails)."""
  from apache_beam.runners.portability import prism_runner
  started = []

  def refuse(self, *args, **kwargs):
    started.append(type(self).__name__)
    raise RuntimeError("the Prism runner was started")
  monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", refuse)
  yield
  assert not started, "a pipeline went to Beam's Prism runner"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """Three files of real text (People's Daily 1998 and movie review
  sentences): one sentence per line, a blank line between documents."""
  folder = tmp_path_factory.mktemp("corpus")
  people = [line for line in demo_data.people_daily_lines() if line.strip()]
  people = ["".join(token.rsplit("/", 1)[0] for token in line.split())
            for line in people[:600]]
  reviews = [text for text, _ in demo_data.read_movie_reviews()][:750]

  def write(name, lines, per_document):
    documents = [lines[i:i + per_document] for i in range(0, len(lines), per_document)]
    (folder / name).write_text("\n\n".join("\n".join(d) for d in documents) + "\n",
                               encoding="utf-8")
  write("a_people_daily.txt", people, 9)
  write("b_reviews.txt", reviews, 12)
  write("c_mixed.txt", people[:50] + reviews[:50], 7)
  return folder


@pytest.fixture(scope="module")
def vocab(corpus, tmp_path_factory):
  """The corpus's own WordPiece vocabulary (in-process build-vocab)."""
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  assert cli.main(["build-vocab", f"--input_file={corpus}/*.txt",
                   "--vocab_size=3000", "--chinese", f"--output={path}"]) == 0
  return path


def _prepare(corpus, vocab, output, *extra):
  """Many chunks per file (16 kB each) and 2 passes of whole-word masking
  with jieba."""
  return cli.main(["prepare", "pretraining", f"--input_file={corpus}/*.txt",
                   f"--output_file={output}", f"--vocab_file={vocab}",
                   "--chunk_bytes=16384",
                   "--max_seq_length=64", "--max_predictions_per_seq=10",
                   "--dupe_factor=2", "--do_whole_word_mask",
                   "--chinese_word_segmenter=jieba", "--random_seed=3", *extra])


@pytest.fixture(scope="module")
def in_process(corpus, vocab, tmp_path_factory):
  """The in-process path's file and meta data (1 process)."""
  out = tmp_path_factory.mktemp("direct") / "pre.tfrecord"
  assert _prepare(corpus, vocab, out, "--num_workers=1") == 0
  return out.read_bytes(), json.loads((out.parent / "pre_meta_data").read_text())


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_beam_shards_concatenate_to_the_in_process_file(
    corpus, vocab, in_process, tmp_path, engine):
  records, direct_meta = in_process
  out = tmp_path / "pre.tfrecord"
  (tmp_path / "pre.tfrecord-00000-of-00007").write_bytes(b"an older run's shard")
  assert _prepare(corpus, vocab, out, "--runner=beam", "--num_shards=4",
                  f"--beam_options={ENGINES[engine]}") == 0
  shards = [out.parent / f"pre.tfrecord-{i:05d}-of-00004" for i in range(4)]
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
      [p.name for p in shards] + ["pre_meta_data"])  # no temp, no old shard
  assert b"".join(p.read_bytes() for p in shards) == records
  meta = json.loads((tmp_path / "pre_meta_data").read_text())
  assert meta["num_shards"] == 4 and meta["runner"] == "beam"
  assert meta["beam_options"] == ENGINES[engine]
  for shard, path in zip(meta["shards"], shards):
    assert shard["file"] == path.name and shard["instances"] == sum(
        1 for _ in tf.data.TFRecordDataset(str(path))) > 0
  assert meta["train_data_size"] == direct_meta["train_data_size"] > 500
  for key in ("documents", "lines", "tokens", "masked", "random_next",
              "unknown_tokens", "input_bytes", "masked_fraction"):
    assert meta[key] == direct_meta[key], key
  assert pipeline.list_files(meta["train_data_pattern"]) == [str(p) for p in shards]


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_beam_vocabulary_equals_the_in_process_one(corpus, vocab, tmp_path,
                                                   engine):
  assert cli.main(["build-vocab", f"--input_file={corpus}/*.txt",
                   "--vocab_size=3000", "--chinese", "--runner=beam",
                   f"--output={tmp_path}/beam.txt",
                   f"--beam_options={ENGINES[engine]}"]) == 0
  direct = vocab.read_text()
  assert (tmp_path / "beam.txt").read_text() == direct
  tokens = direct.split()
  assert "的" in tokens and "##e" in tokens and len(tokens) > 1000
  assert sorted(p.name for p in tmp_path.iterdir()) == ["beam.txt"]


@pytest.mark.parametrize("damage,message,engine", [
    ("undecodable", "c_mixed.txt:4: not UTF-8 text", "2 processes"),
    ("empty", "d_empty.txt: no text", "1 worker"),
    ("dangling link", "e_gone.txt: cannot be read", "1 worker"),
])
def test_damaged_input_is_named_and_old_output_stays(
    corpus, vocab, tmp_path, capsys, damage, message, engine):
  """The worker's error (in this process, or another one) is one line."""
  broken = tmp_path / "corpus"
  broken.mkdir()
  for path in corpus.iterdir():        # the first 40 lines of each file
    (broken / path.name).write_bytes(
        b"\n".join(path.read_bytes().split(b"\n")[:40]))
  if damage == "undecodable":
    lines = (broken / "c_mixed.txt").read_bytes().split(b"\n")
    lines[3] = lines[3][:5] + b"\xff\xfe" + lines[3][5:]
    (broken / "c_mixed.txt").write_bytes(b"\n".join(lines))
  elif damage == "empty":
    (broken / "d_empty.txt").write_text("\n  \n")
  else:
    (broken / "e_gone.txt").symlink_to(tmp_path / "deleted.txt")
  (broken / "f_folder.txt").mkdir()      # a folder is no input file
  out = tmp_path / "out" / "pre.tfrecord"
  out.parent.mkdir()
  old = {out.parent / "pre.tfrecord-00000-of-00001": b"old records",
         out.parent / "pre_meta_data": b"{}"}
  for path, content in old.items():
    path.write_bytes(content)
  for runner in ("beam", "direct"):
    assert _prepare(broken, vocab, out, f"--runner={runner}",
                    f"--beam_options={ENGINES[engine]}") == 2
    error = capsys.readouterr().err
    last = error.strip().splitlines()[-1]       # after progress lines
    assert last.startswith("bertexp: error: ") and message in last, (runner, error)
    assert "Traceback" not in error and "bertexp input error" not in error
    assert "while running" not in last
    assert {p: p.read_bytes() for p in out.parent.iterdir()} == old, runner


def test_a_vocabulary_without_mask_is_refused_before_the_pipeline_runs(
    corpus, tmp_path, capsys):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
  assert _prepare(corpus, vocab, tmp_path / "out" / "pre.tfrecord",
                  "--runner=beam") == 2
  last = capsys.readouterr().err.strip().splitlines()[-1]
  assert "no [MASK] token" in last and str(vocab) in last
  assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_incomplete_shard_set_is_refused_by_training_input(tmp_path):
  for i in (0, 1, 3):
    with tf.io.TFRecordWriter(str(tmp_path / f"pre.tfrecord-{i:05d}-of-00004")) as w:
      w.write(b"x")
  with pytest.raises(FileNotFoundError, match="1 of its 4 shards are missing "
                     r"\(first: .*pre.tfrecord-00002-of-00004\)"):
    pipeline.list_files(f"{tmp_path}/pre.tfrecord-*")
  with tf.io.TFRecordWriter(str(tmp_path / "pre.tfrecord-00002-of-00004")) as w:
    w.write(b"x")
  assert len(pipeline.list_files(f"{tmp_path}/pre.tfrecord-*")) == 4


def test_a_file_beam_cannot_open_is_named(tmp_path):
  from bertexp.tasks.pretraining import beam_pipeline
  from bertexp.util import beam_io
  with pytest.raises(beam_io.InputError, match=f"{tmp_path}: cannot be read"):
    list(beam_pipeline._find_chunks((0, str(tmp_path)), 1024))
