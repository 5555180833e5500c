"""Sentence(-pair) classification and regression (GLUE and custom TSV data)."""
import os

import gin
import numpy as np
import tensorflow as tf
import tf_keras

from bertexp import capabilities
from bertexp.checkpoints import to_huggingface
from bertexp.data import meta as meta_data
from bertexp.data import pipeline
from bertexp.model import encoders
from bertexp.model import memory_plan
from bertexp.model import modeling
from bertexp.tasks import base
from bertexp.tasks import text_serving
from bertexp.tasks.classification import metrics as glue_metrics
from bertexp.tasks.classification import onnx_head as onnx_writers
from bertexp.tasks.classification import predictions

def tflite_outputs(outputs):
  """A TFLite classifier's outputs of logits [B, L]."""
  return {"probabilities": tf.nn.softmax(outputs, axis=-1)}          # [B, L]


def _read_meta(path):
  """The fields training needs, with their types (a clear error naming the
  file, not a KeyError mid-run)."""
  meta = meta_data.read_meta_data(
      path, positive=("max_seq_length", "num_labels"),
      counts=("train_data_size", "eval_data_size", "test_data_size",
              "vocab_size"))
  if meta.get("label_type") not in ("int", "float"):
    raise ValueError(f"{path}: label_type must be 'int' or 'float', got "
                     f"{meta.get('label_type')!r}")
  meta_data.split_sizes(meta, path)
  return meta


def _class_weights(setting, meta, path):
  """The per-label loss weights [L] of `setting` (see ClassificationTask),
  or None."""
  if setting is None:
    return None
  names = list(meta.get("label_names") or [])
  if meta["num_labels"] == 1 or not names:
    raise ValueError(f"{path}: class_weights needs classification labels "
                     "(this data is regression or has no label names)")
  if setting == "balanced":
    counts = meta.get("label_counts")
    if not isinstance(counts, dict) or sorted(counts) != sorted(names):
      raise ValueError(f"{path}: class_weights='balanced' needs the training "
                       "label counts (label_counts), which `bertexp prepare` "
                       "writes: prepare the data again")
    if min(counts.values()) <= 0:
      missing = [n for n in names if counts[n] <= 0]
      raise ValueError(f"{path}: labels {missing} never occur in the "
                       "training data: 'balanced' cannot weigh them")
    total = sum(counts.values())
    return [total / (len(names) * counts[n]) for n in names]
  if isinstance(setting, dict):
    unknown = sorted(set(setting) - set(names))
    if unknown:
      raise ValueError(f"class_weights names {unknown}, not labels of {path} "
                       f"({names})")
    weights = [float(setting.get(n, 1.0)) for n in names]
    if min(weights) < 0 or not all(np.isfinite(weights)) or not any(weights):
      raise ValueError(f"class_weights {setting}: weights must be finite, "
                       ">= 0, and not all 0")
    return weights
  raise ValueError(f"class_weights must be None, 'balanced' or {{label: "
                   f"weight}}, got {setting!r}")


# modeling.ClassifierModel's `classifier` -> BertForSequenceClassification.
HUGGINGFACE_HEADS = (to_huggingface.HeadMapping(
    task="bertexp.ClassificationTask", layer="classifier", hf_module="classifier",
    architecture="ForSequenceClassification", labels="names_or_regression"),)


