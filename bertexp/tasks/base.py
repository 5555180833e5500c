"""The Task interface: what a task supplies to the one trainer.

A task owns no variables at construction; it builds them on request inside
the strategy scope. It never owns a train step: the trainer calls `loss`,
`update_train_metrics`, `eval_outputs` and `finalize_eval`.
"""
import abc
import copy
import logging
from typing import Any, Dict, List, Optional, Sequence

import tensorflow as tf
import tf_keras

from bertexp.model import encoders
from bertexp import capabilities


def soft_cross_entropy(teacher_logits, student_logits, temperature, axis=-1):
  """Per-example KL(teacher || student) at `temperature`, times T^2.

  Args:
    teacher_logits, student_logits: [B, ..., C] (classes on `axis`).
    temperature: T > 0; softens both distributions.
    axis: the class axis.
  Returns:
    [B, ...] float32 (the class axis reduced); 0 where the two agree.
  """
  t = tf.cast(teacher_logits, tf.float32) / temperature
  s = tf.cast(student_logits, tf.float32) / temperature
  log_p_teacher = tf.nn.log_softmax(t, axis=axis)
  kl = tf.reduce_sum(tf.exp(log_p_teacher) * (
      log_p_teacher - tf.nn.log_softmax(s, axis=axis)), axis=axis)
  return kl * (temperature ** 2)


def checked_bert_config(bert_config_file, meta, meta_data_path):
  """The model's BertConfig, checked against `bertexp prepare`'s meta data.

  Raises:
    ValueError: the data's max_seq_length is above the model's position
      embeddings, or its vocabulary does not fit the model's (naming both
      files).
  """
  config = encoders.read_config(bert_config_file)
  if meta["max_seq_length"] > config.max_seq_length:
    raise ValueError(
        f"{meta_data_path}: max_seq_length {meta['max_seq_length']} is above "
        f"the {config.max_seq_length} positions of {bert_config_file}")
  if meta.get("vocab_size", config.vocab_size) > config.vocab_size:
    raise ValueError(f"{meta_data_path}: data vocab of {meta['vocab_size']} "
                     f"ids does not fit the model's vocab_size "
                     f"{config.vocab_size}")
  return config


def serving_vocab(meta, meta_data_path):
  """The vocab_file `bertexp prepare` recorded, for a serve_text signature;
  None (with a warning) when it is not there any more."""
  vocab = meta.get("vocab_file")
  if not vocab or not tf.io.gfile.exists(vocab):
    logging.warning("%s: vocab_file %r not found: no serve_text signature",
                    meta_data_path, vocab)
    return None
  return vocab


