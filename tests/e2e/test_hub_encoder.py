"""HUB_MODULE_URL: a SavedModel BERT encoder (a real Model Garden BertEncoder
saved as TF-Hub's BERT encoders are) in place of INIT_CHECKPOINT."""
import json

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.model import encoders
from bertexp.model import modeling
from conftest import TINY_CONFIG, TINY_VOCAB
from conftest import prepare_tiny_sst2_run
from test_train import _params, _train


def _saved_model_encoder(folder):
  from official.nlp.modeling import networks
  tf.random.set_seed(5)
  source = networks.BertEncoder(
      vocab_size=TINY_CONFIG["vocab_size"], hidden_size=16, num_layers=2,
      num_attention_heads=2, inner_dim=32, max_sequence_length=64,
      type_vocab_size=2, dict_outputs=True)
  source(modeling.dummy_inputs())
  tf.saved_model.save(source, folder)
  return source


@pytest.fixture(scope="module")
def hub_source(tmp_path_factory):
  """The tiny data and the SavedModel encoder, made once for the module:
  (paths without MODEL_DIR, the source encoder)."""
  root = tmp_path_factory.mktemp("hub")
  (root / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
  (root / "bert_config.json").write_text(json.dumps(TINY_CONFIG))
  paths = prepare_tiny_sst2_run(str(root / "exp"), str(root / "vocab.txt"),
                                str(root / "bert_config.json"))
  paths["HUB_MODULE_URL"] = str(root / "hub")
  source = _saved_model_encoder(paths["HUB_MODULE_URL"])
  paths["INIT_CHECKPOINT"] = None        # the demo file sets one
  return paths, source


@pytest.fixture
def hub_run(hub_source, tmp_path):
  """hub_source's paths with a MODEL_DIR of the test's own."""
  paths, source = hub_source
  return dict(paths, MODEL_DIR=str(tmp_path / "model")), source


def _encoder_kernel(model_dir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
  name = [n for n in reader.get_variable_to_shape_map()
          if n.startswith("model/encoder/saved_model/layer_with_weights-0/")
          and "optimizer" not in n.lower()][0]
  return reader.get_tensor(name)


def test_saved_model_encoder_gives_the_source_outputs(hub_run):
  paths, source = hub_run
  config = modeling.BertConfig.from_json_file(paths["BERT_CONFIG_FILE"])
  encoder = encoders.SavedModelEncoder(paths["HUB_MODULE_URL"], config)
  ids = tf.constant([[2, 6, 7, 8, 3, 0], [2, 9, 3, 10, 3, 0]])
  inputs = {"input_word_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
            "input_type_ids": tf.constant([[0] * 6, [0, 0, 0, 1, 1, 0]])}
  ours, theirs = encoder(inputs), source(inputs)
  for key in ("sequence_output", "pooled_output"):
    np.testing.assert_allclose(ours[key].numpy(), theirs[key].numpy(),
                               atol=1e-6)
  assert len(encoder.trainable_weights) == len(source.trainable_weights)


@pytest.mark.parametrize("trainable", [True, False])
def test_fine_tune_from_hub_module(hub_run, caplog, trainable):
  paths, source = hub_run
  caplog.set_level("INFO")
  _train(paths, TRAIN_STEPS=2, HUB_MODULE_TRAINABLE=trainable)
  assert "starts from HUB_MODULE_URL" in caplog.text
  initial = source.variables[0].numpy()              # word embeddings
  trained = _encoder_kernel(paths["MODEL_DIR"])
  assert trained.shape == initial.shape
  assert np.array_equal(trained, initial) == (not trainable)
  # The checkpoint restores into a fresh hub-backed model: predict, export.
  _train(paths, mode="predict")
  _train(paths, mode="export")
  assert tf.io.gfile.glob(paths["MODEL_DIR"] + "/export/*/saved_model.pb")


def test_init_checkpoint_and_hub_module_together_is_an_error(hub_run, capsys):
  paths, _ = hub_run
  paths = dict(paths, INIT_CHECKPOINT=paths["BERT_CONFIG_FILE"].replace(
      "bert_config.json", "init/bert_model.ckpt"))
  code = cli.main(["train", "--gin_file=experiments/demo/movie_sentiment_cpu.gin"]
                  + _params(paths, TRAIN_STEPS=1))
  assert code == 2
  assert "INIT_CHECKPOINT" in capsys.readouterr().err
  assert not tf.io.gfile.glob(paths["MODEL_DIR"] + "/ckpt-*")


def test_fine_tuning_without_pretrained_weights_is_an_error(hub_run, capsys):
  paths, _ = hub_run
  paths = dict(paths, HUB_MODULE_URL=None)
  code = cli.main(["train", "--gin_file=experiments/demo/movie_sentiment_cpu.gin"]
                  + _params(paths, TRAIN_STEPS=1))
  assert code == 2
  assert "set INIT_CHECKPOINT" in capsys.readouterr().err
