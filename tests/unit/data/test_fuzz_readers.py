"""Hostile input, generated (hypothesis): every reader either reads the file
or raises bertexp's own clear error (ValueError / FileNotFoundError naming
the file) — never another exception, never a half-written output."""
import atexit
import json
import os
import shutil
import tempfile

import gin
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from bertexp.data import readers
from bertexp.data import tokenization
from bertexp.gin_setup import parse_gin
from bertexp.model import modeling
from bertexp.tasks.pretraining import data as pretraining
from bertexp.tasks.squad import data as squad
from bertexp.tasks.squad import scoring as squad_scoring
from conftest import REPO

# FUZZ_EXAMPLES=2000 pytest tests/unit/data/test_fuzz_readers.py: a longer hunt (default 120).
# The inputs are derived from each test's name (derandomize), so every run
# draws the same ones and a failure replays as it is. FUZZ_RANDOM=1 draws
# new ones each run; a failure then prints the @reproduce_failure line that
# replays it (print_blob).
DRAWS = dict(derandomize=not os.environ.get("FUZZ_RANDOM"), print_blob=True,
             deadline=None, database=None,
             suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 120)),
                **DRAWS)
COUNTS = {}   # reader -> generated inputs (printed after the module, -s)


@pytest.fixture(autouse=True, scope="module")
def report_counts():
  yield
  print("\nfuzzed inputs per reader:", json.dumps(COUNTS, sort_keys=True))

# Text with the characters that break readers: separators, quotes, line
# ends of every kind, a BOM, NUL, surrogate-free unicode.
TRICKY = st.sampled_from(["\t", ",", '"', "'", "\n", "\r", "\r\n", "\u2028",
                          "\ufeff", "\x00", "{", "}", "[", "]", ":", "nan",
                          "inf", "-1", "1e400", " ", "label", "sentence"])
TEXT = st.lists(st.one_of(TRICKY, st.text(max_size=8)), max_size=30).map("".join)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 10**6) |
    st.floats(allow_nan=True) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) |
    st.dictionaries(st.sampled_from(
        ["data", "paragraphs", "context", "qas", "id", "question", "answers",
         "text", "answer_start", "is_impossible", "version", "x"]), inner,
        max_size=5), max_leaves=25)


def _squad_like():
  """Structurally plausible SQuAD files with any field broken."""
  answer = st.fixed_dictionaries({}, optional={
      "text": JSON_VALUES | st.text(max_size=10),
      "answer_start": JSON_VALUES | st.integers(-3, 40)})
  qa = st.fixed_dictionaries({}, optional={
      "id": JSON_VALUES | st.text(max_size=5), "question": JSON_VALUES | TEXT,
      "answers": st.lists(answer, max_size=2) | JSON_VALUES,
      "is_impossible": JSON_VALUES})
  paragraph = st.fixed_dictionaries({}, optional={
      "context": TEXT | JSON_VALUES, "qas": st.lists(qa, max_size=3) | JSON_VALUES})
  article = st.fixed_dictionaries({}, optional={
      "paragraphs": st.lists(paragraph, max_size=3) | JSON_VALUES})
  return st.fixed_dictionaries({"data": st.lists(article, max_size=3) |
                                JSON_VALUES}) | JSON_VALUES


_FOLDER = tempfile.mkdtemp(prefix="bertexp_fuzz_")
atexit.register(shutil.rmtree, _FOLDER, True)       # not left in /tmp


