"""Knowledge distillation: a smaller student learns from a fine-tuned run.

The teacher is a finished bertexp run of classification, regression or
SQuAD (its MODEL_DIR, best_checkpoint/ or a ckpt-N); its BERT config comes
from that run's own operative_config.gin. It is frozen and runs in inference
mode inside the train step. The student is the task bound as `student`
(data, labels, metrics, its own bert_config_file); what the run saves is
the student alone, with the student task's checkpoint layout, so eval,
predict, export, TFLite, Hugging Face export and the Predictor treat it as
any other model of that task.

The loss is a weighted sum of terms, each normalised over the global batch
as every task's loss is:
  distill    KL(teacher || student) of the outputs softened at temperature
             T, times T^2 (regression: squared error to the teacher's
             value; SQuAD: start and end positions, averaged);
  label      the student task's own loss on the labels;
  hidden     mean squared error of hidden states (embeddings and mapped
             layers) through a learned projection when widths differ;
  attention  mean squared error of the mapped layers' attention scores
             (before the softmax, real tokens only).
TinyBERT's two stages are two runs: the intermediate terms alone, then the
distill term from the first run (student_init="checkpoint",
INIT_CHECKPOINT = the first MODEL_DIR).
"""
import dataclasses
import logging
import re

import gin
import tensorflow as tf
import tf_keras

from bertexp import capabilities
from bertexp.checkpoints import run_files
from bertexp.data import meta as meta_data
from bertexp.data import pipeline
from bertexp.data.meta import UNLABELLED
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.tasks import base
from bertexp.tasks.distillation import teacher as teacher_lib
from bertexp.tasks.distillation import teacher_targets
from bertexp.util import fileio
from bertexp.util import gin_text

STUDENT_INITS = ("teacher_layers", "checkpoint", "random")


soft_cross_entropy = base.soft_cross_entropy


def layer_pairs(layer_map, student_layers, teacher_layers):
  """(student layer, teacher layer) pairs compared by the intermediate
  losses, 1-based block outputs (hidden state 0, the embeddings, is always
  paired with 0 by the hidden-state loss).

  Args:
    layer_map: "uniform" (student layer i <-> teacher layer i * k, k =
      teacher depth / student depth, as TinyBERT), "last" (last <-> last),
      or a list giving each student layer's teacher layer (1-based).
    student_layers, teacher_layers: the two depths.
  Returns:
    A list of (student, teacher) pairs.
  Raises:
    ValueError: a map that does not fit the two depths (named).
  """
  depths = (f"student of {student_layers} layers, teacher of "
            f"{teacher_layers}")
  if layer_map == "uniform":
    if teacher_layers % student_layers:
      raise ValueError(f"layer_map 'uniform' needs the teacher's depth to be "
                       f"a multiple of the student's ({depths}): give a list")
    k = teacher_layers // student_layers
    return [(i, i * k) for i in range(1, student_layers + 1)]
  if layer_map == "last":
    return [(student_layers, teacher_layers)]
  if isinstance(layer_map, (list, tuple)):
    if len(layer_map) != student_layers or not all(
        isinstance(t, int) and not isinstance(t, bool) and
        1 <= t <= teacher_layers for t in layer_map):
      raise ValueError(f"layer_map {list(layer_map)}: expected one teacher "
                       f"layer in 1..{teacher_layers} for each student layer "
                       f"({depths})")
    return list(zip(range(1, student_layers + 1), layer_map))
  raise ValueError(f"layer_map {layer_map!r}: expected 'uniform', 'last' or "
                   f"a list of teacher layers ({depths})")


def teacher_config_from_run(teacher):
  """The bert_config_file the teacher run trained with, from its
  operative_config.gin (or config.gin).

  Args:
    teacher: the run's MODEL_DIR, its best_checkpoint/ or a ckpt-N prefix.
  Returns:
    The path the run's gin config binds.
  Raises:
    FileNotFoundError: no config.gin beside the checkpoint.
    ValueError: the config binds no bert_config_file.
  """
  teacher = str(teacher).rstrip("/")
  parent = teacher.rpartition("/")[0] or "."
  folders = [teacher, parent, parent.rpartition("/")[0] or "."]
  for folder in folders:
    for path in (run_files.operative_config(folder), run_files.config(folder)):
      if tf.io.gfile.exists(path):
        return _bound_config_file(path)
  raise FileNotFoundError(f"teacher {teacher}: no operative_config.gin or "
                          "config.gin of its run (bind "
                          "bertexp.DistillationTask.teacher_bert_config_file)")


