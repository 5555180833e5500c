"""Extractive question answering (SQuAD v1.1 / v2.0).

Training reads `bertexp prepare squad` TFRecords. Evaluation and prediction
read the dev/test JSON itself (`PREDICT_FILE`), windowed in memory the same
way, and score with the official rules (bertexp.tasks.squad.scoring).
"""
import logging

import gin
import numpy as np
import tensorflow as tf
import tf_keras

from bertexp import capabilities
from bertexp.checkpoints import run_files
from bertexp.checkpoints import to_huggingface
from bertexp.data import meta as meta_data
from bertexp.data import pipeline
from bertexp.model.encoders import tokenizers
from bertexp.model import encoders
from bertexp.model import memory_plan
from bertexp.model import modeling
from bertexp.tasks import base
from bertexp.tasks.squad import answers as squad_answers
from bertexp.tasks.squad import data as squad_data
from bertexp.tasks.squad import onnx_head as onnx_writers
from bertexp.tasks.squad import scoring as squad_scoring
from bertexp.tasks.squad import serving as squad_serving
from bertexp.tasks.squad import squad_json
from bertexp.util import fileio


def serving_outputs(outputs):
  """The export's outputs of span logits [B, S, 2]: start/end [B, S]."""
  return {"start_logits": outputs[:, :, 0], "end_logits": outputs[:, :, 1]}


def answer(predictor, question, context):
  """`bertexp.Predictor(...).answer(question, context)`: {"answer",
  "score", "context_truncated"} (SQuAD v2.0 models also
  "null_score_diff"); lists of questions and contexts give a list."""
  single = isinstance(question, str)
  questions = [question] if single else list(question)
  contexts = [context] if single else list(context)
  if len(questions) != len(contexts):
    raise ValueError(f"{len(questions)} questions but {len(contexts)} "
                     "contexts")
  if not questions:
    return []
  out = predictor.run({
      "question": [capabilities.checked_text(q, f"question {i}")
                   for i, q in enumerate(questions)],
      "context": [capabilities.checked_text(c, f"context {i}")
                  for i, c in enumerate(contexts)]})
  results = [predictor.decode(out, i) for i in range(len(questions))]
  return results[0] if single else results


# SpanModel's `span_head` -> BertForQuestionAnswering's `qa_outputs`.
HUGGINGFACE_HEADS = (to_huggingface.HeadMapping(
    task="bertexp.QuestionAnsweringTask", layer="span_head", hf_module="qa_outputs",
    architecture="ForQuestionAnswering"),)


class SpanModel(modeling.HeadModel):
  """Encoder + dense(2) on every token -> start and end logits [B, S, 2];
  padded positions get -10000."""

  def __init__(self, encoder, seed=None, **kwargs):
    super().__init__(**kwargs)
    self.encoder = encoder
    self.span_head = tf_keras.layers.Dense(
        2, kernel_initializer=tf_keras.initializers.TruncatedNormal(
            stddev=encoder.config.initializer_range, seed=seed),
        dtype="float32", name="span_head")

  def call(self, inputs, training=None, dropout_seed=None,
           return_layers=False):
    """Span logits [B, S, 2]; with return_layers, (logits, the encoder's
    outputs with its hidden states and attention scores)."""
    layers = {"return_layers": True} if return_layers else {}
    encoded = self.encoder(inputs, training=training,
                           dropout_seed=dropout_seed, **layers)
    logits = self.span_head(encoded["sequence_output"])              # [B, S, 2]
    # Padding can hold no answer: masked out of the span softmax, so the loss
    # does not depend on how far a batch is padded (dynamic padding, replicas).
    padding = 1.0 - tf.cast(inputs["input_mask"], logits.dtype)      # [B, S]
    logits = logits + padding[:, :, tf.newaxis] * -10000.0
    return (logits, encoded) if return_layers else logits


