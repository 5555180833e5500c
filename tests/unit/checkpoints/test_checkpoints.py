"""Hugging Face -> bertexp conversion on the real MiniLM weights."""
import os
import shutil

import numpy as np
import pytest

import bertexp
from bertexp import cli
from bertexp.checkpoints import converters
from conftest import MINILM_HF, TESTS, requires_minilm


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  requires_minilm()
  out = str(tmp_path_factory.mktemp("minilm") / "bertexp")
  report = converters.convert_huggingface(MINILM_HF, out)
  return out, report


def test_minilm_parity_within_1e5(converted):
  _, report = converted
  assert not report.missing
  assert report.unmapped_source == []
  assert len(report.mapped) == 5 + 16 * 6 + 2
  assert max(report.max_abs_diff.values()) <= 1e-5, report.max_abs_diff


GOLDEN = os.path.join(TESTS, "golden",
                      "minilm_l6_outputs.json")


def test_minilm_matches_outputs_hugging_face_computed(converted):
  """Against numbers Hugging Face transformers' own BertTokenizer and
  BertModel produced for MiniLM (tools/make_minilm_golden.py says how):
  no bertexp code or name table was involved in making them."""
  import json
  from bertexp.data import tokenization
  out, _ = converted
  golden = json.load(open(GOLDEN))
  encoder = bertexp.load_encoder(os.path.join(out, "bert_config.json"),
                                 os.path.join(out, "bert_model.ckpt"))
  tokenizer = tokenization.Tokenizer(os.path.join(out, "vocab.txt"), True)
  for case in golden["cases"]:
    length = len(case["input_ids"])
    ids_a = tokenizer.tokenize([case["text_a"]])
    ids_b = tokenizer.tokenize([case["text_b"]]) if case["text_b"] else None
    inputs, _ = tokenization.pack(tokenizer, ids_a, ids_b, length)
    assert inputs["input_word_ids"][0].tolist() == case["input_ids"]
    assert inputs["input_type_ids"][0].tolist() == case["token_type_ids"]
    outputs = encoder(inputs, training=False)
    np.testing.assert_allclose(
        outputs["sequence_output"].numpy()[0],
        np.reshape(case["sequence_output"], [length, -1]), atol=1e-5)
    np.testing.assert_allclose(outputs["pooled_output"].numpy()[0],
                               case["pooled_output"], atol=1e-5)


def test_converted_folder_loads(converted):
  out, _ = converted
  # all-MiniLM-L6-v2 is a sentence-transformers folder: its pooling comes
  # along.
  assert sorted(os.listdir(out)) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001",
      "bert_model.ckpt.index", "sentence_pooling.json", "vocab.txt"]
  encoder = bertexp.load_encoder(os.path.join(out, "bert_config.json"),
                                 os.path.join(out, "bert_model.ckpt"))
  assert encoder.config.hidden_size == 384
  tensors = converters.read_safetensors(os.path.join(MINILM_HF, "model.safetensors"))
  np.testing.assert_array_equal(
      encoder.embeddings.word_embeddings.numpy(),
      tensors["embeddings.word_embeddings.weight"])


def _copy_minilm(tmp_path, edit):
  from safetensors import numpy as st_numpy
  folder = tmp_path / "hf"
  folder.mkdir()
  for name in ("config.json", "vocab.txt"):
    shutil.copy(os.path.join(MINILM_HF, name), folder / name)
  tensors = st_numpy.load_file(os.path.join(MINILM_HF, "model.safetensors"))
  edit(tensors)
  st_numpy.save_file(tensors, str(folder / "model.safetensors"))
  return str(folder)


def test_missing_tensor_is_an_error_and_writes_nothing(tmp_path, capsys):
  requires_minilm()
  src = _copy_minilm(tmp_path, lambda t: t.pop("encoder.layer.3.output.dense.bias"))
  out = tmp_path / "out"
  code = cli.main(["convert-checkpoint", "--from=huggingface", f"--input={src}",
                   f"--output={out}"])
  assert code == 2
  assert "encoder.layer.3.output.dense.bias" in capsys.readouterr().err
  assert not out.exists()


