"""Sentence embeddings end to end (bertexp/tasks/embedding/,
gin/tasks/embedding.gin) on real SQuAD v1.1 questions and paragraphs:
the converted all-MiniLM-L6-v2 equals sentence-transformers; training
raises MRR@10 and what the run reports is what its export retrieves; the
export goes out as a SavedModel (`Predictor.embed`), an ONNX model and a
sentence-transformers folder giving the same vectors; 2 replicas and 2
workers train what one replica trains (in-batch negatives gathered from
every replica, hard negatives, duplicates of a positive; CoSENT on scored
pairs)."""
import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf

import bertexp
from bertexp import cli
from bertexp.checkpoints import converters
from bertexp.checkpoints import run_dir
from bertexp.data import tokenization
from bertexp.model.encoders import tokenizers
from bertexp.tasks.embedding import task as embedding_task
import matrix_fixtures as mf
from conftest import (DEMO_GIN, MINILM_HF, REPO, gin_params, requires_minilm,
                      start_server)

GIN_FILE = "gin/tasks/embedding.gin"
SQUAD_DEV = os.path.join(REPO, ".cache", "squad", "dev-v1.1.json")
GOLDEN = os.path.join(REPO, "tests", "golden", "minilm_sentence_embeddings.json")
VOCAB = os.path.join(MINILM_HF, "vocab.txt")
# A 2-layer encoder on MiniLM's real WordPiece vocabulary, no dropout.
TINY = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 64,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0, "max_position_embeddings": 64,
        "type_vocab_size": 2, "initializer_range": 0.02}
UNSEEN = ["Which river flows through the old town?",
          "Der Zug nach Zürich fährt um acht Uhr ab.",
          "東京タワーの高さは何メートルですか", "ok"]


def _squad_pairs(count, seed):
  """(question, its paragraph, another paragraph of the same article)
  rows; several questions share a paragraph (duplicate positives)."""
  with open(SQUAD_DEV) as f:
    articles = json.load(f)["data"]
  rng, rows = random.Random(seed), []
  for article in articles:
    paragraphs = article["paragraphs"]
    for index, paragraph in enumerate(paragraphs):
      other = paragraphs[(index + 1) % len(paragraphs)]["context"]
      for qa in paragraph["qas"][:2]:
        rows.append({"query": qa["question"], "positive": paragraph["context"],
                     "negative": other})
    if len(rows) >= 4 * count:
      break
  rng.shuffle(rows)
  return rows[:count]


def _write_jsonl(path, rows):
  with open(path, "w") as f:
    f.write("".join(json.dumps(row) + "\n" for row in rows))
  return str(path)


@pytest.fixture(scope="module")
def embedding_data(tmp_path_factory):
  """Prepared with the command line: 64 training pairs with a hard
  negative, evaluation = retrieval over the training file's documents;
  scored pairs (question, paragraph, 1 if it is the question's); a tiny
  encoder checkpoint."""
  root = tmp_path_factory.mktemp("embedding")
  rows = _squad_pairs(64, 1)
  pairs = _write_jsonl(root / "pairs.jsonl", rows)
  common = [f"--vocab_file={VOCAB}", "--max_seq_length=48",
            "--max_query_length=16"]
  assert cli.main(["prepare", "pairs", "--task_name=sq",
                   f"--train_file={pairs}", f"--eval_file={pairs}",
                   "--negative_columns=negative", f"--output_dir={root}/data"] +
                  common) == 0
  scored = _write_jsonl(root / "scored.jsonl", [
      {"text_a": r["query"], "text_b": r[kind], "score": score}
      for r in rows for kind, score in (("positive", 1.0), ("negative", 0.0))])
  assert cli.main(["prepare", "pairs", "--task_name=sts",
                   f"--train_file={scored}", f"--eval_file={scored}",
                   "--score_column=score", f"--vocab_file={VOCAB}",
                   "--max_seq_length=48", f"--output_dir={root}/data"]) == 0
  config = root / "bert_config.json"
  config.write_text(json.dumps(TINY))
  tf.random.set_seed(0)
  converters.write_checkpoint_folder(bertexp.load_encoder(str(config)), VOCAB,
                                     str(root / "init"))
  model = {"BERT_CONFIG_FILE": str(config),
           "INIT_CHECKPOINT": f"{root}/init/bert_model.ckpt"}
  data = lambda name: {
      "TRAIN_DATA_PATH": f"{root}/data/{name}_train.tf_record",
      "EVAL_DATA_PATH": f"{root}/data/{name}_eval.tf_record",
      "INPUT_META_DATA_PATH": f"{root}/data/{name}_meta_data"}
  order = ["bertexp.EmbeddingTask.shuffle_buffer_size=0"]
  return {"root": str(root), "rows": rows,
          "pairs": dict(gin_file=GIN_FILE, params=dict(model, **data("sq")),
                        order=order, tpu={}),
          "scored": dict(gin_file=GIN_FILE, params=dict(model, **data("sts")),
                         order=order, tpu={})}