def _file(content, suffix):
  """Writes one generated input (the next overwrites it)."""
  path = os.path.join(_FOLDER, f"input{len(COUNTS)}{suffix}")
  mode = "wb" if isinstance(content, bytes) else "w"
  with open(path, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
    f.write(content)
  return path


def _clear_error_or_result(reader, name, path, *args, **kwargs):
  """reader(path, ...) returns, or raises a ValueError/FileNotFoundError
  whose message names `path`; anything else fails the test."""
  COUNTS[name] = COUNTS.get(name, 0) + 1
  try:
    return reader(path, *args, **kwargs)
  except (ValueError, FileNotFoundError) as e:
    assert path in str(e) or os.path.basename(path) in str(e), (name, str(e))
    return None


def _utf8_or_bytes(text_strategy):
  return st.one_of(text_strategy, st.binary(max_size=200))


@FUZZ
@given(content=_utf8_or_bytes(TEXT), suffix=st.sampled_from([".tsv", ".csv"]),
       skip=st.booleans())
def test_tables(content, suffix, skip):
  path = _file(content, suffix)
  _clear_error_or_result(readers.read_table, "TSV/CSV table", path,
                         ["sentence"], "label", "id", skip_malformed_rows=skip)
  _clear_error_or_result(readers.read_table, "TSV/CSV table", path,
                         ["a", "b"], None, None, positions={"a": 0, "b": 3})


@FUZZ
@given(content=_utf8_or_bytes(st.lists(JSON_VALUES.map(json.dumps) | TEXT,
                                       max_size=6).map("\n".join)))
def test_jsonl(content):
  path = _file(content, ".jsonl")
  _clear_error_or_result(readers.read_jsonl, "JSONL", path,
                         ["sentence", "b"], "label", "id")


@FUZZ
@given(content=_utf8_or_bytes(TEXT), task=st.sampled_from(
    ["mnli", "mrpc", "cola", "sst2", "qqp", "stsb"]), labelled=st.booleans())
def test_glue_files(content, task, labelled):
  path = _file(content, ".tsv")
  _clear_error_or_result(
      lambda p: readers.read_glue(readers.glue_spec(task), p, labelled),
      "GLUE TSV", path)


@FUZZ
@given(data=_squad_like(), training=st.booleans(), v2=st.booleans())
def test_squad_json(data, training, v2):
  path = _file(json.dumps(data), ".json")
  _clear_error_or_result(squad.read_examples, "SQuAD JSON", path,
                         is_training=training, version_2_with_negative=v2)


@FUZZ
@given(dataset=_squad_like(), predictions=JSON_VALUES, odds=JSON_VALUES)
def test_squad_predictions_and_null_odds(dataset, predictions, odds):
  data = _file(json.dumps(dataset), ".json")
  preds = _file(json.dumps(predictions), ".json")
  null_odds = _file(json.dumps(odds), ".json")
  COUNTS["predictions + null odds JSON"] = COUNTS.get(
      "predictions + null odds JSON", 0) + 1
  try:
    squad_scoring.evaluate_files(data, preds, null_odds)
  except (ValueError, FileNotFoundError) as e:
    assert any(p in str(e) for p in (data, preds, null_odds)), str(e)


@FUZZ
@given(content=_utf8_or_bytes(st.lists(TEXT, max_size=12).map("\n".join)))
def test_vocab(content):
  path = _file(content, ".txt")
  _clear_error_or_result(tokenization.load_vocab, "vocab", path)


@FUZZ
@given(values=JSON_VALUES | st.dictionaries(st.sampled_from(
    list(modeling.BertConfig.__dataclass_fields__) + ["x"]), JSON_VALUES,
    max_size=12), raw=st.booleans(), text=TEXT)
def test_bert_config(values, raw, text):
  path = _file(text if raw else json.dumps(values), ".json")
  _clear_error_or_result(modeling.BertConfig.from_json_file, "bert_config.json",
                         path)


@FUZZ
@given(content=_utf8_or_bytes(st.lists(TEXT, max_size=20).map("\n".join)))
def test_pretraining_text(content):
  path = _file(content, ".txt")
  _clear_error_or_result(lambda p: list(pretraining.read_chunks([p], 64)),
                         "pretraining text", path)


@FUZZ
@given(values=JSON_VALUES | st.dictionaries(st.sampled_from(
    ["task", "max_seq_length", "num_labels", "label_type", "train_data_size",
     "split_sizes", "label_names", "vocab_size"]), JSON_VALUES, max_size=8))
def test_meta_data(values):
  from bertexp.tasks.classification import task as classification
  path = _file(json.dumps(values), "_meta_data")
  _clear_error_or_result(
      lambda p: classification.ClassificationTask(
          bert_config_file="unused", meta_data_path=p), "meta data", path)


@FUZZ
@given(bindings=st.lists(TEXT | st.sampled_from(
    ["MODEL_DIR=runs/x", "LEARNING_RATE=", "TRAIN_STEPS=1e400", "a.b=c",
     "include 'x.gin'", "SEED=None"]), min_size=1, max_size=3))
def test_gin_bindings(bindings):
  """Each error names the binding at fault (gin's parse errors through
  ours), the macro that is left unset, or the file an include asks for."""
  COUNTS["gin bindings"] = COUNTS.get("gin bindings", 0) + 1
  gin.clear_config()
  try:
    parse_gin([os.path.join(REPO, "experiments/demo/movie_sentiment_cpu.gin")],
              ['MODEL_DIR="runs/fuzz"'] + bindings)
  except (ValueError, SyntaxError, FileNotFoundError) as e:
    named = [repr(b) for b in bindings] + ["MODEL_DIR", "x.gin"]
    assert any(n in str(e) for n in named), (bindings, str(e))
  finally:
    gin.clear_config()


@settings(max_examples=120, **DRAWS)
@given(train=_utf8_or_bytes(TEXT), regression=st.booleans(),
       good_eval=st.booleans())
def test_prepare_leaves_nothing_behind_on_bad_input(train, regression,
                                                    good_eval):
  from bertexp.tasks.classification import data as prepare
  from conftest import TINY_VOCAB
  vocab = _file("\n".join(TINY_VOCAB) + "\n", ".vocab")
  header = "sentence\tlabel\n"
  train_file = _file(train if isinstance(train, bytes) else header + train,
                     ".tsv")
  eval_file = _file(header + ("good movie\t1\n" if good_eval else "x\tnan\n"),
                    ".eval.tsv")
  output_dir = tempfile.mkdtemp(prefix="bertexp_fuzz_out_")
  COUNTS["prepare classification"] = COUNTS.get("prepare classification", 0) + 1
  try:
    prepare.prepare_classification(
        task_name="fuzz", train_file=train_file, eval_file=eval_file,
        text_columns=["sentence"], label_column="label", regression=regression,
        vocab_file=vocab, output_dir=output_dir, max_seq_length=16)
  except (ValueError, FileNotFoundError) as e:
    assert train_file in str(e) or eval_file in str(e) or "label" in str(e), e
    assert os.listdir(output_dir) == [], os.listdir(output_dir)
  finally:
    for name in os.listdir(output_dir):
      os.remove(os.path.join(output_dir, name))
    os.rmdir(output_dir)


def _best_checkpoint_folder(content):
  """A best_checkpoint/ folder holding the generated best_checkpoint.json
  and one real checkpoint, ckpt-3, it may or may not name."""
  import tensorflow as tf
  folder = os.path.join(_FOLDER, f"best{len(COUNTS)}")
  os.makedirs(folder, exist_ok=True)
  if not os.path.exists(os.path.join(folder, "ckpt-3.index")):
    tf.train.Checkpoint(v=tf.Variable([1.0])).write(
        os.path.join(folder, "ckpt-3"))
  mode = "wb" if isinstance(content, bytes) else "w"
  with open(os.path.join(folder, "best_checkpoint.json"), mode,
            **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
    f.write(content)
  return folder


@FUZZ
@given(content=_utf8_or_bytes(TEXT) | JSON_VALUES.map(json.dumps) |
       st.dictionaries(st.sampled_from(["checkpoint", "step", "metric"]),
                       JSON_VALUES | st.sampled_from(["ckpt-3", "ckpt-9", ""]),
                       max_size=3).map(json.dumps))
def test_best_checkpoint_json(content):
  """run_dir.resolve of a best_checkpoint/ folder: the prefix its JSON
  names, or an error naming the folder's JSON or the prefix."""
  from bertexp.checkpoints import run_dir
  folder = _best_checkpoint_folder(content)
  COUNTS["best_checkpoint.json"] = COUNTS.get("best_checkpoint.json", 0) + 1
  try:
    prefix = run_dir.resolve(folder)
  except (ValueError, FileNotFoundError) as e:
    assert folder in str(e), str(e)
    return
  assert prefix == os.path.join(folder, "ckpt-3")


@FUZZ
@given(content=_utf8_or_bytes(TEXT) | JSON_VALUES.map(json.dumps) |
       st.fixed_dictionaries({"files": st.dictionaries(
           st.sampled_from(["ckpt-1.index", "ckpt-1.data-00000-of-00001",
                            "other"]) | TEXT,
           JSON_VALUES | st.fixed_dictionaries(
               {"bytes": JSON_VALUES, "crc32": JSON_VALUES}), max_size=3)
       }).map(json.dumps))
def test_checkpoint_manifest(content):
  """A damaged or hostile ckpt-N.manifest.json: verified.problem names the
  file at fault (or finds the checkpoint intact); it never raises."""
  import tensorflow as tf
  from bertexp.checkpoints import verified
  folder = os.path.join(_FOLDER, f"manifest{len(COUNTS)}")
  os.makedirs(folder, exist_ok=True)
  prefix = os.path.join(folder, "ckpt-1")
  if not os.path.exists(prefix + ".index"):
    tf.train.Checkpoint(v=tf.Variable([1.0])).write(prefix)
  mode = "wb" if isinstance(content, bytes) else "w"
  with open(verified.manifest_path(prefix), mode,
            **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
    f.write(content)
  COUNTS["checkpoint manifest"] = COUNTS.get("checkpoint manifest", 0) + 1
  why = verified.problem(prefix)
  assert why is None or folder in why, why


def _safetensors_bytes():
  """Real safetensors files of random tensors, some cut short or with a
  byte changed, and arbitrary bytes."""
  from safetensors import numpy as st_numpy
  import numpy as np
  tensor = st.tuples(st.lists(st.integers(0, 3), max_size=3),
                     st.sampled_from(["float32", "float16", "int64"]))
  files = st.dictionaries(st.sampled_from(
      ["bert.embeddings.word_embeddings.weight", "pooler.dense.bias", "x"]),
                          tensor, max_size=3).map(lambda d: st_numpy.save(
      {k: np.zeros(shape, dtype) for k, (shape, dtype) in d.items()}))
  return st.one_of(st.binary(max_size=200), st.tuples(
      files, st.integers(0, 400), st.integers(0, 255)).map(
          lambda t: t[0][:t[1]] + bytes([t[2]]) + t[0][t[1] + 1:]), files)


@FUZZ
@given(content=_safetensors_bytes())
def test_safetensors(content):
  from bertexp.checkpoints import converters
  path = _file(content, ".safetensors")
  _clear_error_or_result(converters.read_safetensors, "safetensors", path)


@FUZZ
@given(values=JSON_VALUES | st.dictionaries(st.sampled_from(
    ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
     "intermediate_size", "hidden_act", "model_type",
     "position_embedding_type", "max_position_embeddings"]),
    JSON_VALUES | st.integers(-2, 64) | st.sampled_from(
        ["gelu", "relu", "absolute", "relative_key", "bert"]), max_size=9))
def test_hugging_face_config_json(values):
  from bertexp.checkpoints import converters
  path = _file(json.dumps(values), "_config.json")
  _clear_error_or_result(converters.hf_config, "Hugging Face config.json", path)


def _tfrecord_bytes():
  """TFRecord files of generated tf.train.Examples (any feature names,
  kinds and lengths), cut short or with a byte changed, and arbitrary bytes."""
  import tensorflow as tf
  values = st.lists(st.integers(-5, 40), max_size=20)
  feature = st.tuples(st.sampled_from(["int", "float", "bytes"]), values)

  def example(features):
    made = {}
    for name, (kind, vals) in features.items():
      if kind == "int":
        made[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=vals))
      elif kind == "float":
        made[name] = tf.train.Feature(float_list=tf.train.FloatList(value=vals))
      else:
        made[name] = tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[str(v).encode() for v in vals]))
    return tf.train.Example(features=tf.train.Features(
        feature=made)).SerializeToString()

  def records(examples):
    path = os.path.join(_FOLDER, "records.tmp")
    with tf.io.TFRecordWriter(path) as writer:
      for e in examples:
        writer.write(e)
    with open(path, "rb") as f:
      return f.read()

  examples = st.lists(st.dictionaries(st.sampled_from(
      ["input_ids", "input_mask", "segment_ids", "label_ids", "x"]), feature,
      max_size=5).map(example), max_size=3).map(records)
  return st.one_of(st.binary(max_size=200), examples, st.tuples(
      examples, st.integers(0, 300), st.integers(0, 255)).map(
          lambda t: t[0][:t[1]] + bytes([t[2]]) + t[0][t[1] + 1:]))