def _bound_config_file(gin_path):
  text = fileio.read_text(gin_path)
  macros = gin_text.string_macros(text)
  # gin writes long values on a continuation line ("NAME = \\\n    '...'").
  text = re.sub(r"\\\n\s*", "", text)
  match = re.search(r"^[\w.]*bert_config_file = (\S.*?)\s*$", text, re.M)
  if match:
    value = match.group(1)
    if value.startswith("%"):
      value = macros.get(value[1:], "")
    value = value.strip("'\"")
    if value:                     # as the teacher's run meant a relative one
      return gin_text.run_path(text, value)
  raise ValueError(f"{gin_path}: binds no bert_config_file for the teacher")


def _masked_mean(squared, mask):
  """Per-example mean of `squared` [B, S, ...] over real positions."""
  while len(mask.shape) < len(squared.shape):
    mask = mask[..., tf.newaxis]
  total = tf.reduce_sum(squared * mask, axis=list(range(1, len(squared.shape))))
  count = tf.reduce_sum(tf.ones_like(squared) * mask,
                        axis=list(range(1, len(squared.shape))))
  return total / tf.maximum(count, 1.0)                              # [B]


def _read_unlabelled_meta(path, student):
  """The unlabelled text's meta data, checked against the student's."""
  if not path:
    raise ValueError("bertexp.DistillationTask.unlabelled_data_path needs "
                     "unlabelled_meta_data_path (its _meta_data file)")
  meta = meta_data.read_meta_data(path, positive=("max_seq_length",),
                                  counts=("train_data_size",))
  labelled = getattr(student, "meta", {})
  if not meta.get("unlabelled"):
    raise ValueError(f"{path}: not unlabelled text (prepare it without "
                     "--label_column)")
  for field in ("max_seq_length", "label_names"):
    if meta.get(field) != labelled.get(field):
      raise ValueError(f"{path}: {field} {meta.get(field)!r} differs from the "
                       f"student's data ({labelled.get(field)!r})")
  return meta


def mix_repeats(labelled, unlabelled, ratio, most=10):
  """(k, m): repeats of the labelled and the unlabelled examples whose
  ratio m·unlabelled / (k·labelled) is nearest `ratio`, each in 1..most
  (ties: the fewer examples)."""
  if not labelled or not unlabelled:
    raise ValueError(f"unlabelled_ratio needs labelled and unlabelled "
                     f"examples (got {labelled} and {unlabelled})")
  pairs = ((k, m) for k in range(1, most + 1) for m in range(1, most + 1))
  return min(pairs, key=lambda p: (abs(p[1] * unlabelled / (p[0] * labelled) -
                                       ratio), p[0] * labelled + p[1] * unlabelled))


def _labelled(labels):
  """(labels with unlabelled ids made 0, [B] 1.0 where labelled): integer
  labels below 0 mark unlabelled text; other labels are all labelled."""
  if isinstance(labels, tf.Tensor) and labels.dtype.is_integer:
    mask = tf.cast(labels >= 0, tf.float32)
    return tf.maximum(labels, 0), mask
  first = tf.nest.flatten(labels)[0]
  return labels, tf.ones(tf.shape(first)[:1], tf.float32)


def term_weights(**weights):
  """{term: float weight} of DistillationTask's loss terms.

  Raises:
    ValueError: a negative weight, or all 0.
  """
  weights = {term: float(weight) for term, weight in weights.items()}
  if any(w < 0 for w in weights.values()) or not any(weights.values()):
    raise ValueError(f"bertexp.DistillationTask: loss weights {weights}"
                     " must be >= 0 and not all 0")
  return weights


def ratio_repeats(ratio, unlabelled_data_path, labelled, unlabelled):
  """(labelled repeats, unlabelled repeats) per epoch for
  DistillationTask.unlabelled_ratio (see mix_repeats), logged.

  Raises:
    ValueError: a ratio that is not a positive number, or no unlabelled
      text to mix.
  """
  if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or (
      not ratio > 0):
    raise ValueError(f"bertexp.DistillationTask.unlabelled_ratio {ratio!r}: "
                     "expected a number > 0 (unlabelled examples per "
                     "labelled example)")
  if not unlabelled_data_path:
    raise ValueError("bertexp.DistillationTask.unlabelled_ratio needs "
                     "unlabelled_data_path")
  repeats = mix_repeats(labelled, unlabelled, ratio)
  logging.info("unlabelled text mixed at %.3f unlabelled per labelled "
               "example (asked %s): labelled files x%d, unlabelled x%d",
               repeats[1] * unlabelled / labelled, ratio, *repeats)
  return repeats


