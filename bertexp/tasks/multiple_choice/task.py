"""Multiple choice (SWAG, RACE, COPA): a context and N candidate endings,
one correct. Each (context, ending) pair is one sequence through the
encoder; a dense layer scores each pair's pooled output and a softmax over
the N scores picks the ending (Devlin et al.'s SWAG setup, Hugging Face's
BertForMultipleChoice).

Everything about the task is in this folder: here and `prepare.py`
(`bertexp prepare multiple_choice`); `gin/tasks/multiple_choice.gin` brings
it in with its own `import` line.

Shape legend: B examples, N choices, S max_seq_length, H hidden size.
"""

import gin
import numpy as np
import tensorflow as tf
import tf_keras

from bertexp import capabilities
from bertexp.checkpoints import run_files
from bertexp.checkpoints import to_huggingface
from bertexp.data import meta as meta_data
from bertexp.data import pipeline
from bertexp.data import tokenization
from bertexp.model.encoders import tokenizers
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.tasks import base
from bertexp.util import fileio
from bertexp.util import serving_weights

_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")


# MultipleChoiceModel's `scorer` (one score per pooled pair) ->
# BertForMultipleChoice's `classifier`.
HUGGINGFACE_HEADS = (to_huggingface.HeadMapping(
    task="bertexp.MultipleChoiceTask", layer="scorer", hf_module="classifier",
    architecture="ForMultipleChoice"),)


class MultipleChoiceModel(modeling.HeadModel):
  """{input: [B, N * S]} -> choice logits [B, N]."""
  config_fields = ("num_choices", "seq_length")

  def __init__(self, encoder, num_choices, seq_length, dropout_rate=0.1,
               seed=None, **kwargs):
    super().__init__(**kwargs)
    self.encoder = encoder
    self.num_choices, self.seq_length = num_choices, seq_length
    self.dropout = modeling.Dropout(dropout_rate)
    self.scorer = tf_keras.layers.Dense(
        1, kernel_initializer=tf_keras.initializers.TruncatedNormal(
            stddev=encoder.config.initializer_range, seed=seed),
        dtype="float32", name="choice_scorer")

  def call(self, inputs, training=None, dropout_seed=None):
    pairs = {name: tf.reshape(inputs[name], [-1, self.seq_length])  # [B*N, S]
             for name in _INPUTS}
    pooled = self.encoder(pairs, training=training, pooled_only=True,
                          dropout_seed=modeling.fold_seed(dropout_seed, 0))[
                              "pooled_output"]                       # [B*N, H]
    scores = self.scorer(self.dropout(pooled, training=training,
                                      seed=modeling.fold_seed(dropout_seed, 1)))
    return tf.reshape(tf.cast(scores, tf.float32),
                      [-1, self.num_choices])                        # [B, N]

  def dummy_inputs(self):
    width = self.num_choices * self.seq_length
    return {name: tf.ones([1, width], tf.int32) for name in _INPUTS}


class ChoiceServing(tf.Module):
  """`serve_text`: context [B] and choices [B, N] strings -> probabilities
  [B, N] and choice [B], tokenized and packed in the graph as `bertexp
  prepare multiple_choice` packs them. Tracks the model and the tokenizer."""

  def __init__(self, model, serving_outputs, *, tokenizer, max_seq_length,
               num_choices):
    """Args:
      model: token ids -> choice logits.
      serving_outputs: the task's outputs -> what the signature returns.
      tokenizer: the tokenizer prepare used (tokenization.from_meta).
      max_seq_length, num_choices: as prepared.
    """
    super().__init__()
    serving_weights.attach_model(self, model)
    self._serving_outputs = serving_outputs
    self._tokenizer = tokenizer
    self.tokenizer = tokenizer.module                 # tracked: saved with us
    self._length, self._choices = max_seq_length, num_choices

  def _serve(self, context, choices):
    # The check runs before anything that reads the texts: without the
    # dependency another op (a reshape of the wrong count) may fail first,
    # with an error that does not say what was wrong.
    checked = tf.debugging.assert_equal(
        tf.shape(choices)[1], self._choices,
        message=f"choices: expected {self._choices} per context")
    with tf.control_dependencies([checked]):
      context, choices = tf.identity(context), tf.identity(choices)
    contexts = tf.reshape(tf.repeat(context[:, None], self._choices, 1), [-1])
    packed = tokenization.pack_tf(self._tokenizer, contexts,
                                  tf.reshape(choices, [-1]), self._length)
    width = self._choices * self._length
    inputs = {name: tf.reshape(packed[name], [-1, width])            # [B, N*S]
              for name in _INPUTS}
    return self._serving_outputs(self.model(inputs, training=False))

  def signature(self):
    return tf.function(self._serve, input_signature=[
        tf.TensorSpec([None], tf.string, "context"),
        tf.TensorSpec([None, None], tf.string, "choices")
    ], autograph=False).get_concrete_function()