@FUZZ
@given(content=_tfrecord_bytes(), label_type=st.sampled_from(["int", "float"]))
def test_tfrecords(content, label_type):
  """The pre-training check of a training file: the records train, or an
  error names the file."""
  from bertexp.data import pipeline
  from bertexp.model import modeling
  config = modeling.BertConfig(vocab_size=30)
  path = _file(content, ".tf_record")
  _clear_error_or_result(
      lambda p: pipeline.check_training_files(
          p, pipeline.record_decoder(4, label_type), config=config,
          label_ranges={"label": (0, 2)}), "TFRecords", path)


META_FIELDS = ["task", "max_seq_length", "max_predictions_per_seq",
               "vocab_file", "train_data_size", "doc_stride",
               "max_query_length", "version_2_with_negative", "do_lower_case"]


@FUZZ
@given(values=JSON_VALUES | st.dictionaries(st.sampled_from(META_FIELDS),
                                            JSON_VALUES | st.sampled_from(
    ["pretraining", 16, 5, True]), max_size=9), v2=st.booleans())
def test_pretraining_and_squad_meta_data(values, v2):
  from bertexp.tasks.pretraining import task as pretraining_task
  from bertexp.tasks.squad import task as squad_task
  path = _file(json.dumps(values), "_meta_data")
  _clear_error_or_result(
      lambda p: pretraining_task.PretrainingTask(
          bert_config_file="unused", meta_data_path=p), "pretraining meta data",
      path)
  _clear_error_or_result(
      lambda p: squad_task.QuestionAnsweringTask(
          bert_config_file="unused", meta_data_path=p, vocab_file="unused",
          version_2_with_negative=v2), "SQuAD meta data", path)


