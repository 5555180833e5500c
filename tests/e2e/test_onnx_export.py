"""`bertexp export-onnx`: the ONNX graph written from a model's weights gives
the Keras model's outputs in ONNX Runtime (an implementation that shares no
code with ours) for every head and activation, on padded rows of sentence
pairs; through the command line it writes float32 and int8 files that agree
with the model, and a model it cannot express is a clear error."""
import importlib.util
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.serving.exporting import onnx_export
from bertexp.tasks.classification import onnx_head as classification_onnx
from bertexp.tasks.squad import onnx_head as squad_onnx
from bertexp.tasks.squad import task as squad
from bertexp.tasks.tagging import task as tagging
from conftest import (DEMO_GIN, REPO, SPREAD_TRAINING, TINY_CONFIG, copy_run,
                      gin_params)

CONFIG = dict(TINY_CONFIG, vocab_size=40, hidden_size=32,
              num_attention_heads=4, intermediate_size=64,
              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _encoder(hidden_act):
  tf.random.set_seed(7)
  encoder = modeling.BertEncoder(modeling.BertConfig(
      **dict(CONFIG, hidden_act=hidden_act)))
  return encoder


def _spread(model):
  """Weights ×8 (layer norms untouched): outputs far apart from row to row,
  as a trained model's are, instead of the near-constant ones of a fresh
  0.02-stddev initialisation."""
  for variable in model.trainable_variables:
    if "layer_norm" not in variable.name:
      variable.assign(variable * 8.0)
  return model


def _inputs():
  """6 sentence pairs of 12 positions, padded to different lengths."""
  rng = np.random.default_rng(3)
  lengths = np.array([12, 9, 5, 12, 3, 7])
  mask = (np.arange(12)[None] < lengths[:, None]).astype(np.int32)
  types = ((np.arange(12)[None] >= lengths[:, None] // 2) * mask).astype(
      np.int32)
  ids = rng.integers(5, 40, size=(6, 12)).astype(np.int32) * mask
  return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def _run_onnx(model, tmp_path, head):
  proto = onnx_export.build_model_proto(model, head)
  path = str(tmp_path / "model.onnx")
  with open(path, "wb") as f:
    f.write(proto.SerializeToString())
  return onnx_export.run(onnx_export.session(path), _inputs())


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_tanh", "relu"])
def test_classifier_graph_equals_the_keras_model(tmp_path, hidden_act):
  model = _spread(modeling.ClassifierModel(_encoder(hidden_act), 3, seed=1)
                  .build_variables())
  want = tf.nn.softmax(model(_inputs(), training=False), -1).numpy()  # [6, 3]
  assert np.ptp(want, axis=0).max() > 0.03      # rows told apart, 3000 × tol
  got = _run_onnx(model, tmp_path,
                  classification_onnx.classifier_head(["neg", "neu", "pos"]))
  np.testing.assert_allclose(got["probabilities"], want, atol=1e-5)
  names = np.array(["neg", "neu", "pos"])[want.argmax(-1)]
  assert [v.decode() if isinstance(v, bytes) else v
          for v in got["label"]] == list(names)


# Each family whose layers are BERT's, with what sets it apart: ELECTRA's
# and ALBERT's factorised embeddings (E = 16 < H = 32) and projection,
# ALBERT's one block run twice, RoBERTa's positions after the padding row
# and single token type, ELECTRA's GELU pooler.
FUSED_FAMILIES = {
    "electra": dict(embedding_size=16),
    "albert": dict(embedding_size=16, hidden_act="gelu_new"),
    "roberta": dict(pad_token_id=1, type_vocab_size=1, layer_norm_eps=1e-5)}


@pytest.mark.parametrize("family", sorted(FUSED_FAMILIES))
def test_the_fused_graph_of_each_bert_shaped_family_equals_keras(family,
                                                                 tmp_path):
  """The classifier of another family's encoder, on padded sentence pairs:
  ONNX Runtime's probabilities equal the Keras model's to 1e-5; ALBERT's
  shared block is written once (the file holds one block's weights)."""
  tf.random.set_seed(7)
  config = encoders.config_from_dict(dict(CONFIG, family=family,
                                          **FUSED_FAMILIES[family]))
  model = _spread(modeling.ClassifierModel(
      encoders.build_encoder(config), 3, seed=1).build_variables())
  want = tf.nn.softmax(model(_inputs(), training=False), -1).numpy()  # [6, 3]
  assert np.ptp(want, axis=0).max() > 0.03      # rows told apart, 3000 × tol
  head = classification_onnx.classifier_head(["a", "b", "c"])
  got = _run_onnx(model, tmp_path, head)
  np.testing.assert_allclose(got["probabilities"], want, atol=1e-5)
  weights = sum(i.ByteSize() for i in onnx_export.build_model_proto(
      model, head).graph.initializer)
  variables = sum(v.numpy().nbytes for v in model.trainable_variables)
  assert weights < 1.1 * variables          # no block written twice


def test_a_family_without_a_fused_form_is_a_one_line_error():
  for family, more in (("deberta-v2", dict(relative_attention=True,
                                           position_buckets=8,
                                           pos_att_type=["p2c", "c2p"])),
                       ("mobilebert", {})):
    config = encoders.config_from_dict(dict(CONFIG, family=family, **more))
    model = modeling.ClassifierModel(encoders.build_encoder(config), 3,
                                     seed=1).build_variables()
    with pytest.raises(ValueError, match=(
        f"^export-onnx writes ONNX Runtime's fused BERT layers, which the "
        f"'{family}' encoder family's layers do not fit")):
      onnx_export.build_model_proto(model, classification_onnx.classifier_head(["a"]))


def test_regression_graph_equals_the_keras_model(tmp_path):
  model = _spread(modeling.ClassifierModel(_encoder("gelu"), 1, seed=1)
                  .build_variables())
  want = model(_inputs(), training=False).numpy()[:, 0]               # [6]
  assert np.ptp(want) > 0.1
  got = _run_onnx(model, tmp_path, classification_onnx.regression_head)
  np.testing.assert_allclose(got["value"], want, atol=1e-4)


def test_span_graph_equals_the_keras_model_with_padding_masked(tmp_path):
  model = _spread(squad.SpanModel(_encoder("gelu"), seed=1).build_variables())
  logits = model(_inputs(), training=False).numpy()                  # [6, 12, 2]
  got = _run_onnx(model, tmp_path, squad_onnx.span_head)
  mask = _inputs()["input_mask"] == 1
  for index, name in enumerate(("start_logits", "end_logits")):
    assert np.ptp(logits[..., index][mask]) > 0.1
    np.testing.assert_allclose(got[name][mask], logits[..., index][mask],
                               atol=1e-4)
    assert (got[name][~mask] < -9000).all()       # padding holds no answer


def test_a_task_without_an_onnx_head_says_so_in_one_line(tmp_path):
  """Tagging declares no ONNX graph: export-onnx refuses it by name before
  anything is written, as it does every task that declares none."""
  tagger = object.__new__(tagging.TaggingTask)   # capabilities read these
  tagger.meta, tagger.meta_data_path = {}, "meta.json"
  tagger.paths = {"train": None, "eval": None, "test": None}
  with pytest.raises(ValueError, match=r"^export-onnx: TaggingTask does not "
                     r"declare an ONNX graph \(export a SavedModel"):
    onnx_export.export_onnx(tagger, None, str(tmp_path / "run"), inputs={})
  assert not os.path.exists(tmp_path / "run")


def test_export_onnx_command_writes_float32_and_int8(
    tmp_path, trained_h64_classifier, capsys):
  # The shared classifier's kernels are 64 x 64 and more, so that int8
  # weights shrink the file.
  run = copy_run(trained_h64_classifier, tmp_path / "model")
  params = gin_params(run, **SPREAD_TRAINING)
  gin_file = DEMO_GIN
  assert cli.main(["export-onnx", f"--gin_file={gin_file}"] + params) == 0
  folder = os.path.join(run["MODEL_DIR"], "onnx")
  with open(os.path.join(folder, "onnx_report.json")) as f:
    report = json.load(f)
  assert report["float32"]["examples"] == 16
  assert report["float32"]["argmax_agreement_probabilities"] == 1.0
  assert report["float32"]["max_abs_diff_probabilities"] < 1e-5
  assert report["int8"]["argmax_agreement_probabilities"] >= 0.9
  # The labelled evaluation rows: float32 ONNX classifies as Keras does.
  assert report["float32"]["accuracy"] == report["float32"]["keras_accuracy"]
  assert report["int8"]["bytes"] < 0.8 * report["float32"]["bytes"]
  assert sorted(os.listdir(folder)) == ["float32", "int8", "onnx_report.json"]
  for kind in ("float32", "int8"):       # one version each, TF Serving's way
    (version,) = os.listdir(os.path.join(folder, kind))
    # model.onnx, and text/: the tokenizer for serve_text.
    assert version.isdigit() and sorted(os.listdir(os.path.join(
        folder, kind, version))) == ["model.onnx", "text"]
    assert report[kind]["path"] == os.path.join(folder, kind, version,
                                                "model.onnx")
  assert "ONNX int8" in capsys.readouterr().out
  # ONNX Runtime's quantization left no `models` package on sys.path: gin
  # still reads the shipped files' `include 'models/...'` in this process.
  assert importlib.util.find_spec("models") is None
  assert cli.main(["train", f"--gin_file={gin_file}", "--mode=plan"] +
                  params) == 0


# int8 against float32 on a model whose probabilities span most of [0, 1]:
# ONNX Runtime's dynamic quantization rounds each weight to 1/255 of its
# tensor's range and each activation tensor to 1/255 of its range. On the
# shared trained classifier (conftest.trained_h64_classifier) this moved a
# probability by 2.6e-4 at most (spread 0.35, AMD EPYC with AVX-512 VNNI);
# the bound leaves 19x for other kernels and still fails a quantizer that
# loses a bit of every weight.
INT8_PROBABILITY_BOUND = 5e-3


def test_int8_stays_within_its_bound_and_is_served_as_in_process(
    tmp_path, tiny_vocab, trained_h64_classifier):
  """The shared tiny classifier, trained until its probabilities spread
  over [0, 1] (their range is over 10x the bound), exported by `bertexp
  export-onnx`: its int8 model, run by ONNX Runtime in this process on real
  sentences, is within INT8_PROBABILITY_BOUND of the float32 SavedModel of
  the same checkpoint (not of the exporter's own figures); `bertexp serve`
  on the int8 folder answers exactly what the in-process session gives,
  over REST on token ids and on raw text."""
  import requests
  from bertexp.data import tokenization
  from conftest import NEGATIVE, POSITIVE, start_server
  run = copy_run(trained_h64_classifier, tmp_path / "model")
  assert cli.main(["export-onnx", f"--gin_file={DEMO_GIN}"] +
                  gin_params(run, **SPREAD_TRAINING)) == 0
  model_dir = run["MODEL_DIR"]
  texts = POSITIVE + NEGATIVE
  tokenizer = tokenization.Tokenizer(tiny_vocab, do_lower_case=True)
  packed, _ = tokenization.pack(tokenizer, tokenizer.tokenize(texts), None, 16)
  inputs = {k: np.asarray(v, np.int32) for k, v in packed.items()}
  (version,) = os.listdir(f"{model_dir}/export")
  saved = tf.saved_model.load(f"{model_dir}/export/{version}")
  want = saved.signatures["serving_default"](**{
      k: tf.constant(v) for k, v in inputs.items()})["probabilities"].numpy()
  int8_folder = os.path.join(model_dir, "onnx", "int8")
  (version,) = os.listdir(int8_folder)
  int8 = onnx_export.session(os.path.join(int8_folder, version, "model.onnx"))
  got = onnx_export.run(int8, inputs)["probabilities"]
  worst = float(np.abs(got - want).max())
  spread = float(np.ptp(want[:, 1]))
  assert spread > 10 * INT8_PROBABILITY_BOUND, spread
  # Above float32's rounding: the int8 folder holds a quantized model.
  assert 1e-6 < worst <= INT8_PROBABILITY_BOUND, (worst, spread)

  process, rest, _ = start_server(int8_folder, name="int8")
  try:
    url = f"http://127.0.0.1:{rest}/v1/models/int8:predict"
    reply = requests.post(url, json={"inputs": {
        k: v.tolist() for k, v in inputs.items()}}, timeout=60)
    assert reply.status_code == 200, reply.text
    np.testing.assert_allclose(reply.json()["outputs"]["probabilities"], got,
                               atol=1e-6)
    reply = requests.post(url, json={"signature_name": "serve_text",
                                     "instances": texts}, timeout=60)
    assert reply.status_code == 200, reply.text
    np.testing.assert_allclose(
        [row["probabilities"] for row in reply.json()["predictions"]], got,
        atol=1e-6)
  finally:
    process.kill()