@gin.configurable(module="bertexp")
class ClassificationTask(base.RecordTask):
  """Classifier on the pooled output; regression when num_labels == 1.

  Data comes from `bertexp prepare`: `*_meta_data` says the number of labels,
  their names, the label type and the split sizes.

  Args (besides the data paths):
    class_weights: None (every example weighs 1), "balanced" (weight of
      class c = n_train / (n_labels * count_c), the counts that `prepare`
      wrote into the meta data: scikit-learn's rule) or {label name: weight}
      (unnamed labels weigh 1). The loss is the weighted cross-entropy
      divided by the summed weights of the global batch (PyTorch's
      CrossEntropyLoss(weight=...) over the global batch), on any strategy.
    metric_names: eval metrics; the first selects the best checkpoint.
      Classification: accuracy, f1 (of label 1), matthews_corrcoef,
      macro_f1, per_class (precision_/recall_/f1_<label> of every label).
    window_pooling: data prepared with --doc_stride (long documents in
      windows): "mean" or "max" of a document's window logits (regression:
      values) is its output; eval and predict score documents, each once.
    fold: k-fold cross-validation (data prepared with --folds): train on
      the other folds' rows, evaluate on fold `fold`'s, and predict them as
      split "oof" (out-of-fold: test_results_oof.tsv, ids = training rows);
      the bound data paths are not used. None: the usual splits.
  """

  def __init__(self, *, bert_config_file=gin.REQUIRED,
               meta_data_path=gin.REQUIRED, train_data_path=None,
               eval_data_path=None, extra_eval_data_paths=None,
               test_data_path=None, extra_test_data_paths=None,
               dropout_rate=None, metric_names=None, class_weights=None,
               window_pooling="mean", fold=None, seed=None,
               shuffle_buffer_size=10000):
    super().__init__(
        bert_config_file=bert_config_file, meta_data_path=meta_data_path,
        meta=_read_meta(meta_data_path), paths={"train": train_data_path},
        seed=seed, shuffle_buffer_size=shuffle_buffer_size,
        dropout_rate=dropout_rate)
    self.eval_paths = {}
    if eval_data_path:
      self.eval_paths["eval"] = eval_data_path
    self.eval_paths.update(extra_eval_data_paths or {})
    self.test_paths = {"test": test_data_path} if test_data_path else {}
    self.test_paths.update(extra_test_data_paths or {})
    self.num_labels = self.meta["num_labels"]
    self.is_regression = self.num_labels == 1
    default = (("spearman", "pearson") if self.is_regression else
               glue_metrics.TASK_METRICS.get(self.meta.get("task"), ("accuracy",)))
    self.metric_names = tuple(metric_names or default)
    if not self.is_regression and (
        self.metric_names[0] == "per_class" or
        set(self.metric_names) - set(glue_metrics.METRICS)):
      raise ValueError(f"metric_names {list(self.metric_names)}: expected "
                       f"names of {list(glue_metrics.METRICS)}, the first "
                       "not per_class (it selects the best checkpoint)")
    self.class_weights = _class_weights(class_weights, self.meta,
                                        meta_data_path)
    if window_pooling not in ("mean", "max"):
      raise ValueError(f"window_pooling {window_pooling!r}: expected 'mean' "
                       "or 'max'")
    self.window_pooling = window_pooling
    # Long documents in windows (prepare --doc_stride): records carry the
    # document each window belongs to.
    self.int_features = ("document_id",) if self.meta.get("doc_stride") else ()
    self.split_names = {}          # split -> its entry in split_sizes
    if fold is not None:
      self._use_fold(fold)

  def _use_fold(self, fold):
    """Points train / eval / "oof" at fold `fold`'s records."""
    count = (self.meta.get("folds") or {}).get("count")
    if not count:
      raise ValueError(f"{self.meta_data_path}: fold={fold} but the data has "
                       "no folds (bertexp prepare classification --folds=K)")
    if not isinstance(fold, int) or not 0 <= fold < count:
      raise ValueError(f"fold {fold!r}: expected 0 to {count - 1} "
                       f"({self.meta_data_path} has {count} folds)")
    folder = os.path.dirname(self.meta_data_path)
    path = lambda part: os.path.join(
        folder, f"{self.meta['task']}_fold{fold}_{part}.tf_record")
    self.paths["train"] = path("train")
    self.eval_paths = {"eval": path("eval")}
    self.test_paths = {"oof": path("eval")}
    self.split_names = {"train": f"fold{fold}_train",
                        "eval": f"fold{fold}_eval", "oof": f"fold{fold}_eval"}

  # -- model ---------------------------------------------------------------
  def build_model(self):
    config = self.encoder_config()
    encoder = encoders.build_encoder(config)
    return modeling.ClassifierModel(encoder, self.num_labels,
                                    self.head_dropout(config),
                                    seed=self.seed,
                                    name="classifier_model").build_variables()

  def model_shape(self):
    config = encoders.read_config(self.bert_config_file)
    return (config, self.meta["max_seq_length"],
            memory_plan.Head.pooled_dense(config, self.num_labels))

  # -- data ----------------------------------------------------------------
  def split_path(self, split):
    if split == "train":
      return self.train_data_path
    if split in self.eval_paths:
      return self.eval_paths[split]
    return self.test_paths.get(split)

  def split_size(self, split):
    sizes = self.meta.get("split_sizes", {})
    split = self.split_names.get(split, split)
    if split in sizes:
      return sizes[split]
    return self.meta.get(f"{split}_data_size")

  def build_inputs(self, split, input_context=None, batch_size=0,
                   train_order=None):
    path = self.split_path(split)
    if not path:
      raise ValueError(f"no data path bound for split {split!r} (bind "
                       "TRAIN_DATA_PATH / EVAL_DATA_PATH / TEST_DATA_PATH)")
    if split != "train" and self.split_size(split) is None:
      raise ValueError(f"{self.meta_data_path}: no size for split {split!r} "
                       f"(in split_sizes or as {split}_data_size): was it "
                       "prepared?")
    return pipeline.make_dataset(
        path, seq_length=self.meta["max_seq_length"],
        label_type=self.meta["label_type"], batch_size=batch_size,
        is_training=split == "train", input_context=input_context,
        train_order=pipeline.train_order_or_default(train_order, self.seed),
        shuffle_buffer=self.shuffle_buffer_size,
        num_examples=None if split == "train" else self.split_size(split),
        int_features=self.int_features)

  def num_train_examples(self):
    return int(self.split_size("train") or self.meta.get("train_data_size", 0))

  def check_training_data(self):
    if not self.train_data_path:
      return
    pipeline.check_training_files(
        self.train_data_path, pipeline.record_decoder(
            self.meta["max_seq_length"], self.meta["label_type"],
            int_features=self.int_features),
        config=encoders.read_config(self.bert_config_file),
        label_ranges=None if self.is_regression else {
            "label": (0, self.num_labels)}, source=self.meta_data_path)

  def eval_splits(self):
    return {name: int(self.split_size(name) or 0) for name in self.eval_paths}

  # -- loss and metrics ----------------------------------------------------
  def loss_weights(self, labels):
    if self.class_weights is None:
      return super().loss_weights(labels)
    return {"loss": tf.gather(tf.constant(self.class_weights),
                              tf.cast(labels, tf.int32))}             # [B]

  def loss_numerators(self, labels, outputs):
    losses = self.per_example_loss(labels, outputs)                  # [B]
    if self.class_weights is None:
      return {"loss": losses}
    return {"loss": self.loss_weights(labels)["loss"] * losses}

  def per_example_loss(self, labels, outputs):
    if self.is_regression:
      return tf.square(tf.cast(labels, tf.float32) - outputs[:, 0])     # [B]
    return tf_keras.losses.sparse_categorical_crossentropy(
        labels, outputs, from_logits=True)                              # [B]

  def build_train_metrics(self):
    if self.is_regression:
      return []
    return [tf_keras.metrics.SparseCategoricalAccuracy("accuracy")]

  def update_train_metrics(self, train_metrics, labels, outputs):
    for metric in train_metrics:
      metric.update_state(labels, outputs)

  def eval_outputs(self, features, labels, outputs):
    result = {"labels": labels, "outputs": outputs,
              "weights": features["example_weight"],
              "example_id": features["example_id"],
              "loss": self.per_example_loss(labels, outputs)}
    for name in self.int_features:
      result[name] = features[name]
    return result

  def documents(self, gathered):
    """(labels, outputs, example ids) per example of the gathered rows, real
    rows only; with windows (--doc_stride) per document: its windows'
    outputs pooled by `window_pooling`, in file order."""
    real = gathered["weights"] > 0
    labels, outputs = gathered["labels"][real], gathered["outputs"][real]
    ids = gathered["example_id"][real]
    if not self.int_features:
      return labels, outputs, ids
    document = gathered["document_id"][real].astype(np.int64)
    order, first, inverse = np.unique(document, return_index=True,
                                      return_inverse=True)
    pooled = np.full((len(order),) + outputs.shape[1:],
                     -np.inf if self.window_pooling == "max" else 0.0)
    if self.window_pooling == "max":
      np.maximum.at(pooled, inverse, outputs)
    else:
      np.add.at(pooled, inverse, outputs)
      pooled /= np.bincount(inverse)[:, None]
    return labels[first], pooled.astype(np.float32), ids[first]

  def finalize_eval(self, gathered):
    real = gathered["weights"] > 0
    labels, outputs, _ = self.documents(gathered)
    result = {"loss": float(np.mean(gathered["loss"][real])),
              "num_examples": int(len(labels))}
    if self.int_features:
      result["num_windows"] = int(real.sum())
    if self.is_regression:
      names = self.metric_names + tuple(
          n for n in ("mse",) if n not in self.metric_names)
      result.update(glue_metrics.regression_metrics(names, labels, outputs[:, 0]))
    else:
      result.update(glue_metrics.classification_metrics(
          self.metric_names, labels, outputs, self.meta.get("label_names")))
    return result

  def serving_outputs(self, outputs):
    if self.is_regression:
      return {"value": outputs[:, 0]}                                # [B]
    probabilities = tf.nn.softmax(outputs, axis=-1)                  # [B, L]
    names = self.meta.get("label_names") or [
        str(i) for i in range(self.num_labels)]
    return {"probabilities": probabilities,
            "label": tf.gather(tf.constant(names), tf.argmax(probabilities, -1))}

  def distillation_loss(self, teacher_outputs, outputs, temperature):
    if self.is_regression:          # the teacher's value as the target
      return tf.square(tf.cast(outputs[:, 0] - teacher_outputs[:, 0],
                               tf.float32))                          # [B]
    return super().distillation_loss(teacher_outputs, outputs, temperature)

  def capabilities(self):
    declared = [
        capabilities.DistillationStudent(loss=self.distillation_loss,
                                         offline_targets=True),
        capabilities.MemoryPlan(model_shape=self.model_shape),
        capabilities.SavedModelServing(
            outputs=self.serving_outputs, text=self.text_serving,
            packer=self.text_packer),
        capabilities.OnnxGraph(head=self.onnx_head()),
        capabilities.Predictions(splits=list(self.test_paths),
                                 write=self.write_predictions)]
    if not self.is_regression:
      declared.append(capabilities.TfliteGraph(
          outputs=tflite_outputs, seq_length=self.meta["max_seq_length"]))
    return capabilities.merged(super().capabilities(), *declared)

  def onnx_head(self):
    """The ONNX head writer: the regression value or the classifier's."""
    if self.is_regression:
      return onnx_writers.regression_head
    return onnx_writers.classifier_head(self.meta.get("label_names") or [
        str(i) for i in range(self.num_labels)])

  def text_packer(self, model):
    """`text_serving`'s tokenizer and packing alone (or None)."""
    serving = self.text_serving(model)
    return serving and serving.packer()

  def write_predictions(self, gathered, output_dir, split="test"):
    """test_results.tsv (probabilities or values) + the GLUE submission
    file, one row per example (per document with --doc_stride windows)."""
    _, outputs, numbers = self.documents(gathered)
    return predictions.write(
        outputs, predictions.example_ids(self.test_paths.get(split), numbers),
        output_dir=output_dir, split=split, meta=self.meta,
        is_regression=self.is_regression)

  def text_serving(self, model):
    """`serve_text`: raw text packed as `bertexp prepare` packed it (None,
    with a warning, when the meta data's vocab_file is not there)."""
    return text_serving.from_meta(
        model, self.serving_outputs, self.meta, self.meta_data_path,
        self.meta.get("num_text_features", 1))

  def input_files(self):
    return {"vocab_file": self.meta.get("vocab_file"),
            "data_files": [self.meta_data_path, self.train_data_path,
                           *self.eval_paths.values(), *self.test_paths.values()]}

  def selection_metric(self):
    return self.metric_names[0]
