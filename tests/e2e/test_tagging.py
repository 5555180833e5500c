"""Token tagging: seqeval/conlleval scoring, readers and their errors, word
piece alignment, windows merged back per sentence, and an export that
serves entities with character offsets. The strategy-matrix cell is in
test_strategy_matrix.py."""
import glob
import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf
from seqeval import metrics as seqeval_metrics
from seqeval.metrics import sequence_labeling

import bertexp
from bertexp import cli
from bertexp.checkpoints import converters
from bertexp.tasks.tagging import data as tagging_data
from bertexp.tasks.tagging import formats as tagging_formats
from bertexp.tasks.tagging import metrics as tagging_metrics
from bertexp.tasks.tagging import serving as tagging_serving
from bertexp.tasks.tagging import task as tagging_task
from conftest import TINY_CONFIG, TINY_VOCAB
import matrix_fixtures as mf


def _write(path, text):
  os.makedirs(os.path.dirname(str(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


def _conll(rows):
  """[[(token, tag)]] -> CoNLL text (token, placeholder, tag)."""
  return "".join("".join(f"{t}\tX\t{g}\n" for t, g in s) + "\n" for s in rows)


def _records(path, seq):
  spec = {n: tf.io.FixedLenFeature([seq], tf.int64) for n in (
      "input_word_ids", "input_mask", "input_type_ids", "label_ids",
      "piece_label_ids", "word_index")}
  spec["sentence_id"] = tf.io.FixedLenFeature([], tf.int64)
  batch = next(iter(tf.data.TFRecordDataset(path).batch(10000)))
  return {k: v.numpy() for k, v in tf.io.parse_example(batch, spec).items()}


# -- scoring ----------------------------------------------------------------
def test_entity_scores_follow_conlleval_rules_counted_by_hand():
  """I- after O starts an entity, an entity may end the sentence, B- B-
  are two entities: scores equal the hand count and seqeval's own."""
  gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "I-ORG", "I-ORG", "O"],
          ["B-PER", "B-PER"]]
  predicted = [["B-PER", "I-PER", "O", "O"], ["O", "I-ORG", "I-ORG", "B-LOC"],
               ["B-PER", "I-PER"]]
  scores = tagging_metrics.entity_scores(gold, predicted, ["LOC", "ORG", "PER"])
  # gold: PER 0-1, LOC 3 | ORG 1-2 | PER 0, PER 1 (5); predicted: PER 0-1 |
  # ORG 1-2, LOC 3 | PER 0-1 (4); right: PER 0-1 and ORG 1-2.
  assert scores["precision"] == pytest.approx(2 / 4)
  assert scores["recall"] == pytest.approx(2 / 5)
  assert scores["f1"] == pytest.approx(2 * 0.5 * 0.4 / 0.9)
  assert scores["f1_PER"] == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
  assert (scores["f1_ORG"], scores["f1_LOC"]) == (1.0, 0.0)
  assert scores["support_PER"] == 3
  assert scores["accuracy"] == pytest.approx(7 / 10)
  assert scores["f1"] == pytest.approx(seqeval_metrics.f1_score(gold, predicted))


def test_bioes_and_lenient_bio_predictions_read_as_the_same_entities():
  gold = [["B-PER", "E-PER", "S-LOC", "O"]]
  assert tagging_metrics.entity_scores(
      gold, [["B-PER", "I-PER", "S-LOC", "O"]], ["LOC", "PER"])["f1"] == 1.0
  assert tagging_metrics.entity_scores(
      gold, [["B-PER", "S-PER", "S-LOC", "O"]], ["LOC", "PER"])["f1"] == \
      pytest.approx(0.4)


def _label_set(scheme):
  prefixes = "BIES" if scheme == "BIOES" else "BI"
  return ["O"] + [f"{p}-{t}" for t in ("LOC", "PER") for p in prefixes]


@pytest.mark.parametrize("scheme", ["BIO", "BIOES"])
def test_entities_of_the_serving_graph_equal_seqeval_on_random_tags(
    scheme, tmp_path):
  """serve_text groups words into entities inside the graph; on random
  (often invalid) tag sequences it finds seqeval's entities, offsets and
  mean scores."""
  names = _label_set(scheme)
  vocab = _write(tmp_path / "vocab.txt", "\n".join(TINY_VOCAB) + "\n")
  serving = tagging_serving.TaggingServing(
      None, vocab_file=vocab, do_lower_case=True, max_seq_length=16,
      doc_stride=7, label_names=names, scheme=scheme)
  rng = random.Random(7)
  rows = [[rng.randrange(len(names)) for _ in range(rng.randint(0, 12))]
          for _ in range(60)]
  scores = [[rng.random() for _ in row] for row in rows]
  texts = tf.constant([" ".join("w" * (k % 3 + 1) for k in range(len(r)))
                       for r in rows])
  word_ranges = [tagging_formats.text_and_offsets(
      ["w" * (k % 3 + 1) for k in range(len(r))])[1] for r in rows]
  starts = tf.ragged.constant([[s for s, _ in w] for w in word_ranges],
                              tf.int32, inner_shape=())
  ends = tf.ragged.constant([[e for _, e in w] for w in word_ranges],
                            tf.int32, inner_shape=())
  ids = tf.ragged.constant(rows, tf.int32, inner_shape=())
  out = serving._entity_outputs(
      texts, ids, tf.ragged.constant(scores, tf.float32, inner_shape=()),
      starts, ends,
      tf.cast(starts, tf.int64), tf.cast(ends, tf.int64))
  found_any = 0
  for i, row in enumerate(rows):
    tags = [names[k] for k in row]
    text = texts[i].numpy().decode()
    expected = tagging_metrics.entities(tags, scores[i], text, word_ranges[i])
    got = [{"text": out["entity_texts"][i, k].numpy().decode(),
            "type": out["entity_types"][i, k].numpy().decode(),
            "start": int(out["entity_starts"][i, k]),
            "end": int(out["entity_ends"][i, k]),
            "score": float(out["entity_scores"][i, k])}
           for k in range(int(out["num_entities"][i]))]
    assert [dict(e, score=None) for e in got] == [
        dict(e, score=None) for e in expected], tags
    np.testing.assert_allclose([e["score"] for e in got],
                               [e["score"] for e in expected], atol=1e-5)
    assert len(expected) == len(sequence_labeling.get_entities(tags))
    found_any += len(expected)
  assert found_any > 100


# -- readers and their errors -------------------------------------------------
def test_peoples_daily_maps_person_place_organisation_per_character(tmp_path):
  path = _write(tmp_path / "pd.txt",
                "19980101-01-001-002/m  江/nr  泽民/nr  在/p  [中国/ns  政府/n]nt"
                "  [/w  北京/ns  ]/w  会见/v  李/nr  鹏/nr  。/w\n\n")
  [sentence] = tagging_formats.read(path, "peoples_daily")
  assert "".join(sentence.tokens) == "江泽民在中国政府[北京]会见李鹏。"
  assert sentence.tags == ["B-PER", "I-PER", "I-PER", "O", "B-ORG", "I-ORG",
                           "I-ORG", "I-ORG", "O", "B-LOC", "I-LOC", "O", "O",
                           "O", "B-PER", "I-PER", "O"]
  assert sentence.document == "19980101-01-001"


def test_conll_iob1_conllu_and_jsonl_read_to_the_same_bio_spans(tmp_path):
  iob1 = _write(tmp_path / "a.conll", "-DOCSTART- -X- O\n\nU.N. I-ORG\n"
                "official O\nEkeus I-PER\nheads O\nfor O\nBaghdad I-LOC\n"
                "Rolf I-PER\nB B-PER\n\n")
  [sentence] = tagging_formats.read(iob1, "conll")
  spans = tagging_data.tag_schemes.read_spans(sentence.tags, "IOB1",
                                              sentence.where)
  assert tagging_data.tag_schemes.write_tags(spans, 8, "BIO") == [
      "B-ORG", "O", "B-PER", "O", "O", "B-LOC", "B-PER", "B-PER"]
  assert tagging_data.tag_schemes.write_tags(spans, 8, "BIOES") == [
      "S-ORG", "O", "S-PER", "O", "O", "S-LOC", "S-PER", "S-PER"]
  conllu = _write(tmp_path / "a.conllu", "# sent_id = 1\n# text = Don't go\n"
                  "1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
                  "1\tDo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_\n"
                  "2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_\n"
                  "2.1\tx\tx\tX\tX\t_\t_\t_\t_\t_\n"
                  "3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_\n\n")
  [sentence] = tagging_formats.read(conllu, "conllu")
  assert (sentence.tokens, sentence.tags) == (["Do", "n't", "go"],
                                              ["AUX", "PART", "VERB"])
  jsonl = _write(tmp_path / "a.jsonl", json.dumps(
      {"tokens": ["电", "影", "good"], "tags": ["B-OBJ", "I-OBJ", "O"]}) + "\n")
  [sentence] = tagging_formats.read(jsonl, "jsonl")
  assert tagging_formats.text_and_offsets(sentence.tokens) == (
      "电影good", [(0, 1), (1, 2), (2, 6)])


BAD_INPUTS = {
    "column count": ("conll", "the\tX\tO\nmovie\tB-OBJ\n", "train.txt:2: 2 columns, expected 3"),
    "I- after O": ("conll", "the\tX\tO\nmovie\tX\tI-OBJ\n", "train.txt:2: I-OBJ does not continue"),
    "unknown tag": ("conll", "the\tX\tPER\n", "train.txt:1: tag 'PER' is not O or"),
    "BIO tag in BIOES": ("conll", "the\tX\tB-OBJ\n\n", "BIOES scheme"),
    "jsonl tags": ("jsonl", '{"tokens": ["a", "b"], "tags": ["O"]}\n', "train.txt:1: \"tags\" must be a list of 2"),
    "jsonl not json": ("jsonl", '{"tokens": \n', "train.txt:1: not valid JSON"),
    "people's daily": ("peoples_daily", "江/nr  泽民\n", "train.txt:1: '泽民' is not word/POS"),
    "conllu columns": ("conllu", "1\tDo\tdo\tAUX\n", "train.txt:1: 4 tab-separated columns"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_tagged_input_is_a_one_line_error_naming_file_and_line(
    case, tmp_path, capsys):
  file_format, text, message = BAD_INPUTS[case]
  vocab = _write(tmp_path / "vocab.txt", "\n".join(TINY_VOCAB) + "\n")
  train = _write(tmp_path / "train.txt", text)
  scheme = ["--scheme=BIOES"] if case == "BIO tag in BIOES" else []
  assert cli.main(["prepare", "tagging", f"--format={file_format}",
                   f"--train_file={train}", "--task_name=t", *scheme,
                   f"--vocab_file={vocab}", f"--output_dir={tmp_path}/out"]) == 2
  error = capsys.readouterr().err.strip()
  assert error.startswith("bertexp: error: ") and len(error.splitlines()) == 1
  assert message in error, error
  assert not glob.glob(f"{tmp_path}/out/*")


def test_an_entity_type_the_training_file_lacks_is_an_error_at_its_line(
    tmp_path, capsys):
  vocab = _write(tmp_path / "vocab.txt", "\n".join(TINY_VOCAB) + "\n")
  train = _write(tmp_path / "train.txt", _conll([[("good", "B-POS")]]))
  dev = _write(tmp_path / "dev.txt", _conll([[("the", "O"), ("bad", "B-NEG")]]))
  assert cli.main(["prepare", "tagging", "--format=conll",
                   f"--train_file={train}", f"--eval_file={dev}",
                   "--task_name=t", f"--vocab_file={vocab}",
                   f"--output_dir={tmp_path}/out"]) == 2
  assert "dev.txt:2: unknown entity type 'NEG'; expected one of ['POS']" in \
      capsys.readouterr().err
  assert not glob.glob(f"{tmp_path}/out/*")


# -- alignment and windows ------------------------------------------------------
@pytest.mark.parametrize("scheme,every", [
    ("BIO", ["B-OBJ", "I-OBJ", "O", "B-POS", "I-POS"]),
    ("BIOES", ["B-OBJ", "E-OBJ", "O", "B-POS", "E-POS"])])
def test_the_first_piece_carries_the_tag_and_later_pieces_continue_it(
    scheme, every, tmp_path):
  """"films" is film ##s and "were" is [UNK]: label_ids tag first pieces
  only; piece_label_ids (label_all_pieces) continue the entity inside the
  word."""
  vocab = _write(tmp_path / "vocab.txt", "\n".join(TINY_VOCAB) + "\n")
  train = _write(tmp_path / "train.txt", _conll(
      [[("films", "B-OBJ"), ("were", "O"), ("very", "B-POS"), ("good", "I-POS")]]))
  meta = tagging_data.prepare_tagging(
      task_name="t", files=[("train", train)], file_format="conll",
      vocab_file=vocab, output_dir=str(tmp_path / "out"), scheme=scheme,
      input_scheme="BIO", max_seq_length=10)
  names = meta["label_names"]
  record = _records(str(tmp_path / "out" / "t_train.tf_record"), 10)
  ids = [TINY_VOCAB[i] for i in record["input_word_ids"][0]]
  assert ids[:7] == ["[CLS]", "film", "##s", "[UNK]", "very", "good", "[SEP]"]
  first = ["B-OBJ", None, "O", "B-POS", "E-POS" if scheme == "BIOES" else "I-POS"]
  if scheme == "BIOES":
    first[0] = "S-OBJ"
  assert [names[i] if i >= 0 else None for i in record["label_ids"][0][1:6]] \
      == first
  assert [names[i] for i in record["piece_label_ids"][0][1:6]] == every
  assert list(record["word_index"][0][:7]) == [0, 1, 0, 2, 3, 4, 0]
  # The task trains on the first pieces, or on every piece when asked to.
  config = _write(tmp_path / "bert_config.json", json.dumps(TINY_CONFIG))
  for every_piece, name in ((False, "label_ids"), (True, "piece_label_ids")):
    task = tagging_task.TaggingTask(
        bert_config_file=config, meta_data_path=str(tmp_path / "out" / "t_meta_data"),
        train_data_path=str(tmp_path / "out" / "t_train.tf_record"),
        label_all_pieces=every_piece, shuffle_buffer_size=0)
    _, labels = next(iter(task.build_inputs("train", batch_size=1)))
    np.testing.assert_array_equal(labels.numpy()[0], record[name][0])


def test_an_entity_across_a_window_split_is_scored_once_after_merging(tmp_path):
  """A 26-word sentence in windows of 8 pieces, 4 apart: merging the
  windows' first-piece labels back per sentence gives the gold tags and
  F1 1.0; scoring windows one by one (no merge) would count the entities
  that cross a split in pieces."""
  vocab = _write(tmp_path / "vocab.txt", "\n".join(TINY_VOCAB) + "\n")
  words = ("the plot was fun and the movie very good and a dull "
           "film ! it is not fun and the plot was very good , great .").split()
  tags = ["O"] * len(words)
  for k, word in enumerate(words):
    if word in ("very", "not"):
      tags[k:k + 2] = ["B-POS", "I-POS"] if word == "very" else ["B-NEG", "I-NEG"]
    elif word in mf.NER_TYPES and tags[k] == "O" and not (
        k and words[k - 1] in ("very", "not")):
      tags[k] = "B-" + mf.NER_TYPES[word]
  train = _write(tmp_path / "train.txt", _conll([list(zip(words, tags))]))
  meta = tagging_data.prepare_tagging(
      task_name="t", files=[("train", train)], file_format="conll",
      vocab_file=vocab, output_dir=str(tmp_path / "out"), max_seq_length=10,
      doc_stride=4)
  record = _records(str(tmp_path / "out" / "t_train.tf_record"), 10)
  windows = len(record["sentence_id"])
  assert windows == 6 and meta["sentences_split_into_windows"]["train"] == 1
  # Every word is scored by exactly one window.
  owned = sorted(w for row in record["word_index"] for w in row if w)
  assert owned == list(range(1, len(words) + 1))
  gathered = {"weights": np.ones(windows), "sentence_id": record["sentence_id"],
              "word_index": record["word_index"],
              "predictions": np.maximum(record["label_ids"], 0),
              "scores": np.ones(record["label_ids"].shape)}
  labels, _ = tagging_metrics.merge_windows(gathered, 1, [len(words)])
  names = meta["label_names"]
  merged = [[names[i] for i in labels[0]]]
  assert merged == [tags]
  assert tagging_metrics.entity_scores([tags], merged, ["NEG", "OBJ", "POS"])[
      "f1"] == 1.0
  per_window = [sequence_labeling.get_entities(
      [names[i] for i in row[row >= 0]]) for row in record["label_ids"]]
  # "very good" (words 7-8) is cut by the window starting at word 8.
  starts_inside = [names[row[row >= 0][0]] for row in record["label_ids"]]
  assert "I-POS" in starts_inside
  assert sum(len(e) for e in per_window) > len(
      sequence_labeling.get_entities(tags))


# -- train, predict, export, serve -----------------------------------------------
@pytest.fixture(scope="module")
def tagging_run(tmp_path_factory):
  """A tiny NER run (60 steps), its predictions and its export."""
  root = str(tmp_path_factory.mktemp("tagging"))
  vocab = _write(f"{root}/vocab.txt", "\n".join(TINY_VOCAB) + "\n")
  config = _write(f"{root}/bert_config.json", json.dumps(TINY_CONFIG))
  tf.random.set_seed(0)
  converters.write_checkpoint_folder(bertexp.load_encoder(config), vocab,
                                     f"{root}/init")
  for split, count, seed in (("train", 96, 1), ("dev", 16, 2), ("test", 8, 3)):
    mf.write_ner_conll(f"{root}/ner/{split}.txt", count, 24, seed)
  assert cli.main(["prepare", "tagging", "--format=conll", "--task_name=ner",
                   f"--train_file={root}/ner/train.txt",
                   f"--eval_file={root}/ner/dev.txt",
                   f"--test_file={root}/ner/test.txt", f"--vocab_file={vocab}",
                   f"--output_dir={root}/data", "--max_seq_length=16"]) == 0
  data = f"{root}/data"
  params = dict(BERT_CONFIG_FILE=config,
                INIT_CHECKPOINT=f"{root}/init/bert_model.ckpt",
                TRAIN_DATA_PATH=f"{data}/ner_train.tf_record",
                EVAL_DATA_PATH=f"{data}/ner_eval.tf_record",
                TEST_DATA_PATH=f"{data}/ner_test.tf_record",
                INPUT_META_DATA_PATH=f"{data}/ner_meta_data",
                MODEL_DIR=f"{root}/run", TRAIN_STEPS=60, STEPS_PER_LOOP=60,
                EVAL_INTERVAL_STEPS=60,
                TRAIN_BATCH_SIZE=16, EVAL_BATCH_SIZE=16, LEARNING_RATE=1e-2)
  precision = ['bertexp.configure_numerics.precision="float32"']
  for mode in ("train_eval_predict", "export"):
    assert cli.main(mf.train_args(["experiments/demo/ner_zh_cpu.gin"], params,
                                  precision, mode=mode)) == 0
  return f"{root}/run"


def test_a_trained_tagger_finds_the_fixture_entities(tagging_run):
  summary = json.load(open(f"{tagging_run}/training_summary.json"))
  assert summary["selection_metric"] == "f1"
  assert summary["eval_metrics"]["f1"] > 0.6      # untrained: near 0
  test = json.load(open(f"{tagging_run}/metrics_test.json"))
  assert test["f1"] > 0.6 and test["support_OBJ"] > 0


def test_served_entities_equal_the_predict_files_entities(tagging_run):
  """serve_text (tokenizer, tagger and entity grouping in the graph) finds,
  for each test sentence's text, the entities --mode=predict wrote for it."""
  predictor = bertexp.Predictor(f"{tagging_run}/export")
  sentences = [json.loads(line) for line in open(
      f"{tagging_run}/entities_test.jsonl")]
  served = predictor.predict([s["text"] for s in sentences])
  assert sum(len(s["entities"]) for s in sentences) > 10
  for sentence, result in zip(sentences, served):
    strip = lambda entities: [dict(e, score=round(e["score"], 3))
                              for e in entities]
    assert strip(result["entities"]) == strip(sentence["entities"])
  conll = open(f"{tagging_run}/predictions_test.conll").read().split("\n\n")
  assert [line.split("\t")[2] for line in conll[0].splitlines()] == [
      w["tag"] for w in served[0]["words"]]


def test_served_offsets_point_into_mixed_chinese_english_emoji_text(
    tagging_run):
  predictor = bertexp.Predictor(f"{tagging_run}/export")
  texts = ["电影 the 😀movie was   very good!", "", "Ünïcode ½ bad\tplot 🎬🎬 films"]
  results = predictor.predict(texts)
  assert results[1] == {"entities": [], "words": []}
  for text, result in zip(texts, results):
    for word in result["words"]:
      assert text[word["start"]:word["end"]] == word["text"]
    for entity in result["entities"]:
      assert text[entity["start"]:entity["end"]] == entity["text"]
  words = [w["text"] for w in results[0]["words"]]
  assert words == ["电", "影", "the", "😀movie", "was", "very", "good", "!"]
  assert any(e["text"] == "films" and e["type"] == "OBJ"
             for e in results[2]["entities"])
