"""The question-answering task end to end on the real SQuAD v1.1 files with a
tiny encoder: prepare -> train -> eval (official scores) -> predict files."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import bertexp
from bertexp import cli
from bertexp.checkpoints import converters
from bertexp.util import demo_data
from conftest import (MINILM_HF, ONE_LAYER_CONFIG, REPO, requires_minilm,
                      start_server)



def _train_args(tmp_path, config, vocab, version, predict_file, steps, **more):
  params = dict({
      "MODEL_DIR": f'"{tmp_path}/run"', "BERT_CONFIG_FILE": f'"{config}"',
      "INIT_CHECKPOINT": "None", "REQUIRE_PRETRAINED_ENCODER": False,
      "VOCAB_FILE": f'"{vocab}"',
      "TRAIN_DATA_PATH": f'"{tmp_path}/data/squad_{version}_train.tf_record"',
      "INPUT_META_DATA_PATH": f'"{tmp_path}/data/squad_{version}_train_meta_data"',
      "PREDICT_FILE": f'"{tmp_path}/{predict_file}"',
      "TRAIN_BATCH_SIZE": 8, "EVAL_BATCH_SIZE": 8, "TRAIN_STEPS": steps,
      "STEPS_PER_LOOP": steps, "SEED": 1}, **more)
  return ["--gin_file=experiments/demo/squad_v1_cpu.gin"] + [
      f"--gin_param={k}={v}" for k, v in params.items()]


def test_squad_train_eval_predict(tmp_path):
  requires_minilm()
  demo_data.squad_subset(str(tmp_path), train_questions=64, dev_questions=20)
  vocab = os.path.join(MINILM_HF, "vocab.txt")
  config = tmp_path / "bert_config.json"
  config.write_text(json.dumps(dict(ONE_LAYER_CONFIG, vocab_size=30522,
                                    max_position_embeddings=128)))
  # A fixed initial encoder whatever ran before in this process (the
  # comparison below needs a model that predicts varied spans).
  tf.random.set_seed(0)
  encoder = bertexp.load_encoder(str(config))
  converters.write_checkpoint_folder(encoder, vocab, str(tmp_path / "init"))
  assert cli.main(["prepare", "squad", f"--squad_file={tmp_path}/train_subset.json",
                   f"--vocab_file={vocab}", f"--output_dir={tmp_path}/data",
                   "--max_seq_length=128", "--doc_stride=64",
                   "--max_query_length=32"]) == 0
  meta = json.loads((tmp_path / "data" / "squad_v1.1_train_meta_data").read_text())
  assert meta["num_questions"] == 64 and meta["train_data_size"] >= 64
  args = _train_args(tmp_path, config, vocab, "v1.1", "dev_subset.json", steps=3,
                     INIT_CHECKPOINT=f'"{tmp_path}/init/bert_model.ckpt"')
  assert cli.main(["train"] + args) == 0
  summary = json.loads((tmp_path / "run" / "training_summary.json").read_text())
  assert set(summary["eval_metrics"]) >= {"exact_match", "f1"}
  assert 0 <= summary["eval_metrics"]["f1"] <= 100
  assert summary["selection_metric"] == "f1"
  assert cli.main(["train", "--mode=predict"] + args) == 0
  predictions = json.loads((tmp_path / "run" / "predictions.json").read_text())
  nbest = json.loads((tmp_path / "run" / "nbest_predictions.json").read_text())
  assert len(predictions) == 20 and set(predictions) == set(nbest)
  first = next(iter(nbest.values()))
  assert 1 <= len(first) <= 20
  assert abs(sum(c["probability"] for c in first) - 1) < 1e-5
  assert set(first[0]) == {"text", "probability", "start_logit", "end_logit"}
  # evaluate-squad on the written predictions gives the in-loop scores.
  assert cli.main(["evaluate-squad", f"{tmp_path}/dev_subset.json",
                   f"{tmp_path}/run/predictions.json",
                   f"--out_file={tmp_path}/scores.json"]) == 0
  scores = json.loads((tmp_path / "scores.json").read_text())
  assert set(scores) == {"exact_match", "f1"}
  assert cli.main(["train", "--mode=export"] + args) == 0
  (version,) = os.listdir(tmp_path / "run" / "export")
  serve = tf.saved_model.load(str(tmp_path / "run" / "export" / version)
                              ).signatures["serving_default"]
  ids = tf.constant([[2] + [2000] * 10 + [3]], tf.int32)
  out = serve(input_word_ids=ids, input_mask=tf.ones_like(ids),
              input_type_ids=tf.zeros_like(ids))
  assert out["start_logits"].shape == (1, 12) and out["end_logits"].shape == (1, 12)
  _check_serve_text_matches_predict(tmp_path, args, version)


def _check_serve_text_matches_predict(tmp_path, args, version):
  """serve_text(question, context) in a new Python that imports no bertexp
  gives --mode=predict's answers (contexts cut to fit one window)."""
  dev = json.loads((tmp_path / "dev_subset.json").read_text())
  questions, contexts, ids = [], [], []
  for article in dev["data"]:
    for paragraph in article["paragraphs"]:
      paragraph["context"] = " ".join(paragraph["context"].split()[:45])
      for qa in paragraph["qas"]:
        questions.append(qa["question"])
        contexts.append(paragraph["context"])
        ids.append(qa["id"])
  (tmp_path / "short.json").write_text(json.dumps(dev))
  run = tmp_path / "run"
  assert cli.main(["train", "--mode=predict"] + args +
                  [f'--gin_param=PREDICT_FILE="{tmp_path}/short.json"']) == 0
  predictions = json.loads((run / "predictions.json").read_text())
  nbest = json.loads((run / "nbest_predictions.json").read_text())
  script = (
      "import json, sys, tensorflow as tf, tensorflow_text\n"
      "serve = tf.saved_model.load(sys.argv[1]).signatures['serve_text']\n"
      "q, c = json.loads(sys.argv[2])\n"
      "out = serve(question=tf.constant(q), context=tf.constant(c))\n"
      "print(json.dumps({'answer': [a.decode() for a in out['answer'].numpy()],"
      " 'score': out['score'].numpy().tolist(),"
      " 'truncated': out['context_truncated'].numpy().tolist()}))\n")
  result = subprocess.run(
      [sys.executable, "-c", script, str(run / "export" / version),
       json.dumps([questions, contexts])], capture_output=True, text=True,
      check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  served = json.loads(result.stdout.strip().splitlines()[-1])
  assert not any(served["truncated"])
  assert served["answer"] == [predictions[i] for i in ids]
  expected = [nbest[i][0]["start_logit"] + nbest[i][0]["end_logit"] for i in ids]
  np.testing.assert_allclose(served["score"], expected, atol=1e-4)
  # Sanity of the comparison itself: answers are real, varied spans.
  assert len(set(served["answer"])) > 5 and all(served["answer"])
  # bertexp.Predictor: the same answers, in batches, from the export folder.
  predictor = bertexp.Predictor(str(run / "export"), batch_size=7)
  answers = predictor.answer(questions, contexts)
  assert [a["answer"] for a in answers] == served["answer"]
  np.testing.assert_allclose([a["score"] for a in answers], served["score"],
                             atol=1e-5)
  assert predictor.answer(questions[0], contexts[0]) == answers[0]
  with pytest.raises(ValueError, match="use answer"):
    predictor.predict(["a text"])
  _check_served_answers(run, questions, contexts, served)
  _check_onnx_export(run, args)


def _check_served_answers(run, questions, contexts, expected):
  """`bertexp serve` answers over TF Serving's REST API as --mode=predict
  did."""
  import requests
  process, rest, _ = start_server(str(run / "export"), name="qa")
  try:
    reply = requests.post(f"http://127.0.0.1:{rest}/v1/models/qa:predict",
                          json={"signature_name": "serve_text", "inputs": {
                              "question": questions, "context": contexts}},
                          timeout=120)
    assert reply.status_code == 200, reply.text
    outputs = reply.json()["outputs"]
    assert outputs["answer"] == expected["answer"]
    np.testing.assert_allclose(outputs["score"], expected["score"], atol=1e-4)
  finally:
    process.kill()


def _check_onnx_export(run, args):
  """export-onnx of the QA run: start and end logits of the float32 file
  equal the Keras model's on the evaluation windows."""
  assert cli.main(["export-onnx"] + args) == 0
  report = json.loads((run / "onnx" / "onnx_report.json").read_text())
  # QA's serve_text finds answers in the graph: no tokenizer-only text/.
  (version,) = os.listdir(run / "onnx" / "int8")
  assert os.listdir(run / "onnx" / "int8" / version) == ["model.onnx"]
  assert report["float32"]["examples"] > 20
  for name in ("start_logits", "end_logits"):
    assert report["float32"][f"max_abs_diff_{name}"] < 1e-4
    assert report["float32"][f"argmax_agreement_{name}"] == 1.0


def test_squad_v2_shaped_run_reports_null_scores(tmp_path):
  """v2.0 shape (unanswerable questions derived from v1.1, see demo_data)."""
  requires_minilm()
  demo_data.squad_subset(str(tmp_path), train_questions=48, dev_questions=40)
  for name in ("train_subset.json", "dev_subset.json"):
    v1 = json.loads((tmp_path / name).read_text())
    v2 = demo_data.squad_v2_from_v1(v1, seed=1)
    (tmp_path / name.replace("subset", "v2")).write_text(json.dumps(v2))
  vocab = os.path.join(MINILM_HF, "vocab.txt")
  # A v2.0 file without the flag is the most reported mistake: a clear error.
  assert cli.main(["prepare", "squad", f"--squad_file={tmp_path}/train_v2.json",
                   f"--vocab_file={vocab}", f"--output_dir={tmp_path}/data"]) == 2
  assert cli.main(["prepare", "squad", f"--squad_file={tmp_path}/train_v2.json",
                   "--version_2_with_negative", f"--vocab_file={vocab}",
                   f"--output_dir={tmp_path}/data", "--max_seq_length=128",
                   "--doc_stride=64", "--max_query_length=32"]) == 0
  meta = json.loads((tmp_path / "data" / "squad_v2.0_train_meta_data").read_text())
  assert meta["impossible_questions"] > 0
  config = tmp_path / "bert_config.json"
  config.write_text(json.dumps(dict(ONE_LAYER_CONFIG, vocab_size=30522,
                                    max_position_embeddings=128)))
  args = _train_args(tmp_path, config, vocab, "v2.0", "dev_v2.json", steps=2,
                     VERSION_2_WITH_NEGATIVE="True")
  assert cli.main(["train"] + args) == 0
  metrics = json.loads((tmp_path / "run" / "training_summary.json").read_text())[
      "eval_metrics"]
  for key in ("exact", "f1", "HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh"):
    assert key in metrics
  assert cli.main(["train", "--mode=predict"] + args) == 0
  odds = json.loads((tmp_path / "run" / "null_odds.json").read_text())
  predictions = json.loads((tmp_path / "run" / "predictions.json").read_text())
  assert set(odds) == set(predictions) and len(odds) > 40