class DistillationModel(tf_keras.Model):
  """The student, trained against a frozen teacher.

  In inference (training=False) it is the student: same outputs, same
  variables under the same checkpoint names (the student's layers are its
  own attributes). The teacher is held outside Keras' tracking: it is never
  trained, saved or exported. In training it returns {"logits": student
  outputs [B, ...], "teacher_logits": the teacher's, "hidden_loss": [B],
  "attention_loss": [B]}.
  """

  def __init__(self, student, teacher, *, hidden_pairs, attention_pairs,
               use_teacher=True, **kwargs):
    super().__init__(**kwargs)
    for name, value in vars(student).items():
      if isinstance(value, tf_keras.layers.Layer) and not name.startswith("_"):
        setattr(self, name, value)
    self._student_call = student.__call__
    self._teacher_call = teacher.__call__
    # Untracked (a function, not an attribute Keras would save under
    # "student/"): the student model itself, for exports.
    self.student_model = lambda: student
    self.hidden_pairs = hidden_pairs
    self.attention_pairs = attention_pairs
    self.use_teacher = use_teacher     # False: labels alone, no teacher pass
    student_width = student.encoder.config.hidden_size
    teacher_width = teacher.encoder.config.hidden_size
    # Only when widths differ, and only where the hidden loss is used.
    self.hidden_projection = (
        modeling.Dense(teacher_width, name="hidden_projection")
        if hidden_pairs and student_width != teacher_width else None)

  def call(self, inputs, training=None, dropout_seed=None):
    if not training:
      return self._student_call(inputs, training=False)
    layers = bool(self.hidden_pairs or self.attention_pairs)
    student = self._student_call(inputs, training=True,
                                 dropout_seed=dropout_seed,
                                 return_layers=layers)
    logits, student_layers = student if layers else (student, None)
    if teacher_targets.FEATURE in inputs:             # computed up front
      teacher_logits = tf.reshape(tf.cast(inputs[teacher_targets.FEATURE],
                                          logits.dtype), tf.shape(logits))
      teacher_layers = None
    elif self.use_teacher:
      teacher = self._teacher_call(inputs, training=False,
                                   return_layers=layers)
      teacher_logits, teacher_layers = teacher if layers else (teacher, None)
    else:
      teacher_logits, teacher_layers = tf.zeros_like(logits), None
    mask = tf.cast(inputs["input_mask"], tf.float32)                 # [B, S]
    zeros = tf.zeros(tf.shape(mask)[:1], tf.float32)
    return {"logits": logits,
            "teacher_logits": tf.stop_gradient(teacher_logits),
            "hidden_loss": (self._hidden_loss(student_layers, teacher_layers,
                                              mask) if self.hidden_pairs
                            else zeros),
            "attention_loss": (self._attention_loss(
                student_layers, teacher_layers, mask)
                               if self.attention_pairs else zeros)}

  def _hidden_loss(self, student, teacher, mask):
    losses = []
    for s, t in [(0, 0)] + list(self.hidden_pairs):
      ours = student["hidden_states"][s]                              # [B, S, Hs]
      if self.hidden_projection is not None:
        ours = tf.cast(self.hidden_projection(ours), tf.float32)      # [B, S, Ht]
      theirs = tf.stop_gradient(teacher["hidden_states"][t])          # [B, S, Ht]
      losses.append(_masked_mean(tf.square(ours - theirs), mask))
    return tf.add_n(losses) / len(losses)                             # [B]

  def _attention_loss(self, student, teacher, mask):
    # Real query and key positions only: [B, 1, S, S].
    pair_mask = mask[:, tf.newaxis, :, tf.newaxis] * mask[:, tf.newaxis,
                                                          tf.newaxis, :]
    losses = []
    for s, t in self.attention_pairs:
      ours = student["attention_scores"][s - 1]                       # [B, N, S, S]
      theirs = tf.stop_gradient(teacher["attention_scores"][t - 1])
      squared = tf.square(ours - theirs) * pair_mask
      count = tf.reduce_sum(pair_mask, [1, 2, 3]) * tf.cast(
          tf.shape(ours)[1], tf.float32)
      losses.append(tf.reduce_sum(squared, [1, 2, 3]) / tf.maximum(count, 1.0))
    return tf.add_n(losses) / len(losses)                             # [B]

  def teacher_outputs(self, inputs, return_layers=False):
    """The teacher's outputs for {model input: [B, S]} (inference); with
    return_layers, (outputs, {"hidden_states", "attention_scores"}) as the
    encoder gives them."""
    return self._teacher_call(inputs, training=False,
                              return_layers=return_layers)

  def build_variables(self):
    """Creates every variable (the projection's too) by one training call."""
    self(modeling.dummy_inputs(), training=True)
    return self


