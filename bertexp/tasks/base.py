"""The Task interface: what a task supplies to the one trainer.

A task owns no variables at construction; it builds them on request inside
the strategy scope. It never owns a train step: the trainer calls `loss`,
`update_train_metrics`, `eval_outputs` and `finalize_eval`.
"""
import abc
from typing import Dict, List

import tensorflow as tf
import tf_keras

from bertexp.data import pipeline


class Task(abc.ABC):

  @abc.abstractmethod
  def build_model(self) -> tf_keras.Model:
    """The model, variables created (call inside strategy.scope())."""

  @abc.abstractmethod
  def build_inputs(self, split: str, input_context=None, batch_size: int = 0,
                   train_order=None) -> tf.data.Dataset:
    """(features, labels) batches of `split`; features["example_weight"].

    Training reads in the order of `train_order`
    (`bertexp.data.pipeline.TrainOrder`: seed and start position; default
    the task's seed from the start) and adds features["record_index"]."""

  def default_train_order(self, train_order):
    """`train_order`, or the task's seed (0 when None) from the start."""
    return train_order or pipeline.TrainOrder(seed=getattr(self, "seed", 0) or 0)

  @abc.abstractmethod
  def per_example_loss(self, labels, outputs) -> tf.Tensor:
    """[B] loss of each example; the trainer averages over the global batch."""

  def loss_weights(self, labels) -> Dict[str, tf.Tensor]:
    """{term: [B] weights}, from the labels alone.

    The training loss is a sum of terms; each term is the sum of its
    `loss_numerators` over the global batch divided by the sum of these
    weights over the global batch (all replicas), so it does not depend on
    how the batch is split. Default: one term, weight 1 per example = the
    mean per-example loss over the global batch.
    """
    first = tf.nest.flatten(labels)[0]
    return {"loss": tf.ones(tf.shape(first)[:1], tf.float32)}

  def loss_numerators(self, labels, outputs) -> Dict[str, tf.Tensor]:
    """{term: [B]} numerators matching `loss_weights`' terms."""
    return {"loss": self.per_example_loss(labels, outputs)}

  def build_train_metrics(self) -> List[tf_keras.metrics.Metric]:
    """Streaming, in-graph metrics reported every loop (besides the loss)."""
    return []

  def update_train_metrics(self, metrics, labels, outputs):
    del metrics, labels, outputs

  @abc.abstractmethod
  def eval_outputs(self, features, labels, outputs) -> Dict[str, tf.Tensor]:
    """Per-example tensors gathered to the host for `finalize_eval`."""

  @abc.abstractmethod
  def finalize_eval(self, gathered: Dict) -> Dict[str, float]:
    """Whole-eval-set metrics from the gathered numpy arrays."""

  def eval_splits(self) -> Dict[str, int]:
    """{split name: number of examples} to evaluate on."""
    return {}

  def serving_outputs(self, outputs) -> Dict[str, tf.Tensor]:
    """What the exported SavedModel returns for the model's outputs."""
    raise NotImplementedError(f"{type(self).__name__} cannot be exported")

  def text_serving(self):
    """None, or what a raw-text serving signature needs (see export.py)."""
    return None

  def predict_splits(self):
    """Splits that --mode=predict writes predictions for."""
    return []

  def write_predictions(self, gathered, output_dir, split):
    raise NotImplementedError(f"{type(self).__name__} cannot predict")

  def input_files(self) -> Dict:
    """{"vocab_file": path or None, "data_files": [paths]} for provenance."""
    return {"vocab_file": None, "data_files": []}

  def check_training_data(self):
    """Before the first step: raises a clear error when the training files
    disagree with the configuration (see
    `bertexp.data.pipeline.check_training_files`)."""

  def after_training(self, model, model_dir):
    """Called once training ends (e.g. pretraining writes its encoder)."""
    del model, model_dir

  def num_train_examples(self) -> int:
    return 0

  def model_shape(self):
    """(BertConfig, max_seq_length, bertexp.model.memory_plan.Head): what the
    memory plan of --mode=plan needs, read without building the model."""
    raise NotImplementedError

  def selection_metric(self) -> str:
    """The metric that selects the best checkpoint and sweep configuration."""
    return "loss"
