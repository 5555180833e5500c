"""Encoder families from Hugging Face folders: `convert-checkpoint
--from=huggingface` then `bertexp.load_encoder(folder)` gives what
transformers computed from the same random weights (tests/golden/families,
made by tools/make_family_fixtures.py) on a padded batch of sentence pairs,
every position, to 1e-4."""
import json
import os
import shutil

import numpy as np
import pytest
from safetensors import numpy as st_numpy

import bertexp
from bertexp import cli
from bertexp.model import encoders
from bertexp.model import memory_plan
from bertexp.model.encoders import deberta_v2
from bertexp.model.encoders import roberta
from conftest import TESTS

GOLDEN = os.path.join(TESTS, "golden", "families")
MODEL_TYPES = sorted(name for name in os.listdir(GOLDEN)
                     if os.path.isdir(os.path.join(GOLDEN, name)))
TOLERANCE = 1e-4
# A fixture folder named other than its family: another model_type of the
# family, or another set of the family's options.
FAMILY_OF_FIXTURE = {"xlm-roberta": "roberta",
                     "deberta-v2-unshared": "deberta-v2",
                     "mobilebert-layer-norm": "mobilebert",
                     "modernbert-biased": "modernbert"}


def _convert(model_type, output):
  assert cli.main(["convert-checkpoint", "--from=huggingface",
                   f"--input={os.path.join(GOLDEN, model_type)}",
                   f"--output={output}"]) == 0
  return bertexp.load_encoder(output)


def _outputs(encoder, golden):
  return encoder({"input_word_ids": golden["input_ids"].astype(np.int32),
                  "input_mask": golden["attention_mask"].astype(np.int32),
                  "input_type_ids": golden["token_type_ids"].astype(np.int32)},
                 training=False)


def test_every_family_has_a_fixture():
  assert set(MODEL_TYPES) == {"albert", "bert", "deberta-v2",
                              "deberta-v2-unshared", "electra", "mobilebert",
                              "mobilebert-layer-norm", "modernbert",
                              "modernbert-biased", "roberta", "xlm-roberta"}


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_converted_encoder_equals_transformers_on_padded_pairs(model_type,
                                                               tmp_path):
  golden = np.load(os.path.join(GOLDEN, model_type, "outputs.npz"))
  encoder = _convert(model_type, str(tmp_path / "out"))
  ours = _outputs(encoder, golden)
  expected = golden["last_hidden_state"]
  np.testing.assert_allclose(ours["sequence_output"].numpy(), expected,
                             atol=TOLERANCE, rtol=0)
  np.testing.assert_allclose(ours["pooled_output"].numpy(),
                             golden["pooler_output"], atol=TOLERANCE, rtol=0)
  # Far from trivially equal: the outputs spread well beyond the tolerance.
  assert np.std(expected) > 1000 * TOLERANCE
  with open(tmp_path / "out" / "bert_config.json") as f:
    family = json.load(f)["family"]
  assert family == FAMILY_OF_FIXTURE.get(model_type, model_type)


def test_electra_without_a_classification_head_gets_a_new_pooler(tmp_path):
  """An ElectraModel checkpoint (no classifier.dense) converts: the encoder
  equals transformers, the pooler is newly initialised and said so."""
  source = tmp_path / "electra"
  shutil.copytree(os.path.join(GOLDEN, "electra"), source)
  tensors = st_numpy.load_file(str(source / "model.safetensors"))
  ours, golden = _convert_tensors(
      {k: v for k, v in tensors.items() if not k.startswith("classifier.")},
      source, tmp_path)
  assert np.abs(ours["pooled_output"].numpy() -
                golden["pooler_output"]).max() > 100 * TOLERANCE


def _convert_tensors(tensors, source, tmp_path):
  """Writes `tensors` as the fixture folder `source`'s weights, converts
  it; returns (the encoder's outputs, the fixture's) after checking that
  the sequence output is still transformers'."""
  st_numpy.save_file(tensors, str(source / "model.safetensors"))
  assert cli.main(["convert-checkpoint", "--from=huggingface",
                   f"--input={source}", f"--output={tmp_path / 'out'}"]) == 0
  golden = np.load(source / "outputs.npz")
  ours = _outputs(bertexp.load_encoder(str(tmp_path / "out")), golden)
  np.testing.assert_allclose(ours["sequence_output"].numpy(),
                             golden["last_hidden_state"], atol=TOLERANCE)
  return ours, golden