def serving_outputs(outputs):
  """The export's outputs of choice logits [B, N]."""
  return {"probabilities": tf.nn.softmax(outputs, -1),                # [B, N]
          "choice": tf.argmax(outputs, -1, output_type=tf.int32)}     # [B]


def tflite_outputs(outputs):
  """A TFLite model's outputs of choice logits [B, N]: each choice's
  probability (its rows hold the N choices end to end, as trained)."""
  return {"probabilities": tf.nn.softmax(outputs, -1)}                # [B, N]


def choose(predictor, context, choices):
  """`bertexp.Predictor(...).choose(context, choices)`: {"choice": index,
  "text": the chosen ending, "probabilities": [N]} (lists of contexts and
  of choice lists give a list)."""
  single = isinstance(context, str)
  contexts = [context] if single else list(context)
  options = [list(choices)] if single else [list(c) for c in choices]
  if len(contexts) != len(options):
    raise ValueError(f"{len(contexts)} contexts but {len(options)} lists of "
                     "choices")
  for i, listed in enumerate(options):
    if len(listed) != len(options[0]):
      raise ValueError(f"context {i} has {len(listed)} choices, context 0 "
                       f"{len(options[0])}: every context needs as many")
  out = predictor.run({"context": contexts, "choices": options})
  rows = [{"choice": int(out["choice"][i]),
           "text": options[i][int(out["choice"][i])],
           "probabilities": [float(p) for p in out["probabilities"][i]]}
          for i in range(len(contexts))]
  return rows[0] if single else rows


