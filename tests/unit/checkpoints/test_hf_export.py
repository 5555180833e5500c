"""bertexp -> Hugging Face (`convert-checkpoint --to=huggingface`): the
exported files are what transformers writes itself (checked against a real
Hugging Face model file), and bertexp -> Hugging Face -> bertexp gives the
weights back."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bertexp import cli
from bertexp.checkpoints import run_dir
from bertexp.model import modeling
from bertexp.tasks.squad import task as squad
from conftest import MINILM_HF, TINY_CONFIG, requires_minilm


def _export(source, output, *more):
  assert cli.main(["convert-checkpoint", "--to=huggingface", f"--input={source}",
                   f"--output={output}"] + list(more)) == 0
  return _raw(f"{output}/model.safetensors"), json.loads(
      open(f"{output}/config.json").read())


def _raw(path):
  """A safetensors file's tensors under their stored names."""
  from safetensors.numpy import load_file
  return load_file(str(path))


def test_minilm_exports_to_the_tensors_hugging_face_wrote(tmp_path):
  """MiniLM's own Hugging Face file -> bertexp (make demo's conversion) ->
  Hugging Face again: same names, shapes and values as the original."""
  requires_minilm()
  bertexp_folder = tmp_path / "bertexp"
  assert cli.main(["convert-checkpoint", "--from=huggingface",
                   f"--input={MINILM_HF}", f"--output={bertexp_folder}"]) == 0
  exported, config = _export(bertexp_folder, tmp_path / "hf")
  original = _raw(f"{MINILM_HF}/model.safetensors")
  original.pop("embeddings.position_ids", None)    # a buffer, not a weight
  assert sorted(exported) == sorted(original)
  for name, value in original.items():
    np.testing.assert_allclose(exported[name], value, atol=1e-6, err_msg=name)
  source = json.loads(open(f"{MINILM_HF}/config.json").read())
  for key in ("hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "vocab_size", "layer_norm_eps",
              "max_position_embeddings", "type_vocab_size", "hidden_act"):
    assert config[key] == source[key], key
  assert config["architectures"] == ["BertModel"]
  assert open(tmp_path / "hf" / "vocab.txt").read() == open(
      f"{MINILM_HF}/vocab.txt").read()
  assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())[
      "do_lower_case"] is True


def _training_checkpoint(model, folder):
  """A checkpoint laid out as a training run's (model/...)."""
  tf.random.set_seed(3)
  for variable in model.variables:    # every weight distinct and non-zero
    variable.assign(tf.random.normal(variable.shape, stddev=0.05))
  return tf.train.Checkpoint(model=model).write(str(folder / "ckpt-7"))


@pytest.mark.parametrize("num_labels", [3, 1])
def test_classifier_round_trip_and_head(tmp_path, tiny_config, tiny_vocab,
                                        num_labels):
  config = modeling.BertConfig.from_json_file(tiny_config)
  model = modeling.ClassifierModel(modeling.BertEncoder(config), num_labels
                                   ).build_variables()
  prefix = _training_checkpoint(model, tmp_path)
  tensors, hf_config = _export(prefix, tmp_path / "hf",
                               f"--bert_config_file={tiny_config}",
                               f"--vocab_file={tiny_vocab}")
  assert hf_config["architectures"] == ["BertForSequenceClassification"]
  assert hf_config["num_labels"] == num_labels
  if num_labels == 1:
    assert hf_config["problem_type"] == "regression"
  else:
    assert hf_config["id2label"] == {"0": "0", "1": "1", "2": "2"}
  np.testing.assert_array_equal(tensors["classifier.weight"],
                                model.classifier.kernel.numpy().T)
  np.testing.assert_array_equal(tensors["classifier.bias"],
                                model.classifier.bias.numpy())
  assert all(k.startswith("bert.") for k in tensors if "classifier" not in k)
  # Back to bertexp (the importer also checks its forward pass against an
  # independent numpy BERT on these tensors): every encoder weight returns.
  back = tmp_path / "back"
  assert cli.main(["convert-checkpoint", "--from=huggingface",
                   f"--input={tmp_path / 'hf'}", f"--output={back}"]) == 0
  restored = run_dir.load_encoder(f"{back}/bert_config.json", str(back))
  assert len(restored.variables) == len(model.encoder.variables)
  for mine, theirs in zip(model.encoder.variables, restored.variables):
    np.testing.assert_allclose(theirs.numpy(), mine.numpy(), atol=1e-6,
                               err_msg=mine.name)