@pytest.mark.parametrize("layout", ["sequence_classifier", "no_pooler"])
def test_a_fine_tuned_roberta_classifier_converts_with_its_head_as_pooler(
    tmp_path, layout):
  """A RobertaForSequenceClassification checkpoint has no pooler (its
  head's dense + tanh over <s> is one): that dense becomes the encoder's
  pooler, giving the pooled output the original pooler gave with the same
  weights; a checkpoint with neither (a token classifier) converts with a
  new pooler."""
  source = tmp_path / "roberta"
  shutil.copytree(os.path.join(GOLDEN, "roberta"), source)
  tensors = st_numpy.load_file(str(source / "model.safetensors"))
  pooler = {k: v for k, v in tensors.items() if ".pooler." in f".{k}"}
  assert pooler, sorted(tensors)[:5]
  kept = {k: v for k, v in tensors.items() if k not in pooler}
  if layout == "sequence_classifier":      # as transformers names it
    kept = {f"roberta.{k}": v for k, v in kept.items()}
    kept.update({k.replace("pooler.dense", "classifier.dense"): v
                 for k, v in pooler.items()})
    kept["classifier.out_proj.weight"] = np.zeros(
        [3, tensors[next(iter(pooler))].shape[0]], np.float32)
    kept["classifier.out_proj.bias"] = np.zeros([3], np.float32)
  ours, golden = _convert_tensors(kept, source, tmp_path)
  difference = np.abs(ours["pooled_output"].numpy() -
                      golden["pooler_output"]).max()
  if layout == "sequence_classifier":
    assert difference < TOLERANCE
  else:
    assert difference > 100 * TOLERANCE


def test_roberta_positions_start_after_the_pad_row():
  mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]])
  np.testing.assert_array_equal(roberta.position_ids(mask, 1),
                                [[2, 3, 4, 1], [2, 3, 4, 5]])


def _stripped(tensors, prefix):
  """HF tensors without the task model's encoder prefix."""
  return {(name[len(prefix) + 1:] if name.startswith(prefix + ".") else name):
          value for name, value in tensors.items()}


# ModernBERT does not go back to transformers yet (a one-line error, see
# tests/e2e/test_encoder_families.py).
BACK_TO_HF = [t for t in MODEL_TYPES if not t.startswith("modernbert")]


@pytest.mark.parametrize("model_type", BACK_TO_HF)
def test_each_family_goes_back_to_the_tensors_transformers_wrote(model_type,
                                                                 tmp_path):
  """Hugging Face -> bertexp -> Hugging Face (`--to=huggingface` of the
  converted folder): every encoder tensor transformers wrote comes back
  under its own name with its value (only the task head stays behind), and
  config.json keeps the family's fields."""
  _convert(model_type, str(tmp_path / "out"))
  assert cli.main(["convert-checkpoint", "--to=huggingface",
                   f"--input={tmp_path / 'out'}",
                   f"--output={tmp_path / 'hf'}"]) == 0
  family = encoders.family_of(encoders.read_config(
      str(tmp_path / "out" / "bert_config.json")))
  exported = st_numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
  original = _stripped(st_numpy.load_file(
      os.path.join(GOLDEN, model_type, "model.safetensors")), family.hf_prefix)
  left_behind = set(original) - set(exported)
  assert all(name.startswith("classifier.") or name.endswith("position_ids")
             for name in left_behind), left_behind
  assert set(exported) <= set(original)
  for name, value in exported.items():
    np.testing.assert_array_equal(value, original[name], err_msg=name)
  ours = json.loads((tmp_path / "hf" / "config.json").read_text())
  theirs = json.load(open(os.path.join(GOLDEN, model_type, "config.json")))
  # The model type follows the tokenizer that goes along: the XLM-R
  # fixture carries a WordPiece vocab.txt (not XLM-R's SentencePiece
  # model), so it goes out as RoBERTa.
  expected_type = {"xlm-roberta": "roberta"}.get(theirs["model_type"],
                                                 theirs["model_type"])
  assert ours["model_type"] == expected_type
  normalised = {"architectures", "max_relative_positions", "position_buckets",
                "model_type"}
  shared = (set(ours) & set(theirs)) - normalised
  assert {"hidden_size", "num_hidden_layers", "vocab_size"} <= shared
  assert {k: ours[k] for k in shared} == {k: theirs[k] for k in shared}
  assert ours["architectures"] == [family.hf_class(expected_type) + "Model"]