@FUZZ
@given(body=TEXT | JSON_VALUES.map(lambda v: f"def grid():\n  return {v!r}\n")
       | st.lists(st.dictionaries(TEXT | st.sampled_from(
           ["LEARNING_RATE", "SEED", "lr"]), JSON_VALUES, max_size=3),
           max_size=3).map(lambda v: f"def grid():\n  return {v!r}\n"))
def test_sweep_grid_file(body):
  from bertexp.sweeps import grids
  path = _file(body, "_grid.py")
  _clear_error_or_result(grids.load_grid, "sweep grid file", path)


@FUZZ
@given(dataset=_squad_like(), nbest=JSON_VALUES | st.dictionaries(
    st.text(max_size=3), st.lists(st.dictionaries(
        st.sampled_from(["text", "probability"]), JSON_VALUES), max_size=2)),
       odds=JSON_VALUES)
def test_nbest_file(dataset, nbest, odds):
  """evaluate-squad --nbest_file: the n-best file, null odds and dataset
  are read and re-thresholded, or an error names the file at fault."""
  from bertexp.tasks.squad import squad_json
  files = {what: _file(json.dumps(value), f"_{what}.json") for what, value in
           (("dataset", dataset), ("n-best", nbest), ("null odds", odds))}
  COUNTS["n-best file"] = COUNTS.get("n-best file", 0) + 1
  try:
    squad_scoring.rethreshold(
        *(squad_json.load_json(files[w], w)
          for w in ("dataset", "n-best", "null odds")),
        nbest_file=files["n-best"], na_prob_file=files["null odds"])
  except ValueError as e:
    assert any(f in str(e) for f in files.values()), str(e)