def _converted_model(folder, texts, length, tmp_path):
  """(the EmbeddingTask of a converted folder, its model with the folder's
  weights, `texts` packed to `length`): the task's pooling is what the
  folder's sentence_pooling.json says."""
  meta = tmp_path / "meta"
  meta.write_text(json.dumps({"max_seq_length": length,
                              "max_query_length": length, "splits": {}}))
  task = embedding_task.EmbeddingTask(
      bert_config_file=f"{folder}/bert_config.json", meta_data_path=str(meta),
      init_checkpoint=f"{folder}/bert_model.ckpt")
  model = task.build_model()
  run_dir.restore_encoder(model.encoder, f"{folder}/bert_model.ckpt")
  tokenizer = tokenizers.load(os.path.join(folder, "vocab.txt"))
  ids, _ = tokenization.pack(tokenizer, tokenizer.tokenize(list(texts)), None,
                             length)
  return task, model, ids


def test_converted_all_minilm_gives_sentence_transformers_embeddings(
    tmp_path):
  """all-MiniLM-L6-v2 converted from its sentence-transformers folder:
  the task reads its pooling (mean, normalised) from the folder, and its
  model gives the vectors sentence-transformers computed
  (tools/make_sentence_embedding_golden.py) to 1e-5 on accents, CJK, emoji
  and long words."""
  requires_minilm()
  out = str(tmp_path / "minilm")
  converters.convert_huggingface(MINILM_HF, out)
  with open(os.path.join(out, "sentence_pooling.json")) as f:
    assert json.load(f) == {"mode": "mean", "normalize": True,
                            "max_seq_length": 256}
  with open(GOLDEN) as f:
    cases = json.load(f)["cases"]
  task, model, ids = _converted_model(out, [c["text"] for c in cases], 128,
                                      tmp_path)
  assert (task.pooling, task.normalize) == ("mean", True)
  got = model(ids, training=False).numpy()[:, 0]
  want = np.array([c["embedding"] for c in cases], np.float32)
  assert np.abs(got - want).max() < 1e-5
  # Mean pooling is what matches: [CLS] alone is far off.
  cls = embedding_task.EmbeddingModel(
      model.encoder, query_length=128, document_length=128,
      pooling_mode="cls", normalize=True)(ids, training=False).numpy()[:, 0]
  assert np.abs(cls - want).max() > 1e-2
  # Served as shipped: exported from the converted folder itself (no
  # training run), Predictor.embed tokenizes in the graph and gives the
  # same vectors.
  model_dir = str(tmp_path / "shipped")
  meta = tmp_path / "shipped_meta"
  meta.write_text(json.dumps({"max_seq_length": 128, "max_query_length": 128,
                              "splits": {}, "vocab_file": f"{out}/vocab.txt",
                              "do_lower_case": True}))
  shipped = ["train", "--mode=export", f"--gin_file={GIN_FILE}"] + gin_params(
      {"BERT_CONFIG_FILE": f"{out}/bert_config.json", "INIT_CHECKPOINT": out,
       "TRAIN_DATA_PATH": "unused", "INPUT_META_DATA_PATH": str(meta),
       "MODEL_DIR": model_dir,
       "PREDICT_CHECKPOINT_PATH": out})
  assert cli.main(shipped) == 0
  served = bertexp.Predictor(model_dir).embed([c["text"] for c in cases])
  assert np.abs(served - want).max() < 1e-5


def test_an_encoder_folder_is_refused_for_a_task_with_a_head(tmp_path,
                                                            capsys):
  """Exporting a classifier from an encoder folder would serve a random
  head: one line naming the folder and a head variable, nothing written."""
  folder = str(tmp_path / "encoder")
  config = tmp_path / "bert_config.json"
  config.write_text(json.dumps(TINY))
  converters.write_checkpoint_folder(bertexp.load_encoder(str(config)), VOCAB,
                                     folder)
  meta = tmp_path / "meta"
  meta.write_text(json.dumps({"num_labels": 2, "max_seq_length": 16,
                              "label_type": "int", "train_data_size": 0}))
  model_dir = str(tmp_path / "run")
  code = cli.main(["train", "--mode=export", f"--gin_file={DEMO_GIN}"] +
                  gin_params({"BERT_CONFIG_FILE": str(config),
                              "INPUT_META_DATA_PATH": str(meta),
                              "MODEL_DIR": model_dir,
                              "PREDICT_CHECKPOINT_PATH": folder}))
  assert code != 0
  error = capsys.readouterr().err.strip().splitlines()[-1]
  assert f"{folder}/bert_model.ckpt holds an encoder's weights only" in error
  assert "classifier" in error
  assert not os.path.exists(os.path.join(model_dir, "export"))