def test_roberta_reads_no_token_types(tmp_path):
  """Data prepared with segment ids for pairs gives RoBERTa's outputs (its
  tokenizer makes no token types; a type id of 1 would find no row)."""
  golden = np.load(os.path.join(GOLDEN, "roberta", "outputs.npz"))
  encoder = _convert("roberta", str(tmp_path / "out"))
  types = np.zeros_like(golden["token_type_ids"])
  types[:, 10:] = 1
  ours = _outputs(encoder, dict(golden, token_type_ids=types))
  np.testing.assert_allclose(ours["sequence_output"].numpy(),
                             golden["last_hidden_state"], atol=TOLERANCE)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_memory_plan_counts_each_familys_parameters(model_type, tmp_path):
  encoder = _convert(model_type, str(tmp_path / "out"))
  built = sum(int(np.prod(w.shape)) for w in encoder.weights)
  assert memory_plan.encoder_parameters(encoder.config) == built


def test_a_roberta_pad_id_of_zero_is_accepted_and_a_negative_one_is_not():
  config = roberta.RobertaConfig.from_dict({"vocab_size": 10,
                                            "pad_token_id": 0})
  assert config.max_seq_length == 514 - 1
  with pytest.raises(ValueError, match="pad_token_id must be an integer >= 0"):
    roberta.RobertaConfig.from_dict({"vocab_size": 10, "pad_token_id": -1})


@pytest.mark.parametrize("buckets", ["256_512", "256_1024", "64_512", "8_40"])
def test_deberta_relative_positions_equal_transformers_log_buckets(buckets):
  """Every offset up to 1023 goes to the bucket transformers computes
  (DeBERTa-v3's 256 buckets over 512 positions among them), in the graph
  and in the numpy reference."""
  with open(os.path.join(GOLDEN, "deberta_buckets.json")) as f:
    want = np.array(json.load(f)[buckets])          # offsets -1023 ... 1023
  count, largest = map(int, buckets.split("_"))
  config = deberta_v2.DebertaV2Config.from_dict(dict(
      vocab_size=10, hidden_size=8, num_attention_heads=2,
      position_buckets=count, max_relative_positions=largest))
  ours = deberta_v2.relative_positions(1024, 1024, config).numpy()   # [Q, S]
  offsets = np.arange(1024)[:, None] - np.arange(1024)[None, :]
  np.testing.assert_array_equal(ours, want[offsets + 1023])
  np.testing.assert_array_equal(deberta_v2.numpy_bucket(offsets, config),
                                want[offsets + 1023])
  assert len(set(want.tolist())) < len(want) // 2   # far offsets share buckets


# The classification head of each family's ForSequenceClassification:
# (architecture, the head-side tensors besides the encoder's prefix, the one
# that holds bertexp's classifier).
CLASSIFIER_LAYOUT = {
    "albert": ("AlbertForSequenceClassification", {"classifier"},
               "classifier"),
    "deberta-v2": ("DebertaV2ForSequenceClassification",
                   {"pooler.dense", "classifier"}, "classifier"),
    "electra": ("ElectraForSequenceClassification",
                {"classifier.dense", "classifier.out_proj"},
                "classifier.out_proj"),
    "mobilebert": ("MobileBertForSequenceClassification", {"classifier"},
                   "classifier"),
    "roberta": ("RobertaForSequenceClassification",
                {"classifier.dense", "classifier.out_proj"},
                "classifier.out_proj"),
}