TAG_TEXT = st.lists(st.one_of(TRICKY, st.sampled_from(
    ["B-PER", "I-PER", "E-LOC", "S-ORG", "O", "B-", "-X", "/nr", "/ns", "[",
     "]nt", "江", "/w", "  ", "-DOCSTART-", "# c", "1-2", "2.1", "\t_"]),
    st.text(max_size=6)), max_size=40).map("".join)


@settings(max_examples=150, **DRAWS)
@given(train=_utf8_or_bytes(TAG_TEXT), file_format=st.sampled_from(
    ["conll", "conllu", "jsonl", "peoples_daily"]),
       scheme=st.sampled_from(["BIO", "BIOES", "NONE"]),
       input_scheme=st.sampled_from([None, "IOB1"]))
def test_prepare_tagging_reads_or_names_the_line_and_leaves_nothing(
    train, file_format, scheme, input_scheme):
  from bertexp.tasks.tagging import data as tagging
  from conftest import TINY_VOCAB
  vocab = _file("\n".join(TINY_VOCAB) + "\n", ".vocab")
  train_file = _file(train, ".tagged")
  output_dir = tempfile.mkdtemp(prefix="bertexp_fuzz_out_")
  COUNTS["prepare tagging"] = COUNTS.get("prepare tagging", 0) + 1
  try:
    tagging.prepare_tagging(
        task_name="fuzz", files=[("train", train_file)],
        file_format=file_format, vocab_file=vocab, output_dir=output_dir,
        scheme=scheme, input_scheme=input_scheme, max_seq_length=8,
        doc_stride=2)
  except (ValueError, FileNotFoundError) as e:
    assert train_file in str(e), e
    assert os.listdir(output_dir) == [], os.listdir(output_dir)
  finally:
    for name in os.listdir(output_dir):
      os.remove(os.path.join(output_dir, name))
    os.rmdir(output_dir)