def _train(spec, model_dir, *extra, mode="train_and_eval", **params):
  args = (["train", f"--mode={mode}", f"--gin_file={spec['gin_file']}"] +
          gin_params(spec["params"], MODEL_DIR=model_dir, SEED=3, **params) +
          [f"--gin_param={b}" for b in list(spec["order"]) + list(extra)])
  assert cli.main(args) == 0


@pytest.fixture(scope="module")
def trained(embedding_data, tmp_path_factory):
  """The pairs run: 4 epochs of 16 (query, positive, hard negative) rows,
  evaluated before and after training, then exported."""
  model_dir = str(tmp_path_factory.mktemp("trained") / "run")
  spec = embedding_data["pairs"]
  _train(spec, model_dir, "bertexp.experiment.eval_before_training=True",
         TRAIN_BATCH_SIZE=16, EVAL_BATCH_SIZE=32, NUM_TRAIN_EPOCHS=4,
         LEARNING_RATE=1e-3, STEPS_PER_LOOP=16)
  _train(spec, model_dir, mode="export")
  return model_dir


def test_training_raises_mrr_and_the_export_retrieves_what_the_run_reported(
    embedding_data, trained):
  """The run selects on MRR@10, which training raised well above the
  random encoder's; the exported model's `Predictor.embed` (tokenizing in
  its graph) searched with numpy over the same documents and scored by
  ir-measures gives the run's own metrics."""
  import ir_measures
  summary = mf.summary(trained)
  assert summary["selection_metric"] == "mrr@10"
  before, after = summary["initial_eval_metrics"], summary["eval_metrics"]
  assert after["mrr@10"] > before["mrr@10"] + 0.2, (before, after)
  with open(os.path.join(trained, "best_checkpoint",
                         "best_checkpoint.json")) as f:
    assert json.load(f)["metric"] == "mrr@10"
  root = embedding_data["root"]
  with open(f"{root}/data/sq_eval_ids.json") as f:
    ids = json.load(f)
  rows = embedding_data["rows"]
  queries = list(dict.fromkeys(r["query"] for r in rows))
  corpus = list(dict.fromkeys(t for r in rows
                              for t in (r["positive"], r["negative"])))
  assert len(queries) == len(ids["queries"]) and len(corpus) == len(
      ids["corpus"])
  predictor = bertexp.Predictor(trained)
  scores = predictor.embed(queries) @ predictor.embed(corpus).T
  qrels = [ir_measures.Qrel(str(i), str(corpus.index(r["positive"])), 1)
           for i, q in enumerate(queries) for r in rows if r["query"] == q]
  run = [ir_measures.ScoredDoc(str(i), str(j), float(scores[i, j]))
         for i in range(len(queries)) for j in range(len(corpus))]
  measured = ir_measures.calc_aggregate(
      [ir_measures.RR @ 10, ir_measures.R @ 1, ir_measures.nDCG @ 10],
      qrels, run)
  assert measured[ir_measures.RR @ 10] == pytest.approx(after["mrr@10"],
                                                        abs=1e-6)
  assert measured[ir_measures.R @ 1] == pytest.approx(after["recall@1"],
                                                      abs=1e-6)
  assert measured[ir_measures.nDCG @ 10] == pytest.approx(after["ndcg@10"],
                                                          abs=1e-6)