@gin.configurable(module="bertexp")
class QuestionAnsweringTask(base.RecordTask):
  """Start/end span prediction; loss = mean of start and end cross-entropy."""

  def __init__(self, *, bert_config_file=gin.REQUIRED,
               meta_data_path=gin.REQUIRED, train_data_path=None,
               predict_file=None, vocab_file=gin.REQUIRED,
               version_2_with_negative=False, n_best_size=20,
               max_answer_length=30, null_score_diff_threshold=0.0, seed=None,
               shuffle_buffer_size=10000):
    super().__init__(
        bert_config_file=bert_config_file, meta_data_path=meta_data_path,
        meta=meta_data.read_meta_data(
            meta_data_path,
            positive=("max_seq_length", "doc_stride", "max_query_length"),
            counts=("train_data_size",),
            flags=("version_2_with_negative", "do_lower_case")),
        paths={"train": train_data_path}, seed=seed,
        shuffle_buffer_size=shuffle_buffer_size)
    if bool(self.meta.get("version_2_with_negative")) != version_2_with_negative:
      raise ValueError(
          f"{meta_data_path}: data prepared with version_2_with_negative="
          f"{self.meta.get('version_2_with_negative')} but the task has "
          f"{version_2_with_negative}")
    self.predict_file = predict_file
    self.vocab_file = vocab_file
    self.version_2_with_negative = version_2_with_negative
    self.n_best_size = n_best_size
    self.max_answer_length = max_answer_length
    self.null_score_diff_threshold = null_score_diff_threshold
    self._eval = None        # (examples, features, dataset arrays), built once
    self.last_predictions = None

  def build_model(self):
    encoder = encoders.build_encoder(self.encoder_config())
    return SpanModel(encoder, seed=self.seed, name="span_model").build_variables()

  def model_shape(self):
    config = encoders.read_config(self.bert_config_file)
    seq = self.meta["max_seq_length"]
    return config, seq, memory_plan.Head.token_dense(config, seq, 2)

  def _eval_data(self):
    if self._eval is None:
      if not self.predict_file:
        raise ValueError("evaluation and prediction need PREDICT_FILE (the "
                         "SQuAD dev/test JSON)")
      examples, _ = squad_data.read_examples(
          self.predict_file, is_training=False,
          version_2_with_negative=self.version_2_with_negative)
      tokenizer = tokenizers.from_meta(self.meta, self.vocab_file)
      features = squad_data.convert_examples(
          examples, tokenizer, max_seq_length=self.meta["max_seq_length"],
          doc_stride=self.meta["doc_stride"],
          max_query_length=self.meta["max_query_length"], is_training=False)
      self._eval = (examples, features, tokenizer)
      logging.info("%s: %d questions -> %d windows", self.predict_file,
                   len(examples), len(features))
    return self._eval

  def build_inputs(self, split, input_context=None, batch_size=0,
                   train_order=None):
    seq = self.meta["max_seq_length"]
    if split == "train":
      if not self.train_data_path:
        raise ValueError("training needs TRAIN_DATA_PATH")
      return pipeline.make_dataset(
          self.train_data_path, seq_length=seq, label_type="int",
          batch_size=batch_size, is_training=True, input_context=input_context,
          train_order=pipeline.train_order_or_default(train_order, self.seed),
          shuffle_buffer=self.shuffle_buffer_size,
          label_names=("start_positions", "end_positions"),
          id_name="unique_id")
    _, features, _ = self._eval_data()
    columns = {name: np.array([getattr(f, name) for f in features], np.int32)
               for name in pipeline.MODEL_INPUTS}
    # Ids count windows from 0: exact through the float32 replica gather.
    columns["unique_id"] = np.array([f.unique_id for f in features], np.int32)
    columns["example_weight"] = np.ones(len(features), np.float32)
    columns["position"] = np.arange(len(features), dtype=np.int32)
    labels = np.zeros([len(features), 2], np.int32)
    dataset = tf.data.Dataset.from_tensor_slices((columns, labels))
    if input_context and input_context.num_input_pipelines > 1:
      dataset = dataset.shard(input_context.num_input_pipelines,
                              input_context.input_pipeline_id)
    return pipeline.pad_and_batch_eval(
        dataset, num_examples=len(features), batch_size=batch_size,
        input_context=input_context,
        padding=pipeline.padding_element(seq, tf.int64, 2, "unique_id"))

  def check_training_data(self):
    if not self.train_data_path:
      return
    seq = self.meta["max_seq_length"]
    pipeline.check_training_files(
        self.train_data_path, pipeline.record_decoder(
            seq, "int", ("start_positions", "end_positions"), "unique_id"),
        config=encoders.read_config(self.bert_config_file),
        label_ranges={"label": (0, seq)}, source=self.meta_data_path)

  def eval_splits(self):
    return {"eval": len(self._eval_data()[1])} if self.predict_file else {}

  def input_files(self):
    return {"vocab_file": self.vocab_file,
            "data_files": [self.meta_data_path, self.train_data_path,
                           self.predict_file]}

  def capabilities(self):
    return capabilities.merged(
        super().capabilities(),
        capabilities.DistillationStudent(loss=self.distillation_loss),
        capabilities.MemoryPlan(model_shape=self.model_shape),
        capabilities.SavedModelServing(outputs=serving_outputs,
                                       text=self.text_serving),
        capabilities.PredictorApi(methods={"answer": answer}),
        capabilities.OnnxGraph(head=onnx_writers.span_head),
        capabilities.Predictions(
            splits=["eval"] if self.predict_file else [],
            write=self.write_predictions))

  def distillation_loss(self, teacher_outputs, outputs, temperature):
    # [B, S, 2]: a distribution over positions for start and for end.
    return tf.reduce_mean(base.soft_cross_entropy(
        teacher_outputs, outputs, temperature, axis=1), axis=-1)    # [B]

  def text_serving(self, model):
    """`serve_text`: (question, context) -> answer, in the graph (see
    bertexp.tasks.squad.serving)."""
    return squad_serving.SpanServing(model, {
        "vocab_file": self.vocab_file,
        "do_lower_case": self.meta.get("do_lower_case", True),
        "tokenizer_family": self.meta.get("tokenizer_family"),
        "keep_accents": self.meta.get("keep_accents", False),
        "max_seq_length": self.meta["max_seq_length"],
        "max_query_length": self.meta["max_query_length"],
        "n_best_size": self.n_best_size,
        "max_answer_length": self.max_answer_length,
        "version_2_with_negative": self.version_2_with_negative,
        "null_score_diff_threshold": self.null_score_diff_threshold})

  def per_example_loss(self, labels, outputs):
    # outputs [B, S, 2] logits; labels [B, 2] start/end positions
    start = tf_keras.losses.sparse_categorical_crossentropy(
        labels[:, 0], outputs[:, :, 0], from_logits=True)
    end = tf_keras.losses.sparse_categorical_crossentropy(
        labels[:, 1], outputs[:, :, 1], from_logits=True)
    return (start + end) / 2.0                                       # [B]

  def eval_outputs(self, features, labels, outputs):
    return {"start_logits": outputs[:, :, 0], "end_logits": outputs[:, :, 1],
            "unique_id": features["unique_id"],
            "weights": features["example_weight"]}

  def _answers(self, gathered):
    examples, features, tokenizer = self._eval_data()
    real = gathered["weights"] > 0
    logits = {int(u): (s, e) for u, s, e in zip(
        gathered["unique_id"][real], gathered["start_logits"][real],
        gathered["end_logits"][real])}
    return squad_answers.predict_answers(
        examples, features, logits, tokenizer, n_best_size=self.n_best_size,
        max_answer_length=self.max_answer_length,
        do_lower_case=self.meta.get("do_lower_case", True),
        version_2_with_negative=self.version_2_with_negative,
        null_score_diff_threshold=self.null_score_diff_threshold)

  def finalize_eval(self, gathered):
    predictions, _, null_odds = self._answers(gathered)
    dataset = squad_json.load_json(self.predict_file, "dataset")
    if self.version_2_with_negative:
      return squad_scoring.evaluate_v2(dataset, predictions, null_odds)
    return squad_scoring.evaluate_v1(dataset, predictions)

  def selection_metric(self):
    return "f1"

  def write_predictions(self, gathered, output_dir, split="eval"):
    predictions, nbest, null_odds = self._answers(gathered)
    paths = [run_files.output_file(output_dir, "predictions.json"),
             run_files.output_file(output_dir, "nbest_predictions.json")]
    fileio.write_json(paths[0], predictions)
    fileio.write_json(paths[1], nbest)
    if self.version_2_with_negative:
      paths.append(run_files.output_file(output_dir, "null_odds.json"))
      fileio.write_json(paths[2], null_odds)
    logging.info("wrote %d predictions to %s", len(predictions), paths[0])
    return paths
