"""One resolver for every path -> checkpoint (bertexp.checkpoints.run_dir),
and each caller skipping a damaged newest checkpoint of a MODEL_DIR:
INIT_CHECKPOINT, eval / predict / export, `--to=huggingface` and
`bertexp.load_encoder`."""
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

import bertexp
from bertexp import cli
from bertexp.checkpoints import converters
from bertexp.checkpoints import run_dir
from bertexp.checkpoints import verified
from bertexp.model import modeling
from conftest import TINY_CONFIG


def _classifier():
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  return modeling.ClassifierModel(modeling.BertEncoder(config),
                                  2).build_variables()


def _fill(model, value):
  for variable in model.variables:
    variable.assign(tf.fill(variable.shape, tf.cast(value, variable.dtype)))


@pytest.fixture
def damaged_run(tmp_path, tiny_config, tiny_vocab):
  """MODEL_DIR with ckpt-1 (every weight 0.1) and ckpt-2 (every weight 0.2)
  whose data file is cut short, written as training writes them."""
  model_dir = str(tmp_path / "run")
  model = _classifier()
  step = tf.Variable(0, dtype=tf.int64)
  manager = verified.VerifiedCheckpointManager(
      tf.train.Checkpoint(model=model), model_dir, max_to_keep=5,
      checked_variables=model.variables)
  for number, value in ((1, 0.1), (2, 0.2)):
    _fill(model, value)
    step.assign(number)
    manager.save(checkpoint_number=number)
  data = tf.io.gfile.glob(f"{model_dir}/ckpt-2.data-*")[0]
  with open(data, "r+b") as f:
    f.truncate(os.path.getsize(data) // 2)
  # What --to=huggingface reads from a run: its config.gin names the files.
  with open(f"{model_dir}/config.gin", "w") as f:
    f.write(f'BERT_CONFIG_FILE = "{tiny_config}"\n')
  return model_dir, tiny_config, tiny_vocab


def _values(variables):
  """The one value every variable holds (_fill), to 6 decimals."""
  return {round(float(x), 6) for v in variables for x in v.numpy().flat}


def test_a_model_dir_resolves_to_its_newest_intact_checkpoint(damaged_run,
                                                              caplog):
  model_dir, _, _ = damaged_run
  with caplog.at_level(logging.WARNING):
    assert run_dir.resolve(model_dir) == f"{model_dir}/ckpt-1"
  assert "damaged checkpoint" in caplog.text and "ckpt-2" in caplog.text
  assert run_dir.resolve(model_dir, intact=False) == f"{model_dir}/ckpt-2"


def test_a_damaged_checkpoint_named_explicitly_is_an_error(damaged_run):
  model_dir, _, _ = damaged_run
  with pytest.raises(verified.CheckpointError, match=r"ckpt-2\.data"):
    run_dir.resolve(f"{model_dir}/ckpt-2")
  assert run_dir.resolve(f"{model_dir}/ckpt-1") == f"{model_dir}/ckpt-1"


def test_best_checkpoint_and_encoder_folders_resolve(tmp_path, tiny_vocab):
  best = tmp_path / "best_checkpoint"
  best.mkdir()
  model = _classifier()
  tf.train.Checkpoint(model=model).write(str(best / "ckpt-7"))
  (best / "best_checkpoint.json").write_text(json.dumps(
      {"checkpoint": "ckpt-7", "step": 7}))
  assert run_dir.resolve(str(best)) == f"{best}/ckpt-7"
  converters.write_checkpoint_folder(model.encoder, tiny_vocab,
                                     str(tmp_path / "encoder"))
  assert run_dir.resolve(str(tmp_path / "encoder")) == (
      f"{tmp_path}/encoder/bert_model.ckpt")
  (best / "best_checkpoint.json").write_text(json.dumps({"step": 7}))
  with pytest.raises(ValueError, match="best_checkpoint.json: field "
                     "'checkpoint'"):
    run_dir.resolve(str(best))


def test_load_encoder_of_a_folder_takes_its_config_and_weights(tmp_path,
                                                               tiny_vocab):
  """bertexp.load_encoder(FOLDER): the converted folder's config and
  weights, the same encoder as the two-argument form; a folder without a
  config is a one-line error naming it."""
  encoder = _classifier().encoder
  for variable in encoder.variables:
    variable.assign(tf.random.normal(variable.shape, seed=1))
  folder = str(tmp_path / "encoder")
  converters.write_checkpoint_folder(encoder, tiny_vocab, folder)
  one = bertexp.load_encoder(folder)
  two = bertexp.load_encoder(f"{folder}/bert_config.json", folder)
  random = bertexp.load_encoder(f"{folder}/bert_config.json")
  assert len(one.variables) == len(encoder.variables)
  for ours, theirs in zip(encoder.variables, one.variables):
    np.testing.assert_array_equal(theirs.numpy(), ours.numpy())
  for a, b in zip(one.variables, two.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert any(np.abs(a.numpy() - b.numpy()).max() > 1e-3
             for a, b in zip(one.variables, random.variables))
  with pytest.raises(FileNotFoundError, match=r"empty: no bert_config.json"):
    (tmp_path / "empty").mkdir()
    bertexp.load_encoder(str(tmp_path / "empty"))


def test_a_folder_without_checkpoints_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="folder holds no checkpoint"):
    run_dir.resolve(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="no checkpoint"):
    run_dir.resolve(str(tmp_path / "missing"))


def test_init_checkpoint_skips_the_damaged_newest(damaged_run):
  model_dir, _, _ = damaged_run
  model = _classifier()
  _fill(model, 0.0)
  said = run_dir.initialise_from_checkpoint(model, None, model_dir)
  assert said == f"the whole model from {model_dir}/ckpt-1"
  assert _values(model.variables) == {0.1}


def test_eval_predict_export_restore_skips_the_damaged_newest(damaged_run):
  model_dir, _, _ = damaged_run
  model = _classifier()
  assert run_dir.restore_model(model, model_dir) == f"{model_dir}/ckpt-1"
  assert _values(model.variables) == {0.1}
  with pytest.raises(verified.CheckpointError):
    run_dir.restore_model(model, model_dir, f"{model_dir}/ckpt-2")


def test_load_encoder_skips_the_damaged_newest(damaged_run):
  model_dir, config, _ = damaged_run
  encoder = bertexp.load_encoder(config, model_dir)
  assert _values(encoder.variables) == {0.1}


def test_to_hugging_face_skips_the_damaged_newest(damaged_run, tmp_path):
  from safetensors.numpy import load_file
  model_dir, _, vocab = damaged_run
  out = tmp_path / "hf"
  assert cli.main(["convert-checkpoint", "--to=huggingface",
                   f"--input={model_dir}", f"--output={out}",
                   f"--vocab_file={vocab}"]) == 0
  tensors = load_file(str(out / "model.safetensors"))
  word = tensors["bert.embeddings.word_embeddings.weight"]
  np.testing.assert_allclose(word, np.full_like(word, 0.1))


def test_a_deeper_checkpoint_in_a_shallower_model_says_where_layers_went(
    tmp_path, tiny_vocab, caplog):
  config = lambda layers: modeling.BertConfig(**dict(
      TINY_CONFIG, num_hidden_layers=layers))
  tf.random.set_seed(5)
  deep = modeling.BertEncoder(config(4)).build_variables()
  converters.write_checkpoint_folder(deep, tiny_vocab, str(tmp_path / "deep"))
  shallow = modeling.BertEncoder(config(2)).build_variables()
  prefix = run_dir.restore_encoder(shallow, str(tmp_path / "deep"))
  with caplog.at_level(logging.WARNING):
    report = run_dir.layer_report(prefix, 2)
  assert report == (" (layers 0-1 of the checkpoint's 4 -> the model's layers "
                    "0-1 of 2; checkpoint layers 2-3 unused)")
  assert "has 4 layers, the model 2" in caplog.text
  np.testing.assert_array_equal(shallow.blocks[1].query.kernel.numpy(),
                                deep.blocks[1].query.kernel.numpy())
  assert run_dir.layer_report(prefix, 4) == ""     # same depth: nothing said