@gin.configurable(module="bertexp")
class DistillationTask(base.Task):
  """A student task trained to match a fine-tuned teacher run.

  Args:
    student: the task whose data, labels, metrics and bert_config_file the
      student uses: any task trained from prepared records
      (bertexp.tasks.base.RecordTask, the interface the student is used
      through), e.g. @bertexp.ClassificationTask() for classification or
      regression, @bertexp.QuestionAnsweringTask() for SQuAD.
    teacher: the teacher run: MODEL_DIR (its best checkpoint when it has
      one, else its newest), a best_checkpoint/ folder or a ckpt-N prefix.
    teacher_bert_config_file: the teacher's bert_config.json; default: the
      one its run's operative_config.gin binds.
    student_init: "teacher_layers" (embeddings, pooler and the layers of
      `student_layers` copied from the teacher; the widths must agree),
      "checkpoint" (INIT_CHECKPOINT, e.g. a small pretrained BERT or a first
      distillation stage) or "random".
    student_layers: for "teacher_layers", the teacher layer (0-based) each
      student layer copies; default every k-th from 0 (k = teacher depth /
      student depth), as DistilBERT.
    temperature: T of the distill term.
    distill_weight, label_weight, hidden_weight, attention_weight: the
      weights of the four terms (a weight of 0 drops the term and its work).
    layer_map: for the hidden and attention terms: "uniform", "last" or a
      list (see `layer_pairs`).
    unlabelled_data_path, unlabelled_meta_data_path: unlabelled text
      (`bertexp prepare classification` without --label_column) that the
      teacher labels: its records join the student's training records in
      one shuffled stream, and count towards epochs; the label term skips
      them.
    unlabelled_ratio: unlabelled examples per labelled example in an epoch
      (None: the two files' sizes decide). Whole files are repeated to get
      it: the labelled and unlabelled files k and m times each (1 to 10),
      the pair nearest the ratio; the log says which.
    teacher_targets: a folder for the teacher's outputs computed once:
      `--mode=distill_targets` writes them there (see
      bertexp.tasks.distillation.teacher_targets), and training then reads them instead
      of calling the teacher in every step (the distill term; the hidden
      and attention terms need the teacher's layers, so their weights must
      be 0). Classification and regression students.
  """

  def __init__(self, *, student=gin.REQUIRED, teacher=gin.REQUIRED,
               teacher_bert_config_file=None, student_init="teacher_layers",
               student_layers=None, temperature=1.0, distill_weight=1.0,
               label_weight=0.0, hidden_weight=0.0, attention_weight=0.0,
               layer_map="uniform", unlabelled_data_path=None,
               unlabelled_meta_data_path=None, unlabelled_ratio=None,
               teacher_targets=None):
    if not isinstance(student, base.RecordTask):
      raise ValueError("bertexp.DistillationTask.student: expected a task "
                       "trained from prepared records (a "
                       "bertexp.tasks.base.RecordTask such as "
                       f"@bertexp.ClassificationTask()), got {student!r}")
    if student_init not in STUDENT_INITS:
      raise ValueError(f"bertexp.DistillationTask.student_init "
                       f"{student_init!r}: expected one of {STUDENT_INITS}")
    if not temperature > 0:
      raise ValueError(f"bertexp.DistillationTask.temperature {temperature}: "
                       "must be > 0")
    self.weights = term_weights(distill=distill_weight, label=label_weight,
                                hidden=hidden_weight,
                                attention=attention_weight)
    self.student = student
    self.teacher = str(teacher)
    self.teacher_config_file = (teacher_bert_config_file or
                                teacher_config_from_run(self.teacher))
    self.student_init = student_init
    self.student_layers = student_layers
    self.temperature = float(temperature)
    self.layer_map = layer_map
    self._initialisation = None
    self.unlabelled_data_path = unlabelled_data_path
    self.unlabelled_meta = (
        _read_unlabelled_meta(unlabelled_meta_data_path, student)
        if unlabelled_data_path else None)
    self.unlabelled_meta_data_path = unlabelled_meta_data_path
    self.repeats = (1, 1) if unlabelled_ratio is None else ratio_repeats(
        unlabelled_ratio, unlabelled_data_path, student.num_train_examples(),
        int((self.unlabelled_meta or {}).get("train_data_size", 0)))
    self.teacher_targets = teacher_targets
    if teacher_targets and (self.weights["hidden"] or
                            self.weights["attention"]):
      raise ValueError("bertexp.DistillationTask.teacher_targets hold the "
                       "teacher's outputs only: hidden_weight and "
                       "attention_weight must be 0")
    self._as_student = capabilities.require(
        student, capabilities.DistillationStudent,
        "bertexp.DistillationTask.student")
    if teacher_targets and not self._as_student.offline_targets:
      raise ValueError("bertexp.DistillationTask.teacher_targets: a "
                       f"{type(student).__name__} student takes its "
                       "teacher's outputs in the step only (the targets "
                       "hold classification and regression outputs)")
    self._teacher_prefix = None

  # -- model ---------------------------------------------------------------
  def build_model(self):
    student = self.student.build_model()
    teacher, prefix = teacher_lib.build_teacher(
        self.student, self.teacher_config_file, self.teacher)
    self._teacher_prefix = prefix
    s_config, t_config = student.encoder.config, teacher.encoder.config
    pairs = layer_pairs(self.layer_map, s_config.num_hidden_layers,
                        t_config.num_hidden_layers)
    if self.weights["attention"] and (s_config.num_attention_heads !=
                                      t_config.num_attention_heads):
      raise ValueError(
          f"attention_weight needs equal head counts: the student has "
          f"{s_config.num_attention_heads}, the teacher "
          f"{t_config.num_attention_heads}")
    if self.student_init == "teacher_layers":
      self._initialisation = teacher_lib.copy_teacher_layers(
          student, teacher, prefix, self.student_layers)
      logging.info("student initialised: %s", self._initialisation)
    model = DistillationModel(
        student, teacher,
        hidden_pairs=pairs if self.weights["hidden"] else [],
        attention_pairs=pairs if self.weights["attention"] else [],
        use_teacher=not self.teacher_targets and any(
            self.weights[t] for t in ("distill", "hidden", "attention")),
        name="distillation_model")
    return model.build_variables()

  # -- loss ----------------------------------------------------------------
  def _distill_per_example(self, teacher_logits, logits):
    return self._as_student.loss(teacher_logits, logits,
                                 self.temperature)                   # [B]

  def loss_weights(self, labels):
    first = tf.nest.flatten(labels)[0]
    ones = tf.ones(tf.shape(first)[:1], tf.float32)                  # [B]
    weights = {name: ones for name in ("distill", "hidden", "attention")
               if self.weights[name]}
    if self.weights["label"]:
      labels, labelled = _labelled(labels)
      weights.update({f"label/{name}": w * labelled for name, w in
                      self.student.loss_weights(labels).items()})
    return weights

  def loss_numerators(self, labels, outputs):
    numerators = {}
    if self.weights["distill"]:
      numerators["distill"] = self.weights["distill"] * \
          self._distill_per_example(outputs["teacher_logits"],
                                    outputs["logits"])
    for name in ("hidden", "attention"):
      if self.weights[name]:
        numerators[name] = self.weights[name] * outputs[f"{name}_loss"]
    if self.weights["label"]:
      labels, labelled = _labelled(labels)
      numerators.update({
          f"label/{name}": self.weights["label"] * labelled * tf.cast(
              value, tf.float32)
          for name, value in self.student.loss_numerators(
              labels, outputs["logits"]).items()})
    return numerators

  def per_example_loss(self, labels, outputs):
    """The student task's loss on the labels (what evaluation reports)."""
    return self.student.per_example_loss(labels, outputs)

  def build_train_metrics(self):
    return self.student.build_train_metrics()

  def update_train_metrics(self, metrics, labels, outputs):
    labels, labelled = _labelled(labels)
    for metric in metrics:        # the student's metrics, labelled rows only
      metric.update_state(labels, outputs["logits"], sample_weight=labelled)

  # -- everything else is the student task's --------------------------------
  @property
  def meta(self):
    return self.student.meta

  def training_files(self):
    """The training files, in order: the student's, then the unlabelled
    text's (each once; `stream_files` repeats them)."""
    path = self.student.train_data_path
    if self.unlabelled_data_path:
      path = f"{path},{self.unlabelled_data_path}"
    return pipeline.list_files(path)

  def stream_files(self, files):
    """`files` (aligned with training_files(): a path for each, e.g. its
    teacher targets) with every labelled file `repeats[0]` times and every
    unlabelled file `repeats[1]` times: the training stream's file list."""
    labelled = len(pipeline.list_files(self.student.train_data_path))
    return (list(files[:labelled]) * self.repeats[0] +
            list(files[labelled:]) * self.repeats[1])

  def write_teacher_targets(self, model):
    """--mode=distill_targets: the teacher's outputs for every training
    record, into `teacher_targets` (see bertexp.tasks.distillation.teacher_targets).

    Args:
      model: the DistillationModel this task built (its teacher).
    Returns:
      The targets' info.
    Raises:
      ValueError: no teacher_targets folder bound.
    """
    if not self.teacher_targets:
      raise ValueError("--mode=distill_targets needs "
                       "bertexp.DistillationTask.teacher_targets (a folder)")
    meta = self.student.meta
    return teacher_targets.write(
        self.teacher_targets, sources=self.training_files(),
        decode=pipeline.record_decoder(meta["max_seq_length"],
                                       meta["label_type"]),
        teacher_outputs=model.teacher_outputs, teacher=self._teacher_prefix)

  def _targets_inputs(self, input_context, batch_size, train_order):
    info = teacher_targets.read_info(self.teacher_targets,
                                     teacher=self._teacher_prefix,
                                     sources=self.training_files())
    meta = self.student.meta
    return pipeline.make_dataset(
        ",".join(self.stream_files(info["targets"])),
        seq_length=meta["max_seq_length"],
        label_type=meta["label_type"], batch_size=batch_size,
        is_training=True, input_context=input_context,
        train_order=pipeline.train_order_or_default(train_order, self.seed),
        shuffle_buffer=self.student.shuffle_buffer_size,
        float_features={teacher_targets.FEATURE:
                        info["outputs_per_example"]})

  def build_inputs(self, split, input_context=None, batch_size=0,
                   train_order=None):
    if split == "train" and self.teacher_targets:
      return self._targets_inputs(input_context, batch_size, train_order)
    student = self.student
    if split == "train" and self.unlabelled_data_path:
      student = student.with_train_data(      # one stream over both files
          ",".join(self.stream_files(self.training_files())))
    return student.build_inputs(split, input_context, batch_size, train_order)

  def eval_outputs(self, features, labels, outputs):
    return self.student.eval_outputs(features, labels, outputs)

  def finalize_eval(self, gathered):
    return self.student.finalize_eval(gathered)

  def eval_splits(self):
    return self.student.eval_splits()

  @property
  def num_labels(self):
    return getattr(self.student, "num_labels", 0)

  @property
  def seed(self):
    """The student's SEED: the data order is the student's."""
    return self.student.seed

  def capabilities(self):
    """The student's capabilities (an export saves the student alone, never
    the teacher or the wrapper), training data with the unlabelled text,
    teacher targets, and how build_model initialised the student."""
    kept = [c for c in self.student.capabilities() if not isinstance(
        c, (capabilities.DistillationStudent, capabilities.RunHooks))]
    declared = [
        capabilities.TrainingData(
            num_examples=self.num_train_examples, files=self.input_files,
            check=self.check_training_data),
        capabilities.TeacherTargets(write=self.write_teacher_targets),
        capabilities.RunHooks(initialisation=lambda: self._initialisation)]
    serving = capabilities.find(self.student, capabilities.SavedModelServing)
    if serving:
      declared.append(dataclasses.replace(
          serving, serving_model=lambda model: model.student_model()))
    return capabilities.merged(kept, *declared)

  def input_files(self):
    files = self.student.input_files()
    if self.unlabelled_data_path:
      files = dict(files, data_files=list(files["data_files"]) + [
          self.unlabelled_meta_data_path, self.unlabelled_data_path])
    return files

  def check_training_data(self):
    self.student.check_training_data()
    if self.unlabelled_data_path:
      pipeline.check_training_files(
          self.unlabelled_data_path, pipeline.record_decoder(
              self.unlabelled_meta["max_seq_length"], "int"),
          config=encoders.read_config(
              self.student.bert_config_file),
          label_ranges={"label": (UNLABELLED, UNLABELLED + 1)},
          source=self.unlabelled_meta_data_path)

  def num_train_examples(self):
    return self.repeats[0] * self.student.num_train_examples() + (
        self.repeats[1] * int(self.unlabelled_meta.get("train_data_size", 0))
        if self.unlabelled_meta else 0)

  def selection_metric(self):
    return self.student.selection_metric()