@gin.configurable(module="bertexp")
class MultipleChoiceTask(base.RecordTask):
  """A context and N endings, one correct (see the module docstring).

  Args:
    bert_config_file: the encoder's config.
    meta_data_path: `bertexp prepare multiple_choice`'s meta data.
    train_data_path, eval_data_path, test_data_path: its records.
    dropout_rate: before the scorer (None: the config's hidden dropout).
    seed: the scorer's initialiser and the data order.
    shuffle_buffer_size: training shuffle window (0: file order).
  """

  # Rows hold N sequences end to end: never cut to the longest real one.
  dynamic_padding = False

  def __init__(self, *, bert_config_file=gin.REQUIRED,
               meta_data_path=gin.REQUIRED, train_data_path=None,
               eval_data_path=None, test_data_path=None, dropout_rate=None,
               seed=None, shuffle_buffer_size=10000):
    super().__init__(
        bert_config_file=bert_config_file, meta_data_path=meta_data_path,
        meta=meta_data.read_meta_data(
            meta_data_path, positive=("max_seq_length", "num_choices")),
        paths={"train": train_data_path, "eval": eval_data_path,
               "test": test_data_path},
        seed=seed, shuffle_buffer_size=shuffle_buffer_size,
        dropout_rate=dropout_rate)
    self.num_choices = self.meta["num_choices"]
    self.seq_length = self.meta["max_seq_length"]

  def build_model(self):
    config = self.encoder_config()
    return MultipleChoiceModel(
        encoders.build_encoder(config), self.num_choices, self.seq_length,
        self.head_dropout(config), seed=self.seed, name="multiple_choice_model").build_variables()

  def build_inputs(self, split, input_context=None, batch_size=0,
                   train_order=None):
    if not self.paths.get(split):
      raise ValueError(f"no data path bound for split {split!r} (bind "
                       "TRAIN_DATA_PATH / EVAL_DATA_PATH / TEST_DATA_PATH)")
    return pipeline.make_dataset(
        self.paths[split], seq_length=self.num_choices * self.seq_length,
        label_type="int", batch_size=batch_size, is_training=split == "train",
        input_context=input_context,
        train_order=pipeline.train_order_or_default(train_order, self.seed),
        shuffle_buffer=self.shuffle_buffer_size,
        num_examples=(None if split == "train" else
                      self.meta["split_sizes"][split]))

  def num_train_examples(self):
    return self.meta["split_sizes"]["train"]

  def check_training_data(self):
    if self.paths["train"]:
      pipeline.check_training_files(
          self.paths["train"], pipeline.record_decoder(
              self.num_choices * self.seq_length, "int"),
          config=encoders.read_config(self.bert_config_file),
          label_ranges={"label": (0, self.num_choices)},
          source=self.meta_data_path)

  def eval_splits(self):
    return {"eval": self.meta["split_sizes"]["eval"]}

  def per_example_loss(self, labels, outputs):
    return tf_keras.losses.sparse_categorical_crossentropy(
        labels, outputs, from_logits=True)                           # [B]

  def build_train_metrics(self):
    return [tf_keras.metrics.SparseCategoricalAccuracy("accuracy")]

  def update_train_metrics(self, metrics, labels, outputs):
    for metric in metrics:
      metric.update_state(labels, outputs)

  def eval_outputs(self, features, labels, outputs):
    return {"labels": labels, "logits": outputs,
            "weights": features["example_weight"],
            "example_id": features["example_id"],
            "loss": self.per_example_loss(tf.maximum(labels, 0), outputs)}

  def finalize_eval(self, gathered):
    real = gathered["weights"] > 0
    chosen = gathered["logits"][real].argmax(-1)
    return {"accuracy": float(np.mean(chosen == gathered["labels"][real])),
            "loss": float(np.mean(gathered["loss"][real])),
            "num_examples": int(real.sum())}

  def selection_metric(self):
    return "accuracy"

  def capabilities(self):
    """Student, SavedModel export with `serve_text` and the Predictor's
    `choose`, TFLite, predictions; no memory plan (N sequences per
    example)."""
    return capabilities.merged(
        super().capabilities(),
        capabilities.DistillationStudent(loss=self.distillation_loss),
        capabilities.SavedModelServing(outputs=serving_outputs,
                                       text=self.text_serving),
        capabilities.PredictorApi(methods={"choose": choose}),
        capabilities.TfliteGraph(
            outputs=tflite_outputs,
            seq_length=self.num_choices * self.seq_length),
        capabilities.Predictions(splits=["test"] if self.paths["test"] else [],
                                 write=self.write_predictions))

  def write_predictions(self, gathered, output_dir, split):
    """choices_<split>.tsv: id, chosen index and each choice's probability
    per example, in file order."""
    real = gathered["weights"] > 0
    logits = gathered["logits"][real]
    order = np.argsort(gathered["example_id"][real], kind="stable")
    probabilities = tf.nn.softmax(logits[order], -1).numpy()
    ids = fileio.read_text(self.paths[split].replace(
        ".tf_record", "_ids.txt")).splitlines()
    path = run_files.output_file(output_dir, f"choices_{split}.tsv")
    fileio.write_text(path, "".join(
        f"{ids[i]}\t{int(p.argmax())}\t" + "\t".join(f"{x:.6f}" for x in p) +
        "\n" for i, p in enumerate(probabilities)))
    return path

  def text_serving(self, model):
    """`serve_text`: (context, choices) -> the choice and its
    probabilities; None when the vocab is missing."""
    vocab = base.serving_vocab(self.meta, self.meta_data_path)
    if vocab is None:
      return None
    return ChoiceServing(model, serving_outputs,
                         tokenizer=tokenizers.from_meta(self.meta, vocab),
                         max_seq_length=self.seq_length,
                         num_choices=self.num_choices)