def test_extra_tensors_are_listed_with_bert_prefix(tmp_path):
  requires_minilm()

  def edit(tensors):
    for name in list(tensors):
      tensors["bert." + name] = tensors.pop(name)
    tensors["classifier.weight"] = np.zeros([2, 384], np.float32)
  src = _copy_minilm(tmp_path, edit)
  report = converters.convert_huggingface(src, str(tmp_path / "out"))
  assert report.unmapped_source == ["classifier.weight"]


def test_parity_failure_refuses_to_write(tmp_path):
  requires_minilm()
  with pytest.raises(ValueError, match="parity check failed"):
    converters.convert_huggingface(MINILM_HF, str(tmp_path / "out"),
                                    tolerance=1e-12)
  assert not (tmp_path / "out").exists()


def _tf1_checkpoint(tmp_path, tiny_vocab):
  """A google-research-named TF1 checkpoint from known weights, plus a cls/
  head and Adam slots that are not the encoder."""
  import json
  import tensorflow as tf
  from conftest import TINY_CONFIG
  config = dict(TINY_CONFIG, hidden_act="gelu")
  folder = tmp_path / "tf1"
  folder.mkdir()
  (folder / "bert_config.json").write_text(json.dumps(config))
  shutil.copy(tiny_vocab, folder / "vocab.txt")
  rng = np.random.RandomState(0)
  h, inner = config["hidden_size"], config["intermediate_size"]
  shapes = {"bert/embeddings/word_embeddings": [TINY_CONFIG["vocab_size"], h],
            "bert/embeddings/position_embeddings": [64, h],
            "bert/embeddings/token_type_embeddings": [2, h],
            "bert/embeddings/LayerNorm/gamma": [h], "bert/embeddings/LayerNorm/beta": [h],
            "bert/pooler/dense/kernel": [h, h], "bert/pooler/dense/bias": [h],
            "cls/predictions/output_bias": [TINY_CONFIG["vocab_size"]]}
  for i in range(2):
    p = f"bert/encoder/layer_{i}/"
    for name in ("attention/self/query", "attention/self/key", "attention/self/value",
                 "attention/output/dense"):
      shapes[p + name + "/kernel"], shapes[p + name + "/bias"] = [h, h], [h]
    shapes[p + "intermediate/dense/kernel"] = [h, inner]
    shapes[p + "intermediate/dense/bias"] = [inner]
    shapes[p + "output/dense/kernel"], shapes[p + "output/dense/bias"] = [inner, h], [h]
    for ln in ("attention/output/LayerNorm", "output/LayerNorm"):
      shapes[p + ln + "/gamma"], shapes[p + ln + "/beta"] = [h], [h]
  shapes["bert/pooler/dense/kernel/adam_m"] = [h, h]
  values = {n: (rng.randn(*s) * 0.2).astype(np.float32) for n, s in shapes.items()}
  # A name-based (TF1 Saver) checkpoint: each tensor under its own name.
  tf.raw_ops.SaveV2(prefix=str(folder / "bert_model.ckpt"),
                    tensor_names=list(values), shape_and_slices=[""] * len(values),
                    tensors=list(values.values()))
  return str(folder), values


def test_tf1_checkpoint_round_trip(tmp_path, tiny_vocab):
  folder, values = _tf1_checkpoint(tmp_path, tiny_vocab)
  report = converters.convert_tf1(folder, str(tmp_path / "out"))
  assert max(report.max_abs_diff.values()) <= 1e-5
  assert "cls/predictions/output_bias" in report.unmapped_source
  assert "bert/pooler/dense/kernel/adam_m" in report.unmapped_source
  encoder = bertexp.load_encoder(str(tmp_path / "out" / "bert_config.json"),
                                 str(tmp_path / "out"))
  assert encoder.config.hidden_act == "gelu_tanh"      # TF1's "gelu"
  np.testing.assert_array_equal(
      encoder.blocks[1].query.kernel.numpy(),
      values["bert/encoder/layer_1/attention/self/query/kernel"])
  np.testing.assert_array_equal(
      encoder.embeddings.type_embeddings.numpy(),
      values["bert/embeddings/token_type_embeddings"])


