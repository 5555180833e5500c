"""A task outside bertexp: sentence classification from the mean of the
encoder's token vectors (real tokens only) instead of the [CLS] pooler, on
the records of `bertexp prepare classification`.

It uses only bertexp's public pieces (the Task interface and its
capabilities, the encoder, the record pipeline, the raw-text packer) and is
registered by its own gin `import`:

    import plugins.mean_pooled
    bertexp.experiment.task = @plugins.MeanPooledClassificationTask()

or, installed with pip as a package that declares it through the
"bertexp.tasks" entry point (this module as its task.py), with no import
line at all. Its runs' Hugging Face folders (`convert-checkpoint
--to=huggingface`) get the encoder and `mean_pooled_head.json`.

Shape legend: B batch, S sequence length, H hidden size, L labels.
"""
import json
import os

import gin
import numpy as np
import tensorflow as tf
import tf_keras

from bertexp import capabilities
from bertexp.checkpoints import to_huggingface
from bertexp.data import pipeline
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.tasks import base
from bertexp.tasks import text_serving
from bertexp.util import fileio


class MeanPooledModel(tf_keras.Model):
  """Encoder -> masked mean of sequence_output -> dense: logits [B, L]."""

  def __init__(self, encoder, num_labels, seed=None, **kwargs):
    super().__init__(**kwargs)
    self.encoder = encoder
    self.num_labels = num_labels
    # Seeded: the same head whatever ran before in the process.
    self.scorer = tf_keras.layers.Dense(
        num_labels, name="scorer",
        kernel_initializer=tf_keras.initializers.GlorotUniform(seed=seed))

  def get_config(self):
    return {"encoder": self.encoder.get_config(),
            "num_labels": self.num_labels}

  def call(self, inputs, training=None, dropout_seed=None):
    sequence = self.encoder(inputs, training=training,
                            dropout_seed=dropout_seed)["sequence_output"]
    mask = tf.cast(inputs["input_mask"], sequence.dtype)[..., None]  # [B, S, 1]
    mean = tf.reduce_sum(sequence * mask, 1) / tf.reduce_sum(mask, 1)  # [B, H]
    return tf.cast(self.scorer(mean), tf.float32)                     # [B, L]


@gin.configurable(module="plugins")
class MeanPooledClassificationTask(base.RecordTask):
  """Classification with mean pooling (see the module docstring)."""

  def __init__(self, *, bert_config_file=gin.REQUIRED,
               meta_data_path=gin.REQUIRED, train_data_path=None,
               eval_data_path=None, test_data_path=None, seed=None):
    super().__init__(
        bert_config_file=bert_config_file, meta_data_path=meta_data_path,
        meta=fileio.read_json(meta_data_path),
        paths={"train": train_data_path, "eval": eval_data_path,
               "test": test_data_path}, seed=seed, shuffle_buffer_size=0)
    self.labels = self.meta["label_names"]

  def build_model(self):
    model = MeanPooledModel(encoders.build_encoder(self.encoder_config()),
                            len(self.labels),
                            seed=self.seed, name="mean_pooled")
    model(modeling.dummy_inputs(), training=False)
    return model

  def build_inputs(self, split, input_context=None, batch_size=0,
                   train_order=None):
    return pipeline.make_dataset(
        self.paths[split], seq_length=self.meta["max_seq_length"],
        label_type=self.meta["label_type"], batch_size=batch_size,
        is_training=split == "train", input_context=input_context,
        train_order=pipeline.train_order_or_default(train_order, self.seed),
        shuffle_buffer=self.shuffle_buffer_size,
        num_examples=(None if split == "train" else
                      self.meta["split_sizes"][split]))

  def num_train_examples(self):
    return self.meta["split_sizes"]["train"]

  def per_example_loss(self, labels, outputs):
    return tf_keras.losses.sparse_categorical_crossentropy(
        labels, outputs, from_logits=True)                           # [B]

  def eval_outputs(self, features, labels, outputs):
    return {"labels": labels, "logits": outputs,
            "weights": features["example_weight"]}

  def finalize_eval(self, gathered):
    real = gathered["weights"] > 0
    predicted = gathered["logits"][real].argmax(-1)
    return {"accuracy": float(np.mean(predicted == gathered["labels"][real])),
            "num_examples": int(real.sum())}

  def eval_splits(self):
    return {"eval": self.meta["split_sizes"]["eval"]}

  def selection_metric(self):
    return "accuracy"

  def capabilities(self):
    return capabilities.merged(
        super().capabilities(),
        capabilities.SavedModelServing(outputs=self.serving_outputs,
                                       text=self.text_serving),
        capabilities.Predictions(splits=["test"] if self.paths["test"] else [],
                                 write=self.write_predictions))

  def write_predictions(self, gathered, output_dir, split):
    real = gathered["weights"] > 0
    path = os.path.join(output_dir, f"mean_pooled_{split}.txt")
    names = [self.labels[i] for i in gathered["logits"][real].argmax(-1)]
    fileio.write_text(path, "".join(f"{name}\n" for name in names))
    return path

  def serving_outputs(self, outputs):
    return {"label": tf.gather(tf.constant(self.labels),
                               tf.argmax(outputs, -1)),              # [B]
            "probabilities": tf.nn.softmax(outputs, -1)}             # [B, L]

  def text_serving(self, model):
    return text_serving.PackedTextServing(
        model, self.serving_outputs, vocab_file=self.meta["vocab_file"],
        do_lower_case=self.meta.get("do_lower_case", True),
        max_seq_length=self.meta["max_seq_length"],
        num_text_features=self.meta.get("num_text_features", 1))


def _head_file(reader, config):
  """mean_pooled_head.json: the scorer that reads the mean of the encoder's
  token vectors ({} for a checkpoint without it)."""
  names = reader.get_variable_to_shape_map()
  kernel = "model/scorer/kernel/.ATTRIBUTES/VARIABLE_VALUE"
  if kernel not in names:
    return {}
  bias = reader.get_tensor("model/scorer/bias/.ATTRIBUTES/VARIABLE_VALUE")
  return {"mean_pooled_head.json": json.dumps({
      "pooling": "mean", "hidden_size": config.hidden_size,
      "weight": reader.get_tensor(kernel).T.tolist(),      # [L, H]
      "bias": bias.tolist()}) + "\n"}


# What convert-checkpoint --to=huggingface adds for this task's runs only
# (the multiple-choice task's head layer has the same name, `scorer`).
HUGGINGFACE_FILES = (to_huggingface.ExtraFiles(
    task="plugins.MeanPooledClassificationTask", files=_head_file),)