@pytest.mark.parametrize("model_type", sorted(CLASSIFIER_LAYOUT))
def test_a_classifier_run_goes_out_as_the_familys_sequence_classifier(
    model_type, tmp_path):
  """A training checkpoint of the classification task on each family goes
  out under the names transformers' ForSequenceClassification of that family
  loads (checked against transformers 5.25's modules): ELECTRA's and
  RoBERTa's head is classifier.dense (bertexp's pooler) + out_proj,
  DeBERTa's pooler sits beside the encoder."""
  import tensorflow as tf
  from bertexp.model import modeling
  encoder = _convert(model_type, str(tmp_path / "out"))
  model = modeling.ClassifierModel(encoder, 3).build_variables()
  tf.random.set_seed(5)
  for variable in model.variables:
    variable.assign(tf.random.normal(variable.shape, stddev=0.05))
  prefix = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt-1"))
  assert cli.main(["convert-checkpoint", "--to=huggingface", f"--input={prefix}",
                   f"--output={tmp_path / 'hf'}",
                   f"--bert_config_file={tmp_path / 'out' / 'bert_config.json'}",
                   f"--vocab_file={tmp_path / 'out' / 'vocab.txt'}"]) == 0
  architecture, head_side, classifier = CLASSIFIER_LAYOUT[model_type]
  config = json.loads((tmp_path / "hf" / "config.json").read_text())
  assert config["architectures"] == [architecture] and config["num_labels"] == 3
  tensors = st_numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
  family = encoders.family_of(encoder.config)
  outside = {name.rsplit(".", 1)[0] for name in tensors
             if not name.startswith(family.hf_prefix + ".")}
  assert outside == head_side
  np.testing.assert_array_equal(tensors[classifier + ".weight"],
                                model.classifier.kernel.numpy().T)
  if "classifier.dense" in head_side:   # the pooler went into the head
    assert not any(name.startswith(f"{family.hf_prefix}.pooler")
                   for name in tensors)


@pytest.mark.parametrize("model_type", ["deberta-v2", "mobilebert"])
def test_recompute_gives_the_gradients_of_the_familys_encoder(model_type):
  """Recomputing each block in the backward pass (its own blocks: DeBERTa's
  reads a relative table the blocks share) gives every variable the
  gradient of the plain pass, dropout on (the same seeded masks)."""
  import tensorflow as tf
  from bertexp.checkpoints import converters
  from bertexp.model import encoders as family_seam
  config = converters.hf_config(os.path.join(GOLDEN, model_type,
                                             "config.json"))
  golden = np.load(os.path.join(GOLDEN, model_type, "outputs.npz"))
  inputs = {"input_word_ids": golden["input_ids"].astype(np.int32),
            "input_mask": golden["attention_mask"].astype(np.int32),
            "input_type_ids": golden["token_type_ids"].astype(np.int32)}
  gradients, weights = [], None
  for recompute in (False, True):
    encoder = family_seam.build_encoder(
        config, family_seam.EncoderSettings(recompute=recompute))
    encoder.build_variables()
    if weights is None:
      weights = encoder.get_weights()
    encoder.set_weights(weights)               # both from the same values
    with tf.GradientTape() as tape:
      out = encoder(inputs, training=True,
                    dropout_seed=tf.constant([3, 4], tf.int64))
      loss = (tf.reduce_sum(out["sequence_output"] ** 2) +
              tf.reduce_sum(out["pooled_output"]))
    gradients.append(tape.gradient(loss, encoder.trainable_variables))
  plain, recomputed = gradients
  assert all(g is not None for g in plain + recomputed)
  for a, b in zip(plain, recomputed):
    np.testing.assert_allclose(tf.convert_to_tensor(b).numpy(),
                               tf.convert_to_tensor(a).numpy(),
                               rtol=1e-4, atol=1e-5)


def test_modernbert_layers_alternate_and_windows_are_local(tmp_path):
  """The fixture's layers are global, local, global; a sliding-window layer
  changes the outputs (so the parity above covers it): the same weights
  with every layer global give other sequence outputs, beyond the
  tolerance."""
  from bertexp.model.encoders import modernbert
  encoder = _convert("modernbert", str(tmp_path / "out"))
  config = encoder.config
  assert [config.is_global(i) for i in range(3)] == [True, False, True]
  assert config.rope_theta(1) == 10000.0 and config.rope_theta(2) == 160000.0
  golden = np.load(os.path.join(GOLDEN, "modernbert", "outputs.npz"))
  every_global = modernbert.ModernBertEncoder(
      modernbert.ModernBertConfig(**dict(
          vars(config), global_attn_every_n_layers=1)),
      name="encoder").build_variables()
  for ours, theirs in zip(every_global.weights, encoder.weights):
    ours.assign(theirs)
  moved = np.abs(_outputs(every_global, golden)["sequence_output"].numpy() -
                 golden["last_hidden_state"]).max()
  assert moved > 100 * TOLERANCE
