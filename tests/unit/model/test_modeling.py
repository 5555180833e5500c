"""Encoder: config fields, shapes, activations, numpy parity, loading."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import bertexp
from bertexp.checkpoints import converters
from bertexp.model import modeling
from bertexp.model.encoders import bert as bert_family
from conftest import TINY_CONFIG


def _hf_tensors_from(encoder):
  """The encoder's weights under HF names (inverse of the converter map)."""
  tensors = {}
  for variable, name, transform in bert_family.hf_assignments(encoder, {}):
    value = variable.numpy()
    tensors[name] = np.transpose(value) if transform is not None else value
  return tensors


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "relu", "tanh", "swish"])
def test_forward_matches_numpy_reference(act):
  config = modeling.BertConfig.from_dict(dict(TINY_CONFIG, hidden_act=act))
  tf.random.set_seed(1)
  encoder = modeling.BertEncoder(config).build_variables()
  diffs = converters.parity(encoder, lambda *x: bert_family.numpy_reference(
      _hf_tensors_from(encoder), config, *x))
  assert max(diffs.values()) < 1e-5, diffs


def test_exact_and_tanh_gelu_differ():
  x = tf.constant([1.5])
  exact = modeling.get_activation("gelu")(x)
  approx = modeling.get_activation("gelu_tanh")(x)
  assert abs(float((exact - approx)[0])) > 1e-5
  assert float(exact[0]) == pytest.approx(1.5 * 0.5 * (1 + 0.8663855975), 1e-6)


def test_output_shapes_and_dtypes(tiny_config):
  encoder = bertexp.load_encoder(tiny_config)
  inputs = modeling.dummy_inputs(batch_size=3, seq_length=7)
  out = encoder(inputs)
  assert out["sequence_output"].shape == (3, 7, 16)
  assert out["pooled_output"].shape == (3, 16)
  assert out["sequence_output"].dtype == tf.float32


def test_padding_does_not_change_real_positions(tiny_config):
  encoder = bertexp.load_encoder(tiny_config)
  ids = tf.constant([[2, 5, 6, 7, 8, 3]])
  short = encoder({"input_word_ids": ids, "input_mask": tf.ones_like(ids),
                   "input_type_ids": tf.zeros_like(ids)})
  padded_ids = tf.concat([ids, tf.zeros([1, 4], tf.int32)], 1)
  mask = tf.constant([[1] * 6 + [0] * 4])
  long = encoder({"input_word_ids": padded_ids, "input_mask": mask,
                  "input_type_ids": tf.zeros_like(padded_ids)})
  np.testing.assert_allclose(short["sequence_output"].numpy(),
                             long["sequence_output"].numpy()[:, :6], atol=1e-5)
  np.testing.assert_allclose(short["pooled_output"].numpy(),
                             long["pooled_output"].numpy(), atol=1e-5)


def test_pooled_only_gives_the_pooled_output_and_gradients_of_all_positions():
  """The classifier's path (last block on [CLS] only) against the full
  encoder: same pooled output and same gradient for every variable, with
  padding in the batch (dropout off: its masks' shapes differ)."""
  config = modeling.BertConfig.from_dict(dict(
      TINY_CONFIG, num_hidden_layers=3, hidden_dropout_prob=0.0,
      attention_probs_dropout_prob=0.0, initializer_range=0.5))
  tf_keras.utils.set_random_seed(2)
  encoder = modeling.BertEncoder(config).build_variables()
  ids = tf.constant([[2, 5, 6, 7, 8, 3], [2, 9, 4, 3, 0, 0]])
  inputs = {"input_word_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
            "input_type_ids": tf.constant([[0, 0, 0, 1, 1, 1]] * 2)}
  direction = tf.random.normal([2, config.hidden_size], seed=3)
  results = []
  for pooled_only in (False, True):
    with tf.GradientTape() as tape:
      out = encoder(inputs, training=True, pooled_only=pooled_only)
      loss = tf.reduce_sum(out["pooled_output"] * direction)
    results.append((out, tape.gradient(loss, encoder.trainable_variables)))
  (full, full_grads), (pooled, pooled_grads) = results
  assert set(pooled) == {"pooled_output"}
  np.testing.assert_allclose(pooled["pooled_output"].numpy(),
                             full["pooled_output"].numpy(), atol=1e-6)
  dense = lambda grads: [tf.convert_to_tensor(g).numpy() for g in grads]
  full_grads, pooled_grads = dense(full_grads), dense(pooled_grads)
  # Tolerances relative to each variable's largest gradient, with a floor
  # for the key biases' (zero up to rounding: softmax ignores them).
  scale = max(np.abs(g).max() for g in full_grads)
  for variable, f, p in zip(encoder.trainable_variables, full_grads,
                            pooled_grads):
    np.testing.assert_allclose(
        p, f, rtol=1e-4, err_msg=variable.name,
        atol=max(1e-4 * np.abs(f).max(), 1e-7 * scale))
  last_query = [i for i, v in enumerate(encoder.trainable_variables)
                if v is encoder.blocks[-1].query.kernel]
  assert np.abs(full_grads[last_query[0]]).max() > 1e-3 * scale  # it counts


