"""XLM-RoBERTa and ALBERT folders with their SentencePiece tokenizers, and
RoBERTa's with its byte-level BPE, end to end:
convert-checkpoint carries the tokenizer into the encoder folder, `prepare
classification --tokenizer=FOLDER` writes the fast tokenizer's ids, the
classifier fine-tunes and predicts, and the export's serve_text tokenizes
in the graph to the predict file's probabilities; `prepare squad`,
`tagging` and `multiple_choice` write the fast tokenizer's ids."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from conftest import TESTS
import family_fixtures
import matrix_fixtures as mf

GOLDEN = os.path.join(TESTS, "golden")
TOKENIZER = os.path.join(GOLDEN, "tokenizers", "xlm-roberta")
FAMILIES = family_fixtures.TOKENIZER_FAMILIES
FLOAT32 = ['bertexp.configure_numerics.precision="float32"']


def _rows(golden):
  """The fixture's varied texts, labelled by whether they hold a Latin
  letter, repeated: enough rows for a few batches."""
  texts = [t for t in golden["texts"] if t.strip()]
  return [(t, int(any("a" <= c.lower() <= "z" for c in t))) for t in texts]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_convert_prepare_train_and_serve_text_with_the_sentencepiece_model(
    tmp_path, family):
  tokenizer_files, vocab_size = FAMILIES[family]
  golden = json.load(open(os.path.join(GOLDEN, "tokenizers", family,
                                       "ids.json"), encoding="utf-8"))
  hf = str(tmp_path / "hf")
  family_fixtures.hugging_face_folder(hf, family, vocab_size)
  encoder = str(tmp_path / "encoder")
  assert cli.main(["convert-checkpoint", "--from=huggingface",
                   f"--input={hf}", f"--output={encoder}"]) == 0
  assert sorted(os.listdir(encoder)) == sorted([
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001",
      "bert_model.ckpt.index", *tokenizer_files, "tokenizer_config.json"])
  # And back: --to=huggingface writes the same tokenizer files.
  back = str(tmp_path / "back")
  assert cli.main(["convert-checkpoint", "--to=huggingface",
                   f"--input={encoder}", f"--output={back}"]) == 0
  for name in tokenizer_files:
    with open(os.path.join(hf, name), "rb") as f, open(
        os.path.join(back, name), "rb") as g:
      assert f.read() == g.read(), name
  assert json.load(open(os.path.join(back, "tokenizer_config.json"))) == (
      json.load(open(os.path.join(hf, "tokenizer_config.json"))))

  rows = _rows(golden)
  with open(tmp_path / "train.tsv", "w", encoding="utf-8") as f:
    f.write("sentence\tlabel\n" + "".join(
        f"{t.replace(chr(9), ' ').replace(chr(10), ' ')}\t{l}\n"
        for t, l in rows * 4))
  with open(tmp_path / "test.tsv", "w", encoding="utf-8") as f:
    f.write("sentence\tlabel\n" + "".join(
        f"{t.replace(chr(9), ' ').replace(chr(10), ' ')}\t{l}\n"
        for t, l in rows))
  data = str(tmp_path / "data")
  assert cli.main([
      "prepare", "classification", "--task_name=sp",
      f"--train_file={tmp_path}/train.tsv", f"--eval_file={tmp_path}/test.tsv",
      f"--test_file={tmp_path}/test.tsv", "--text_columns=sentence",
      "--label_column=label", f"--tokenizer={encoder}", f"--output_dir={data}",
      f"--max_seq_length={golden['seq']}"]) == 0
  meta = json.load(open(f"{data}/sp_meta_data"))
  assert meta["tokenizer_family"] == family
  assert meta["vocab_size"] == vocab_size
  assert meta["do_lower_case"] == (family == "albert")   # their configs say
  # The records hold the fast tokenizer's ids (texts without a Unigram tie).
  want = {t: ids["input_ids"] for t, ids in zip(golden["texts"],
                                                 golden["ids"]["single"])}
  feature = {"input_word_ids": tf.io.FixedLenFeature([golden["seq"]],
                                                     tf.int64)}
  written = [tf.io.parse_single_example(r, feature)["input_word_ids"].numpy()
             .tolist() for r in tf.data.TFRecordDataset(
                 f"{data}/sp_test.tf_record")]
  # (Texts as the TSV holds them: tabs and newlines made spaces, which
  # byte-level BPE reads as other words.)
  matches = [written[i] == want[t] for i, (t, _) in enumerate(rows)
             if t in want and ("9,000" not in t or family == "roberta")
             and "\t" not in t and "\n" not in t]
  assert matches and all(matches), matches

  spec = dict(gin_file="experiments/demo/movie_sentiment_cpu.gin",
              order=["bertexp.ClassificationTask.shuffle_buffer_size=0"],
              params={"BERT_CONFIG_FILE": f"{encoder}/bert_config.json",
                      "INIT_CHECKPOINT": f"{encoder}/bert_model.ckpt",
                      "TRAIN_DATA_PATH": f"{data}/sp_train.tf_record",
                      "EVAL_DATA_PATH": f"{data}/sp_eval.tf_record",
                      "TEST_DATA_PATH": f"{data}/sp_test.tf_record",
                      "INPUT_META_DATA_PATH": f"{data}/sp_meta_data"})
  model_dir = str(tmp_path / "run")
  mf.run_in_process(spec, model_dir, mf.STRATEGIES["default"], FLOAT32,
                    mode="train_eval_predict")
  assert mf.kernel_movement(model_dir, f"{encoder}/bert_model.ckpt")
  mf.run_in_process(spec, model_dir, mf.STRATEGIES["default"], FLOAT32,
                    mode="export")
  probabilities = np.loadtxt(f"{model_dir}/test_results.tsv", ndmin=2)
  exported = sorted(os.listdir(f"{model_dir}/export"))[-1]
  served = tf.saved_model.load(f"{model_dir}/export/{exported}").signatures[
      "serve_text"](text=tf.constant([t for t, _ in rows]))
  np.testing.assert_allclose(served["probabilities"].numpy(), probabilities,
                             atol=1e-5)
  if family == "xlm-roberta":
    # The strategy matrix's rule on the SentencePiece records: 2 mirrored
    # replicas train and evaluate as 1 on the same global batches.
    two = str(tmp_path / "two")
    mf.run_in_process(spec, two, mf.STRATEGIES["mirrored_2"], FLOAT32,
                      mode="train_eval_predict")
    mf.assert_equal_runs(two, model_dir, f"{encoder}/bert_model.ckpt")


def test_a_sentencepiece_vocabulary_larger_than_the_model_is_refused(
    tmp_path, capsys):
  hf = str(tmp_path / "hf")
  family_fixtures.hugging_face_folder(hf, vocab_size=200)
  assert cli.main(["convert-checkpoint", "--from=huggingface",
                   f"--input={hf}", f"--output={tmp_path}/out"]) != 0
  error = capsys.readouterr().err.strip().splitlines()[-1]
  assert "2002 tokens, but config.json's vocab_size is 200" in error
  assert not os.path.exists(f"{tmp_path}/out")


@pytest.mark.parametrize("family", ["xlm-roberta", "roberta"])
def test_prepare_squad_and_tagging_write_the_fast_tokenizers_ids(tmp_path,
                                                                 family):
  """`prepare squad` and `prepare tagging` with --tokenizer=FOLDER: records
  in the family's layout with the fast tokenizer's ids (run_qa's question +
  context, run_ner's words), and meta data that names the tokenizer so
  that evaluation and serve_text read text the same way."""
  folder = os.path.join(GOLDEN, "tokenizers", family)
  golden = json.load(open(os.path.join(folder, "ids.json"), encoding="utf-8"))
  seq = 64
  with open(tmp_path / "squad.json", "w", encoding="utf-8") as f:
    json.dump({"data": [{"paragraphs": [{"context": context, "qas": [{
        "id": str(k), "question": question, "answers": [
            {"text": answer, "answer_start": start}]}]}
        for k, (question, context, answer, start) in enumerate(golden["qa"])
    ]}]}, f, ensure_ascii=False)
  with open(tmp_path / "ner.txt", "w", encoding="utf-8") as f:
    f.write("".join("".join(f"{w} O\n" for w in words) + "\n"
                    for words in golden["word_sentences"]))
  assert cli.main([
      "prepare", "squad", f"--squad_file={tmp_path}/squad.json",
      f"--tokenizer={folder}", f"--output_dir={tmp_path}/squad",
      f"--max_seq_length={seq}"]) == 0
  assert cli.main([
      "prepare", "tagging", "--format=conll", f"--train_file={tmp_path}/ner.txt",
      "--task_name=ner", f"--tokenizer={folder}",
      f"--output_dir={tmp_path}/ner", f"--max_seq_length={seq}"]) == 0
  for meta_file, record_file, want in (
      ("squad/squad_v1.1_train_meta_data", "squad/squad_v1.1_train.tf_record",
       golden["task_ids"]["qa"]),
      ("ner/ner_meta_data", "ner/ner_train.tf_record",
       golden["task_ids"]["words"])):
    meta = json.load(open(tmp_path / meta_file))
    assert meta["tokenizer_family"] == family, meta_file
    feature = {"input_word_ids": tf.io.FixedLenFeature([seq], tf.int64)}
    written = [tf.io.parse_single_example(r, feature)["input_word_ids"]
               .numpy().tolist() for r in tf.data.TFRecordDataset(
                   str(tmp_path / record_file))]
    assert [row[:len(w["input_ids"])] for row, w in zip(written, want)] == [
        w["input_ids"] for w in want] and len(written) == len(want)


def test_multiple_choice_packs_each_choice_in_the_familys_pair_layout(
    tmp_path):
  """prepare multiple_choice --tokenizer: every (context, choice) is the
  fast tokenizer's pair (`<s> context </s></s> choice </s>`), as the
  golden pairs hold them."""
  golden = json.load(open(os.path.join(TOKENIZER, "ids.json"),
                          encoding="utf-8"))
  pairs, seq = golden["pairs"], golden["seq"]
  with open(tmp_path / "mc.jsonl", "w", encoding="utf-8") as f:
    for context, choice in pairs:
      f.write(json.dumps({"context": context, "choices": [choice, choice],
                          "label": 0}, ensure_ascii=False) + "\n")
  data = str(tmp_path / "data")
  assert cli.main([
      "prepare", "multiple_choice", "--task_name=mc",
      f"--train_file={tmp_path}/mc.jsonl", f"--eval_file={tmp_path}/mc.jsonl",
      f"--tokenizer={TOKENIZER}", f"--output_dir={data}",
      f"--max_seq_length={seq}"]) == 0
  meta = json.load(open(f"{data}/mc_meta_data"))
  assert meta["tokenizer_family"] == "xlm-roberta" and meta["num_choices"] == 2
  feature = {"input_word_ids": tf.io.FixedLenFeature([2 * seq], tf.int64)}
  written = [tf.io.parse_single_example(r, feature)["input_word_ids"].numpy()
             .reshape(2, seq).tolist() for r in tf.data.TFRecordDataset(
                 f"{data}/mc_train.tf_record")]
  exact = [rows[0] == rows[1] == want["input_ids"] for rows, want in
           zip(written, golden["ids"]["pair"])]
  # The pairs without a Unigram tie ("9,000") are equal id for id.
  assert sum(exact) >= len(exact) - 1 and len(exact) == len(pairs), exact
