"""Per-layer TensorBoard summaries (bertexp.experiment.summary_histograms_every)
read back from the event files, on 1 and 2 replicas."""
import glob

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bertexp.model import encoders
from bertexp.train import layer_summaries
from bertexp.train import optimization
from conftest import TINY_CONFIG
from conftest import tiny_sst2_task
from conftest import tiny_trainer

BATCH = 8
EVERY = 2


def _events(folder):
  """{tag: {step: value}}; histograms as their bucket counts' total."""
  found = {}
  for path in glob.glob(f"{folder}/events.*"):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        array = tf.make_ndarray(value.tensor)
        found.setdefault(value.tag, {})[event.step] = array
  return found


def _train(task, replicas, folder, steps=4):
  """`steps` steps, one per loop; returns the per-step gradient norm the
  trainer reports and the layer weight norms before each step."""
  tf_keras.utils.set_random_seed(5)
  trainer = tiny_trainer(
      task, replicas, lambda: optimization.create_optimizer(
          10, 1, learning_rate=1e-3), BATCH, total_steps=10,
      summary_histograms_every=EVERY)
  variables = trainer.model.trainable_variables
  writer = tf.summary.create_file_writer(folder)
  gradient_norms, weight_norms = {}, {}
  with writer.as_default():
    for step in range(1, steps + 1):
      weight_norms[step] = {
          layer: np.sqrt(sum(np.sum(variables[i].numpy() ** 2) for i in idx))
          for layer, idx in layer_summaries.group_by_layer(
              variables, encoders.variable_groups(trainer.model)).items()}
      gradient_norms[step] = float(trainer.train(tf.constant(1))["gradient_norm"])
  writer.flush()
  return gradient_norms, weight_norms


@pytest.mark.parametrize("replicas", [1, 2])
def test_layer_norms_and_histograms_every_n_steps(replicas, tmp_path,
                                                  tiny_vocab):
  task = tiny_sst2_task(str(tmp_path), tiny_vocab, dropout=0.0)
  folder = str(tmp_path / "summaries")
  gradient_norms, weight_norms = _train(task, replicas, folder)
  events = _events(folder)
  layers = ["embeddings", "layer_00", "layer_01", "pooler", "head"]
  for layer in layers:
    for kind in ("gradient_norm", "weight_norm", "weights", "gradients"):
      assert sorted(events[f"{kind}/{layer}"]) == [2, 4], (kind, layer)
  for step in (2, 4):
    # The weights a step updates: their norms as they were before it.
    for layer in layers:
      assert float(events[f"weight_norm/{layer}"][step]) == pytest.approx(
          weight_norms[step][layer], rel=1e-5)
    # The layers' gradient norms make up the step's global gradient norm.
    total = np.sqrt(sum(float(events[f"gradient_norm/{layer}"][step]) ** 2
                        for layer in layers))
    assert total == pytest.approx(gradient_norms[step], rel=1e-5)
    assert float(events["gradient_norm/layer_00"][step]) > 0
  histogram = events["weights/layer_00"][2]     # [buckets, 3]: left, right, count
  assert histogram.shape[1] == 3 and histogram[:, 2].sum() > 100


def test_variables_are_grouped_by_the_layers_their_encoder_declares():
  """Groups come from the encoder's own layer_groups(), not from variable
  names: a classifier on a 2-block DeBERTa gets its embeddings, its shared
  relative table, both blocks, its pooler and the task's head; ALBERT's one
  shared block is one layer."""
  from bertexp.model import modeling
  for family, layers in (("deberta-v2", ["embeddings", "relative_embeddings",
                                         "layer_00", "layer_01", "pooler",
                                         "head"]),
                         ("albert", ["embeddings", "layer_00", "pooler",
                                     "head"])):
    extra = (dict(relative_attention=True, position_buckets=8,
                  pos_att_type=["p2c", "c2p"], type_vocab_size=0,
                  position_biased_input=False, norm_rel_ebd="layer_norm")
             if family == "deberta-v2" else dict(embedding_size=8))
    config = encoders.config_from_dict(dict(TINY_CONFIG, family=family,
                                            **extra))
    model = modeling.ClassifierModel(encoders.build_encoder(config), 2,
                                     dropout_rate=0.0).build_variables()
    variables = model.trainable_variables
    groups = layer_summaries.group_by_layer(
        variables, encoders.variable_groups(model))
    assert list(groups) == layers, family
    assert sorted(i for idx in groups.values() for i in idx) == list(
        range(len(variables)))
    assert [variables[i].name for i in groups["head"]] == [
        n for n in (v.name for v in variables) if "/classifier/" in n]
