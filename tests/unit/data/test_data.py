"""TFRecord writing, GLUE layouts, generic tables, bad input, the pipeline."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.data import pipeline
from bertexp.tasks.classification import data as prepare
from bertexp.data import records
from conftest import write_sst2_folder
from glue_layouts import GLUE_LAYOUTS


def test_fast_serialisation_parses_like_tf_example():
  rng = np.random.RandomState(0)
  ids = rng.randint(0, 40000, size=[5, 9])
  ids[0, 0] = 2 ** 40      # a 6-byte varint
  labels = np.array([0, 1, -1, 5, 127])        # -1 is a 10-byte varint
  scores = rng.randn(5).astype(np.float32)
  serialised = records.serialize_examples(
      {"ids": ids, "label": labels, "score": scores})
  parsed = tf.io.parse_example(tf.constant(serialised), {
      "ids": tf.io.FixedLenFeature([9], tf.int64),
      "label": tf.io.FixedLenFeature([], tf.int64),
      "score": tf.io.FixedLenFeature([], tf.float32)})
  np.testing.assert_array_equal(parsed["ids"].numpy(), ids)
  np.testing.assert_array_equal(parsed["label"].numpy(), labels)
  np.testing.assert_array_equal(parsed["score"].numpy(), scores)
  # Same message as the official proto builder (field order aside).
  reference = tf.train.Example()
  reference.ParseFromString(serialised[2])
  assert list(reference.features.feature["label"].int64_list.value) == [-1]


def _prepare_sst2(tmp_path, tiny_vocab, **kwargs):
  folder = write_sst2_folder(str(tmp_path / "SST-2"))
  out = str(tmp_path / "data")
  meta = prepare.prepare_glue("SST-2", input_dir=folder, vocab_file=tiny_vocab,
                              output_dir=out, max_seq_length=16, **kwargs)
  return folder, out, meta


def test_prepare_glue_sst2_files_and_meta(tmp_path, tiny_vocab):
  _, out, meta = _prepare_sst2(tmp_path, tiny_vocab)
  assert sorted(os.listdir(out)) == ["sst2_eval.tf_record", "sst2_meta_data",
                                     "sst2_test.tf_record", "sst2_train.tf_record"]
  on_disk = json.load(open(os.path.join(out, "sst2_meta_data")))
  assert on_disk == meta
  assert meta["train_data_size"] == 64 and meta["eval_data_size"] == 16
  assert meta["num_labels"] == 2 and meta["label_type"] == "int"
  assert meta["label_names"] == ["0", "1"] and meta["max_seq_length"] == 16
  assert meta["do_lower_case"] is True and len(meta["vocab_sha256"]) == 64
  ds = pipeline.make_dataset(os.path.join(out, "sst2_eval.tf_record"),
                             seq_length=16, label_type="int", batch_size=5,
                             is_training=False, num_examples=16)
  batches = list(ds)
  assert len(batches) == 4                     # 16 real + 4 padding rows
  weights = np.concatenate([f["example_weight"].numpy() for f, _ in batches])
  assert weights.sum() == 16 and weights[16:].sum() == 0
  first, labels = batches[0]
  assert first["input_word_ids"].dtype == tf.int32
  assert first["input_word_ids"][0, 0] == 2    # [CLS]
  assert labels.numpy()[:2].tolist() == [1, 1]


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)


@pytest.mark.parametrize("task", sorted(GLUE_LAYOUTS))
def test_every_glue_layout(tmp_path, tiny_vocab, task):
  files, expected = GLUE_LAYOUTS[task]
  folder = str(tmp_path / task)
  for name, text in files.items():
    _write(os.path.join(folder, name), text)
  out = str(tmp_path / "out")
  meta = prepare.prepare_glue(task, input_dir=folder, vocab_file=tiny_vocab,
                              output_dir=out, max_seq_length=12)
  name = meta["task"]
  parsed = next(iter(pipeline.make_dataset(
      os.path.join(out, f"{name}_train.tf_record"), seq_length=12,
      label_type=meta["label_type"], batch_size=len(expected),
      is_training=False, num_examples=len(expected))))
  np.testing.assert_allclose(parsed[1].numpy(), expected)
  if task == "MNLI":
    assert meta["split_sizes"] == {"train": 1, "eval": 1, "eval_mismatched": 1,
                                   "ax": 1}
  pair = task != "CoLA"
  assert bool(parsed[0]["input_type_ids"].numpy().sum()) == pair


def test_qqp_malformed_rows_are_skipped_and_counted(tmp_path, tiny_vocab,
                                                    caplog):
  """QQP's known defect: a question with a line break splits its row in two
  short rows. Skipped (as Model Garden does), counted in the meta data and
  logged with their lines; other GLUE tasks still stop on such a row."""
  header = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
  train = (header + "0\t1\t2\tthe movie\tthe film\t1\n"
           "1\t3\t4\tis it good\n"            # cut by a line break ...
           "and fun\tit is\t0\n"              # ... its other half
           "2\t5\t6\ta plot\tthe plot\t1\n")
  folder = tmp_path / "QQP"
  _write(str(folder / "train.tsv"), train)
  _write(str(folder / "dev.tsv"), header + "0\t1\t2\ta\tb\t0\n")
  with caplog.at_level("WARNING"):
    meta = prepare.prepare_glue("QQP", input_dir=str(folder),
                                vocab_file=tiny_vocab,
                                output_dir=str(tmp_path / "out"), max_seq_length=12)
  assert meta["split_sizes"]["train"] == 2
  assert meta["skipped_malformed_rows"] == {"train": 2}
  assert "skipped 2 malformed rows" in caplog.text and "[3, 4]" in caplog.text
  rte = tmp_path / "RTE"
  _write(str(rte / "train.tsv"), "index\tsentence1\tsentence2\tlabel\n0\ta\n")
  _write(str(rte / "dev.tsv"), "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n")
  with pytest.raises(ValueError, match="train.tsv:2: expected 4 columns"):
    prepare.prepare_glue("RTE", input_dir=str(rte), vocab_file=tiny_vocab,
                         output_dir=str(tmp_path / "out_rte"), max_seq_length=12)


def test_only_newline_ends_a_row(tmp_path, tiny_vocab):
  """U+2028, U+0085 and form feeds inside a sentence are text, as in
  google-research/bert's reader (Python's splitlines would cut the row)."""
  folder = tmp_path / "SST-2"
  rows = ["the movie\u2028was good\t1", "a dull\u0085film\t0",
          "not\x0cfun\t0"]
  _write(str(folder / "train.tsv"), "sentence\tlabel\n" + "\n".join(rows[:3]) + "\n")
  _write(str(folder / "dev.tsv"), "sentence\tlabel\r\nvery good\t1\r\n")
  meta = prepare.prepare_glue("SST-2", input_dir=str(folder),
                              vocab_file=tiny_vocab,
                              output_dir=str(tmp_path / "out"), max_seq_length=12)
  assert meta["split_sizes"] == {"train": 3, "eval": 1}


def _bad_case(tmp_path, tiny_vocab, train_text, **kwargs):
  train = tmp_path / "train.tsv"
  train.write_text(train_text)
  dev = tmp_path / "dev.tsv"
  dev.write_text("text\tlabel\nthe movie\tpos\n")
  out = tmp_path / "out"
  args = ["prepare", "classification", f"--train_file={train}",
          f"--eval_file={dev}", "--text_columns=text", "--label_column=label",
          f"--vocab_file={tiny_vocab}", f"--output_dir={out}",
          "--task_name=t"] + kwargs.get("extra", ["--labels=neg,pos"])
  return cli.main(args), out


@pytest.mark.parametrize("text,extra,message", [
    ("text\tlabel\nthe movie\tpos\ngood\tneg\textra\n", None,
     "train.tsv:3: expected 2 columns, found 3"),
    ("text\tlabel\nthe movie\tpos\ngood\tmeh\n", None,
     "train.tsv:3: unknown label 'meh'"),
    ("", None, "train.tsv: empty file"),
    ("text\tlabel\n", None, "train.tsv: no data rows"),
    ("text\tlabel\nthe movie\tfour\n", ["--regression"],
     "train.tsv:2: regression label 'four' is not a number"),
    ("sentence\tlabel\nthe movie\tpos\n", None,
     "train.tsv:1: header has no column ['text']"),
])
def test_bad_input_names_file_and_line(tmp_path, tiny_vocab, capsys, text,
                                       extra, message):
  code, out = _bad_case(tmp_path, tiny_vocab, text,
                        **({"extra": extra} if extra else {}))
  assert code == 2
  assert message in capsys.readouterr().err
  assert not out.exists() or os.listdir(out) == []


def test_max_seq_length_above_model_positions(tmp_path, tiny_vocab, tiny_config,
                                              capsys):
  code, out = _bad_case(tmp_path, tiny_vocab, "text\tlabel\na\tpos\n",
                        extra=["--labels=neg,pos", "--max_seq_length=128",
                               f"--bert_config_file={tiny_config}"])
  assert code == 2
  assert "max_seq_length 128 is above the model's max_position_embeddings 64" in (
      capsys.readouterr().err)


def test_failure_midway_leaves_no_partial_files(tmp_path, tiny_vocab, caplog):
  """Train and eval are written, then the test split cannot be (a folder
  holds its name): the written splits are removed again, no temp file or
  meta data is left, and the folder that was there before is untouched."""
  folder = write_sst2_folder(str(tmp_path / "SST-2"))
  out = tmp_path / "data"
  (out / "sst2_test.tf_record").mkdir(parents=True)
  with pytest.raises(Exception) as failure, caplog.at_level("INFO"):
    prepare.prepare_glue("SST-2", input_dir=folder, vocab_file=tiny_vocab,
                         output_dir=str(out), max_seq_length=16)
  assert "sst2_test.tf_record" in str(failure.value)
  assert "sst2_train.tf_record" in caplog.text       # written, then removed
  assert os.listdir(out) == ["sst2_test.tf_record"]
  assert os.listdir(out / "sst2_test.tf_record") == []


def test_csv_and_jsonl_and_derived_labels(tmp_path, tiny_vocab):
  csv_path = tmp_path / "train.csv"
  csv_path.write_text('a,b,y\n"the movie, good",it is fun,yes\nbad,dull,no\n')
  jsonl = tmp_path / "dev.jsonl"
  jsonl.write_text('{"a": "good", "b": "fun", "y": "yes"}\n\n'
                   '{"a": "bad", "b": "dull", "y": "no"}\n')
  meta = prepare.prepare_classification(
      task_name="mine", train_file=str(csv_path), eval_file=str(jsonl),
      text_columns=["a", "b"], label_column="y", vocab_file=tiny_vocab,
      output_dir=str(tmp_path / "out"), max_seq_length=16)
  assert meta["label_names"] == ["no", "yes"]
  assert meta["split_sizes"] == {"train": 2, "eval": 2}
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"a": "good", "b": "fun", "y": "yes"}\n{"a": "x"}\n')
  with pytest.raises(ValueError, match=r"bad.jsonl:2: missing field\(s\) \['b', 'y'\]"):
    prepare.prepare_classification(
        task_name="mine", train_file=str(bad), eval_file=str(jsonl),
        text_columns=["a", "b"], label_column="y", vocab_file=tiny_vocab,
        output_dir=str(tmp_path / "out2"), max_seq_length=16)


def test_an_id_column_that_is_not_in_the_test_file_is_an_error(tmp_path,
                                                                tiny_vocab):
  train = tmp_path / "train.csv"
  train.write_text("text,label\ngood,yes\nbad,no\n")
  test = tmp_path / "test.csv"
  test.write_text("guid,text\n7,fine\n9,dull\n")
  common = dict(task_name="mine", train_file=str(train), eval_file=str(train),
                test_file=str(test), text_columns=["text"],
                label_column="label", vocab_file=tiny_vocab,
                max_seq_length=16)
  with pytest.raises(ValueError, match=r"test.csv: no column 'id' \(the id "
                     r"column\) in the header \['guid', 'text'\]"):
    prepare.prepare_classification(id_column="id",
                                   output_dir=str(tmp_path / "a"), **common)
  assert not os.path.exists(tmp_path / "a")
  meta = prepare.prepare_classification(id_column="guid",
                                        output_dir=str(tmp_path / "b"), **common)
  assert meta["split_sizes"] == {"train": 2, "eval": 2, "test": 2}


def test_training_pipeline_shards_the_global_stream_and_repeats(tmp_path,
                                                               tiny_vocab):
  _, out, _ = _prepare_sst2(tmp_path, tiny_vocab)
  path = os.path.join(out, "sst2_train.tf_record")
  train_order = pipeline.TrainOrder(seed=1, start=8)
  ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
                                   num_replicas_in_sync=2)
  ds = pipeline.make_dataset(path, seq_length=16, label_type="int",
                             batch_size=8, is_training=True, input_context=ctx,
                             train_order=train_order)
  batches = list(ds.take(10))       # 32 examples per shard; repeats forever
  assert all(b[0]["input_word_ids"].shape == (8, 16) for b in batches)
  # Pipeline 1 of 2 reads every other example of the one global stream.
  whole = pipeline.make_dataset(path, seq_length=16, label_type="int",
                                batch_size=160, is_training=True,
                                train_order=train_order)
  stream = next(iter(whole))[0]["record_index"].numpy()
  mine = np.concatenate([b[0]["record_index"].numpy() for b in batches])
  np.testing.assert_array_equal(mine, stream[1::2])


def test_both_jsonl_formats_read_lines_through_one_reader(tmp_path):
  """Classification rows and tagged sentences in JSONL: a line nested too
  deep is the same one-line error naming file and line in both, and a
  U+2028 inside a JSON string is text, not a line break."""
  from bertexp.data import readers
  from bertexp.tasks.tagging import formats as tagging_formats
  deep = tmp_path / "deep.jsonl"
  deep.write_text('{"text": "ok", "tokens": ["ok"]}\n' + "[" * 100000 + "\n")
  for read in (lambda p: readers.read_jsonl(p, ["text"]),
               tagging_formats.read_jsonl):
    with pytest.raises(ValueError) as error:
      read(str(deep))
    assert str(error.value) == f"{deep}:2: not valid JSON (nested too deep)"
  separated = tmp_path / "separated.jsonl"
  separated.write_text('{"text": "a\u2028b", "tokens": ["a\u2028b", "c"]}\n',
                       encoding="utf-8")
  assert readers.read_jsonl(str(separated), ["text"]).text_a == ["a\u2028b"]
  (sentence,) = tagging_formats.read_jsonl(str(separated))
  assert sentence.tokens == ["a\u2028b", "c"]