def test_every_config_field_is_read(tmp_path):
  values = dict(TINY_CONFIG, intermediate_size=24, type_vocab_size=3,
                max_position_embeddings=40, num_hidden_layers=3,
                initializer_range=0.5)
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(values))
  encoder = bertexp.load_encoder(str(path))
  assert len(encoder.blocks) == 3
  assert encoder.embeddings.type_embeddings.shape == (3, 16)
  assert encoder.embeddings.position_embeddings.shape == (40, 16)
  assert encoder.blocks[0].intermediate.kernel.shape == (16, 24)
  assert np.std(encoder.embeddings.word_embeddings.numpy()) > 0.2
  assert encoder.embeddings.word_embeddings.shape == (values["vocab_size"], 16)
  assert encoder.blocks[0].num_heads == values["num_attention_heads"]


@pytest.mark.parametrize("field", ["hidden_dropout_prob",
                                   "attention_probs_dropout_prob"])
def test_dropout_fields_drop_in_training_only(tmp_path, field):
  values = dict(TINY_CONFIG, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
  values[field] = 0.5
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(values))
  encoder = bertexp.load_encoder(str(path))
  inputs = encoder.dummy_inputs()
  outputs = lambda training: encoder(inputs, training=training)[
      "sequence_output"].numpy()
  np.testing.assert_array_equal(outputs(False), outputs(False))
  assert not np.allclose(outputs(True), outputs(False))


def test_hidden_act_field_changes_the_output(tmp_path):
  """Same weights, hidden_act gelu vs relu: different outputs."""
  results, weights = [], None
  for act in ("gelu", "relu"):
    path = tmp_path / f"{act}.json"
    path.write_text(json.dumps(dict(TINY_CONFIG, hidden_act=act)))
    encoder = bertexp.load_encoder(str(path))
    weights = weights or encoder.get_weights()
    encoder.set_weights(weights)
    results.append(encoder(encoder.dummy_inputs(), training=False)[
        "sequence_output"].numpy())
  assert not np.allclose(results[0], results[1], atol=1e-4)


def test_fresh_weights_differ_between_layers(tiny_config):
  encoder = bertexp.load_encoder(tiny_config)
  q, k = encoder.blocks[0].query.kernel.numpy(), encoder.blocks[0].key.kernel.numpy()
  assert not np.allclose(q, k)


def test_variable_names_are_unique_and_scoped_by_layer(tiny_config):
  """query/key/value are built by their block (they run as one matmul), not
  by being called: their names must still be layer_i/query/kernel etc."""
  encoder = bertexp.load_encoder(tiny_config)
  names = [v.name for v in encoder.trainable_variables]
  assert len(set(names)) == len(names)
  prefix = encoder.name + "/layer_1/"
  for dense in ("query", "key", "value", "attention_output", "intermediate",
                "output"):
    for part in ("kernel", "bias"):
      assert f"{prefix}{dense}/{part}:0" in names


def test_config_errors(tmp_path):
  with pytest.raises(ValueError, match="not a multiple"):
    modeling.BertConfig.from_dict(dict(TINY_CONFIG, num_attention_heads=3))
  with pytest.raises(ValueError, match="hidden_act 'gelux'"):
    modeling.BertConfig.from_dict(dict(TINY_CONFIG, hidden_act="gelux"))
  with pytest.raises(ValueError, match="missing required field 'vocab_size'"):
    modeling.BertConfig.from_dict({"hidden_size": 16})
  bad = tmp_path / "bert_config.json"
  bad.write_text("{not json")
  with pytest.raises(ValueError, match="bert_config.json: not valid JSON"):
    modeling.BertConfig.from_json_file(str(bad))


def test_load_encoder_round_trip(tmp_path, tiny_config, tiny_vocab):
  encoder = bertexp.load_encoder(tiny_config)
  converters.write_checkpoint_folder(encoder, tiny_vocab, str(tmp_path / "ck"))
  loaded = bertexp.load_encoder(str(tmp_path / "ck" / "bert_config.json"),
                                str(tmp_path / "ck"))
  inputs = modeling.dummy_inputs(2, 5)
  np.testing.assert_array_equal(encoder(inputs)["pooled_output"].numpy(),
                                loaded(inputs)["pooled_output"].numpy())
  with pytest.raises(FileNotFoundError, match="no checkpoint"):
    bertexp.load_encoder(tiny_config, str(tmp_path / "nothing" / "here"))


def test_encoder_called_for_training_without_a_seed_draws_stateless_masks(
    tiny_config):
  """A user's own loop (no seed): the encoder draws one seed per call, so
  its layers use the Trainer's 16-bit stateless masks, not tf.nn.dropout;
  tf.random.set_seed makes calls repeatable, and two calls differ."""
  config = json.loads(open(tiny_config).read())
  config.update(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
  path = os.path.join(os.path.dirname(tiny_config), "dropout_config.json")
  with open(path, "w") as f:
    json.dump(config, f)
  encoder = bertexp.load_encoder(path)
  inputs = modeling.dummy_inputs(batch_size=2, seq_length=8)
  run = tf.function(lambda: encoder(inputs, training=True)["sequence_output"])
  graph = run.get_concrete_function().graph
  ops = {op.type for op in graph.get_operations()}
  assert "StatelessRandomUniformFullIntV2" in ops or (
      "StatelessRandomUniformFullInt" in ops), sorted(ops)
  tf.random.set_seed(7)
  first = encoder(inputs, training=True)["sequence_output"].numpy()
  tf.random.set_seed(7)
  again = encoder(inputs, training=True)["sequence_output"].numpy()
  other = encoder(inputs, training=True)["sequence_output"].numpy()
  np.testing.assert_array_equal(first, again)
  assert np.abs(first - other).max() > 1e-3