PAIR_FIELDS = st.sampled_from(["query", "positive", "negative", "doc", "text_a",
                               "text_b", "score", "id", "_id", "text", "title",
                               "query_id", "doc_id", "relevance", "qid"])
PAIR_ROWS = st.lists(st.dictionaries(PAIR_FIELDS, JSON_VALUES | TEXT,
                                     max_size=6), max_size=5)


def _pair_files():
  """JSONL rows of the embedding task's fields with any value, or any
  table / bytes, under each of its suffixes."""
  return st.tuples(
      _utf8_or_bytes(TEXT) |
      PAIR_ROWS.map(lambda rows: "".join(json.dumps(r) + "\n" for r in rows)),
      st.sampled_from([".jsonl", ".tsv", ".csv", ".txt"]))


@FUZZ
@given(file=_pair_files(), reader=st.sampled_from(
    ["pairs", "scored", "corpus", "qrels"]))
def test_embedding_pair_files(file, reader):
  from bertexp.tasks.embedding import data as pair_data
  content, suffix = file
  read = {"pairs": lambda p: pair_data.read_pairs(
              p, negative_columns=["negative"], positive_id_column="doc"),
          "scored": pair_data.read_scored,
          "corpus": lambda p: pair_data.read_texts(p, "document"),
          "qrels": pair_data.read_qrels}[reader]
  _clear_error_or_result(read, f"embedding {reader}", _file(content, suffix))