def test_served_and_huggingface_vectors_are_the_predictors(trained, tmp_path):
  """`bertexp serve` answers serve_text with the embeddings over TF
  Serving's REST API; --to=huggingface writes a sentence-transformers
  folder (modules.json, mean pooling, Normalize) which, read back and
  pooled as it says, gives `Predictor.embed`'s vectors. On sentences
  training never saw."""
  want = bertexp.Predictor(trained).embed(UNSEEN)
  assert want.shape == (len(UNSEEN), 32)
  np.testing.assert_allclose(np.linalg.norm(want, axis=1), 1.0, rtol=1e-5)
  import requests
  process, rest, _ = start_server(os.path.join(trained, "export"),
                                  name="search")
  try:
    reply = requests.post(
        f"http://127.0.0.1:{rest}/v1/models/search:predict",
        json={"signature_name": "serve_text", "instances": [
            {"text": text} for text in UNSEEN]}, timeout=120)
    assert reply.status_code == 200, reply.text
    served = np.array(reply.json()["predictions"], np.float32)
  finally:
    process.terminate()
    process.wait(timeout=60)
  assert np.abs(served - want).max() < 1e-5
  folder = str(tmp_path / "hf")
  assert cli.main(["convert-checkpoint", "--to=huggingface",
                   f"--input={trained}", f"--output={folder}"]) == 0
  with open(os.path.join(folder, "modules.json")) as f:
    assert [m["type"].rsplit(".", 1)[-1] for m in json.load(f)] == [
        "Transformer", "Pooling", "Normalize"]
  with open(os.path.join(folder, "1_Pooling", "config.json")) as f:
    pooling = json.load(f)
  assert pooling["pooling_mode_mean_tokens"] and pooling[
      "word_embedding_dimension"] == 32
  back = str(tmp_path / "back")
  converters.convert_huggingface(folder, back)
  _, model, ids = _converted_model(back, UNSEEN, 48, tmp_path)
  got = model(ids, training=False).numpy()[:, 0]
  assert np.abs(got - want).max() < 1e-5


def test_onnx_export_embeds_as_keras(embedding_data, trained, tmp_path):
  """export-onnx writes the encoder and the pooling (mean over real tokens,
  L2 normalisation) as ONNX nodes: ONNX Runtime gives the Keras
  embeddings to 1e-5 on the held-out rows (padding included)."""
  import shutil
  model_dir = str(tmp_path / "run")
  shutil.copytree(trained, model_dir)
  spec = embedding_data["pairs"]
  _train(spec, model_dir, mode="export_onnx")
  with open(os.path.join(model_dir, "onnx", "onnx_report.json")) as f:
    report = json.load(f)["float32"]
  assert report["examples"] > 100
  assert report["max_abs_diff_embeddings"] < 1e-5
  assert sorted(os.listdir(os.path.dirname(report["path"]))) == [
      "model.onnx", "text"]


def test_pairs_equal_on_one_replica_two_replicas_and_two_workers(
    embedding_data, tmp_path):
  """In-batch negatives gathered from every replica (with a hard negative
  per row and duplicate positives in the batch): 2 mirrored CPU replicas,
  2 localhost workers and the TPU check's 2 replicas (jit_compile: this
  step runs uncompiled there, Task.gathers_across_replicas) give the
  1-replica weights, loss, gradient norm and retrieval metrics. The TPU
  check keeps static shapes, so it also shows evaluation batches cut to
  their longest text (the others: Task.eval_dynamic_padding) score as
  whole ones."""
  spec = embedding_data["pairs"]
  float32 = ['bertexp.configure_numerics.precision="float32"']
  runs = {name: str(tmp_path / name)
          for name in ("one", "mirrored", "workers", "tpu_check")}
  for name, strategy in (("one", "default"), ("mirrored", "mirrored_2")):
    mf.run_in_process(spec, runs[name], mf.STRATEGIES[strategy], float32)
  mf.run_two_workers(spec, runs["workers"], float32)
  assert cli.main(mf.train_args(
      [spec["gin_file"], "runtime/tpu_check.gin"],
      mf.run_params(spec, runs["tpu_check"], CPU_REPLICAS=2),
      list(spec["order"]) + float32)) == 0
  assert "mrr@10" in mf.summary(runs["one"])["eval_metrics"]
  for name in ("mirrored", "workers", "tpu_check"):
    mf.assert_equal_runs(runs[name], runs["one"],
                         spec["params"]["INIT_CHECKPOINT"])


def test_scored_pairs_train_with_cosent_equal_on_two_replicas(
    embedding_data, tmp_path):
  """CoSENT over the gathered cosines of the global batch: 2 mirrored CPU
  replicas give the 1-replica run; the run selects on Spearman."""
  spec = embedding_data["scored"]
  runs = {name: str(tmp_path / name) for name in ("one", "mirrored")}
  for name, strategy in (("one", "default"), ("mirrored", "mirrored_2")):
    mf.run_in_process(spec, runs[name], mf.STRATEGIES[strategy],
                      ['bertexp.configure_numerics.precision="float32"'])
  summary = mf.summary(runs["one"])
  assert summary["selection_metric"] == "spearman"
  assert -1.0 <= summary["eval_metrics"]["spearman"] <= 1.0
  mf.assert_equal_runs(runs["mirrored"], runs["one"],
                       spec["params"]["INIT_CHECKPOINT"])