class Task(abc.ABC):
  """The plugin interface: what a task supplies to the one Trainer.

  A task is a small object built from gin bindings; it creates no TF
  variables until `build_model` is called inside the strategy's scope, and
  it never writes a train step: the Trainer calls `loss_weights` /
  `loss_numerators` (or `per_example_loss`), the train metrics,
  `eval_outputs` and `finalize_eval`. The loop around it (checkpoints,
  resume, evaluation schedule) is the same for every task.

  A new task is a folder (bertexp/tasks/<task>/ or a package declared
  through the "bertexp.tasks" entry point, see bertexp.tasks.catalog)
  whose task.py subclasses Task, implements the abstract methods and is
  registered with `@gin.configurable(module="bertexp")`; a .gin file then
  binds `bertexp.experiment.task = @bertexp.MyTask()`.

  What a task can do besides training is not a method here: it lists its
  capabilities (`capabilities()`, see bertexp.tasks.capabilities), and a
  shared layer that needs one asks for it by kind; a capability the task
  lacks is a one-line ValueError naming the task and the capability
  (export-onnx of a task without an ONNX graph, --mode=distill_targets of
  a task without a teacher).

  Shape legend: B examples in a (per-replica) batch, S sequence length.
  """

  # The seed of the training data's order (None: drawn once per run and
  # kept in the checkpoint); gin-configurable tasks bind it from SEED.
  seed: Optional[int] = None
  # Whether batches may be cut to their longest real sequence (dynamic
  # padding): True for inputs of one left-aligned sequence per row; a task
  # whose rows hold several sequences end to end says False.
  dynamic_padding: bool = True
  # Whether the loss gathers outputs across replicas inside the step
  # (ReplicaContext.all_gather: in-batch negatives over the global batch).
  # Mirrored replicas cannot XLA-compile such a step's forward and backward
  # pass on their own (jit_compile); the trainer then runs them uncompiled
  # there (a TPU compiles the whole replica step).
  gathers_across_replicas: bool = False

  @property
  def eval_dynamic_padding(self) -> bool:
    """Whether evaluation and prediction batches may be cut to their
    longest real sequence (default: as training's, `dynamic_padding`)."""
    return self.dynamic_padding

  @abc.abstractmethod
  def build_model(self) -> tf_keras.Model:
    """The model, variables created (call inside strategy.scope()).

    Returns:
      A tf_keras.Model taking the features dict (int32 [B, S] ids) and
      returning what `per_example_loss` and `eval_outputs` read.
    """

  @abc.abstractmethod
  def build_inputs(self, split: str, input_context=None, batch_size: int = 0,
                   train_order=None) -> tf.data.Dataset:
    """(features, labels) batches of `split`.

    Args:
      split: "train", an eval split of `eval_splits` or a predict split.
      input_context: the tf.distribute.InputContext of this input pipeline
        (sharding), or None.
      batch_size: examples per batch of this pipeline (per replica).
      train_order: for "train", a `bertexp.data.pipeline.TrainOrder` (seed
        and start position; default: the task's seed from the start).
    Returns:
      A dataset of (features, labels); features["example_weight"] [B] is 0
      on padding rows, and training adds features["record_index"] [B].
    """

  @abc.abstractmethod
  def per_example_loss(self, labels: Any, outputs: Any) -> tf.Tensor:
    """The loss of each example.

    Args:
      labels: the labels of a batch, as `build_inputs` yields them.
      outputs: the model's outputs for that batch.
    Returns:
      [B] float32; the trainer averages it over the global batch.
    """

  def loss_weights(self, labels: Any) -> Dict[str, tf.Tensor]:
    """{term: [B] weights}, from the labels alone.

    The training loss is a sum of terms; each term is the sum of its
    `loss_numerators` over the global batch divided by the sum of these
    weights over the global batch (all replicas), so it does not depend on
    how the batch is split. Default: one term, weight 1 per example = the
    mean per-example loss over the global batch.
    """
    first = tf.nest.flatten(labels)[0]
    return {"loss": tf.ones(tf.shape(first)[:1], tf.float32)}

  def loss_numerators(self, labels: Any, outputs: Any) -> Dict[str, tf.Tensor]:
    """{term: [B]} numerators matching `loss_weights`' terms."""
    return {"loss": self.per_example_loss(labels, outputs)}

  def build_train_metrics(self) -> List[tf_keras.metrics.Metric]:
    """Streaming, in-graph metrics reported every loop (besides the loss)."""
    return []

  def update_train_metrics(self, metrics: List[tf_keras.metrics.Metric],
                           labels: Any, outputs: Any) -> None:
    """Updates `build_train_metrics`' metrics with one batch."""
    del metrics, labels, outputs

  @abc.abstractmethod
  def eval_outputs(self, features: Dict[str, tf.Tensor], labels: Any,
                   outputs: Any) -> Dict[str, tf.Tensor]:
    """Per-example tensors gathered to the host for `finalize_eval`.

    Returns:
      {name: [B, ...] tensor}; rows of every replica are gathered in the
      eval file's order, padding rows included (their example_weight is 0).
    """

  @abc.abstractmethod
  def finalize_eval(self, gathered: Dict[str, Any]) -> Dict[str, float]:
    """Whole-eval-set metrics (F1, MCC, Spearman, EM...).

    Args:
      gathered: {name: numpy array} of `eval_outputs` over the whole split.
    Returns:
      {metric name: value}.
    """

  def eval_splits(self) -> Dict[str, int]:
    """{split name: number of examples} to evaluate on."""
    return {}

  def selection_metric(self) -> str:
    """The metric that selects the best checkpoint and sweep configuration."""
    return "loss"

  def capabilities(self) -> Sequence[capabilities.Capability]:
    """What the task can do besides training (exports, serving, Predictor
    methods, predictions, teacher targets, the memory plan...), each a
    capability of bertexp.tasks.capabilities; shared layers ask for the
    kind they need. Default: none."""
    return ()