def test_question_answering_head_is_qa_outputs(tmp_path, tiny_config,
                                               tiny_vocab):
  config = modeling.BertConfig.from_json_file(tiny_config)
  model = squad.SpanModel(modeling.BertEncoder(config))
  model(modeling.dummy_inputs(), training=False)
  prefix = _training_checkpoint(model, tmp_path)
  tensors, hf_config = _export(prefix, tmp_path / "hf",
                               f"--bert_config_file={tiny_config}",
                               f"--vocab_file={tiny_vocab}")
  assert hf_config["architectures"] == ["BertForQuestionAnswering"]
  assert tensors["qa_outputs.weight"].shape == (2, TINY_CONFIG["hidden_size"])
  np.testing.assert_array_equal(tensors["qa_outputs.weight"],
                                model.span_head.kernel.numpy().T)


def test_missing_config_or_checkpoint_is_a_clear_error(tmp_path, capsys):
  assert cli.main(["convert-checkpoint", "--to=huggingface",
                   f"--input={tmp_path}", f"--output={tmp_path / 'x'}"]) == 2
  assert "folder holds no checkpoint" in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "x")


def test_tagger_head_is_token_classification_with_tag_names(
    tmp_path, tiny_config, tiny_vocab):
  """A tagging run's head -> BertForTokenClassification's `classifier`,
  id2label the meta data's tags in label-id order."""
  from bertexp.tasks.tagging import task as tagging
  config = modeling.BertConfig.from_json_file(tiny_config)
  model = tagging.TaggingModel(modeling.BertEncoder(config), 5).build_variables()
  prefix = _training_checkpoint(model, tmp_path)
  tensors, hf_config = _export(prefix, tmp_path / "hf",
                               f"--bert_config_file={tiny_config}",
                               f"--vocab_file={tiny_vocab}")
  assert hf_config["architectures"] == ["BertForTokenClassification"]
  assert hf_config["num_labels"] == 5
  assert "problem_type" not in hf_config
  np.testing.assert_array_equal(tensors["classifier.weight"],
                                model.tagger.kernel.numpy().T)
  np.testing.assert_array_equal(tensors["classifier.bias"],
                                model.tagger.bias.numpy())


def test_multiple_choice_head_goes_out_through_the_task_declaration(
    tmp_path, tiny_config, tiny_vocab):
  """The multiple-choice task declares its head in its own folder; the
  exporter, which names no task, writes BertForMultipleChoice's
  `classifier` [1, H] from the task's `scorer`."""
  from bertexp.tasks.multiple_choice import task as multiple_choice
  config = modeling.BertConfig.from_json_file(tiny_config)
  model = multiple_choice.MultipleChoiceModel(
      modeling.BertEncoder(config), num_choices=3, seq_length=16
  ).build_variables()
  prefix = _training_checkpoint(model, tmp_path)
  tensors, hf_config = _export(prefix, tmp_path / "hf",
                               f"--bert_config_file={tiny_config}",
                               f"--vocab_file={tiny_vocab}")
  assert hf_config["architectures"] == ["BertForMultipleChoice"]
  assert "num_labels" not in hf_config
  np.testing.assert_array_equal(tensors["classifier.weight"],
                                model.scorer.kernel.numpy().T)
  assert tensors["classifier.weight"].shape == (1, TINY_CONFIG["hidden_size"])


def test_a_checkpoint_with_two_declared_heads_is_refused(tmp_path, tiny_config,
                                                         tiny_vocab, capsys):
  config = modeling.BertConfig.from_json_file(tiny_config)
  model = modeling.ClassifierModel(modeling.BertEncoder(config), 2
                                   ).build_variables()
  model.tagger = tf_keras.layers.Dense(3)       # a tagging head beside it
  model.tagger.build((None, TINY_CONFIG["hidden_size"]))
  prefix = _training_checkpoint(model, tmp_path)
  assert cli.main(["convert-checkpoint", "--to=huggingface",
                   f"--input={prefix}", f"--output={tmp_path / 'hf'}",
                   f"--bert_config_file={tiny_config}",
                   f"--vocab_file={tiny_vocab}"]) == 2
  assert "heads of 2 tasks (classifier, tagger)" in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "hf")