def _model_garden_source(folder, tiny_vocab):
  import json
  import tensorflow as tf
  from official.nlp.modeling import networks
  from conftest import TINY_CONFIG
  folder.mkdir()
  (folder / "bert_config.json").write_text(json.dumps(TINY_CONFIG))
  shutil.copy(tiny_vocab, folder / "vocab.txt")
  tf.random.set_seed(3)
  source = networks.BertEncoder(
      vocab_size=TINY_CONFIG["vocab_size"], hidden_size=16, num_layers=2,
      num_attention_heads=2, inner_dim=32, max_sequence_length=64,
      type_vocab_size=2, inner_activation=lambda x: tf.nn.gelu(x, approximate=False),
      norm_first=False, dict_outputs=True)
  for variable in source.variables:        # LayerNorm starts at 1/0: perturb all
    variable.assign(variable + tf.random.normal(variable.shape, stddev=0.1))
  return source


@pytest.mark.parametrize("layout", ["encoder", "model", "model_and_encoder"])
def test_model_garden_checkpoint_matches_the_source_model(tmp_path, tiny_vocab,
                                                          layout):
  """A real Model Garden BertEncoder (it ships with Orbit) with known random
  weights, saved alone or inside run_classifier's BertClassifier: the
  converted encoder gives its outputs (the source model's own forward pass,
  not a re-implementation) and the classifier head is listed as unmapped."""
  import tensorflow as tf
  from official.nlp.modeling import models
  folder = tmp_path / "mg"
  source = _model_garden_source(folder, tiny_vocab)
  objects = {"encoder": source}
  if layout != "encoder":
    objects = {"model": models.BertClassifier(source, num_classes=3)}
    if layout == "model_and_encoder":
      objects["encoder"] = source
  tf.train.Checkpoint(**objects).write(str(folder / "bert_model.ckpt"))
  report = converters.convert_model_garden(str(folder), str(tmp_path / "out"))
  assert max(report.max_abs_diff.values()) <= 1e-5
  if layout == "encoder":
    assert report.unmapped_source == []
  else:
    assert sorted(report.unmapped_source) == [
        "model/layer_with_weights-1/out_proj/bias/.ATTRIBUTES/VARIABLE_VALUE",
        "model/layer_with_weights-1/out_proj/kernel/.ATTRIBUTES/VARIABLE_VALUE"]
  encoder = bertexp.load_encoder(str(tmp_path / "out" / "bert_config.json"),
                                 str(tmp_path / "out"))
  ids, mask, types = converters.parity_inputs(encoder.config)
  inputs = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}
  theirs, ours = source(inputs, training=False), encoder(inputs, training=False)
  real = mask.astype(bool)
  np.testing.assert_allclose(ours["sequence_output"].numpy()[real],
                             theirs["sequence_output"].numpy()[real], atol=1e-5)
  np.testing.assert_allclose(ours["pooled_output"].numpy(),
                             theirs["pooled_output"].numpy(), atol=1e-5)


def test_model_garden_checkpoint_without_an_encoder_is_a_clear_error(
    tmp_path, tiny_vocab):
  import tensorflow as tf
  folder = tmp_path / "mg"
  _model_garden_source(folder, tiny_vocab)
  tf.train.Checkpoint(step=tf.Variable(3)).write(str(folder / "bert_model.ckpt"))
  with pytest.raises(ValueError, match="no Model Garden BertEncoder.*'step'"):
    converters.convert_model_garden(str(folder), str(tmp_path / "out"))
  assert not (tmp_path / "out").exists()