class RecordTask(Task):
  """A task trained from `bertexp prepare` TFRecords and their meta data:
  what such tasks share, and the interface a distillation student is used
  through (bertexp.DistillationTask takes any RecordTask as its student).

  Attributes:
    bert_config_file: the encoder's config file.
    meta_data_path: the data's meta data file; `meta` its content, read and
      checked by the subclass.
    paths: {split: its record files (comma-separated, globs) or None};
      "train" is the training data.
    seed: the head's initialiser and the training data's order (SEED).
    shuffle_buffer_size: the training shuffle window (0: file order).
    dropout_rate: the head's dropout (None: the config's hidden dropout).
  """

  def __init__(self, *, bert_config_file: str, meta_data_path: str,
               meta: Dict[str, Any], paths: Dict[str, Optional[str]],
               seed: Optional[int] = None, shuffle_buffer_size: int = 10000,
               dropout_rate: Optional[float] = None):
    self.bert_config_file = bert_config_file
    self.meta_data_path = meta_data_path
    self.meta = meta
    self.paths = dict(paths)
    self.seed = seed
    self.shuffle_buffer_size = shuffle_buffer_size
    self.dropout_rate = dropout_rate

  @property
  def train_data_path(self) -> Optional[str]:
    """The training records (comma-separated, globs), or None."""
    return self.paths.get("train")

  def with_train_data(self, path: str) -> "RecordTask":
    """A copy of this task that trains on the records `path` (everything
    else shared): e.g. a distillation student's labelled and unlabelled
    records in one stream."""
    task = copy.copy(self)
    task.paths = dict(self.paths, train=path)
    return task

  def with_encoder_config(self, bert_config_file: str) -> "RecordTask":
    """A copy of this task whose model is built from another encoder config
    (a distillation teacher's), on the same data."""
    task = copy.copy(self)
    task.bert_config_file = bert_config_file
    return task

  def encoder_config(self):
    """The encoder's config, checked against the meta data (see
    `checked_bert_config`)."""
    return checked_bert_config(self.bert_config_file, self.meta,
                               self.meta_data_path)

  def head_dropout(self, config) -> float:
    """The head's dropout rate: dropout_rate, else the config's hidden
    dropout."""
    return (config.hidden_dropout_prob if self.dropout_rate is None
            else self.dropout_rate)

  def num_train_examples(self) -> int:
    """Training examples per epoch, as the meta data counts them."""
    return int(self.meta.get("train_data_size", 0))

  def input_files(self) -> Dict[str, Any]:
    """{"vocab_file": path or None, "data_files": [paths]} for provenance."""
    return {"vocab_file": self.meta.get("vocab_file"),
            "data_files": [self.meta_data_path,
                           *[p for p in self.paths.values() if p]]}

  def check_training_data(self) -> None:
    """Before the first step: raises a clear error when the training files
    disagree with the configuration (see
    `bertexp.data.pipeline.check_training_files`)."""

  def distillation_loss(self, teacher_outputs, outputs, temperature):
    """[B] how far `outputs` are from a teacher's, for a task that declares
    capabilities.DistillationStudent with it (default: the softened
    cross-entropy over the last axis, for class logits)."""
    return soft_cross_entropy(teacher_outputs, outputs, temperature)

  def capabilities(self) -> Sequence[capabilities.Capability]:
    """Training data from records; subclasses add theirs
    (`capabilities.merged`)."""
    return (capabilities.TrainingData(
                num_examples=self.num_train_examples,
                files=self.input_files, check=self.check_training_data),)
