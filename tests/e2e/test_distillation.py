"""Distillation: the loss against hand computations, layer maps, the
projection, student initialisation from teacher layers, and a tiny teacher
whose knowledge a student on wrong labels takes up through the CLI."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bertexp import capabilities
from bertexp import cli
from bertexp.tasks.classification import task as classification
from bertexp.tasks.distillation import task as distillation
from conftest import (NEGATIVE, POSITIVE, TINY_CONFIG,
                      prepare_tiny_sst2_run)

DEMO_DISTILL = "experiments/demo/movie_sentiment_distill_cpu.gin"


def _numpy_kl_t2(teacher, student, t):
  def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
  p, q = softmax(teacher / t), softmax(student / t)
  return (p * (np.log(p) - np.log(q))).sum(-1) * t * t


@pytest.mark.parametrize("temperature", [1.0, 4.0])
def test_soft_cross_entropy_equals_hand_computed_kl_times_t_squared(
    temperature):
  teacher = np.array([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]], np.float32)
  student = np.array([[0.5, 0.2, -0.3], [1.0, 1.0, 1.0]], np.float32)
  ours = distillation.soft_cross_entropy(teacher, student, temperature).numpy()
  np.testing.assert_allclose(ours, _numpy_kl_t2(teacher, student,
                                                temperature), rtol=1e-5)
  # The T^2 factor: without it T = 4's loss would be ~16x smaller.
  assert ours.min() > 0.05
  np.testing.assert_allclose(
      distillation.soft_cross_entropy(teacher, teacher, temperature).numpy(),
      0.0, atol=1e-6)


def test_a_student_is_a_record_task_or_a_one_line_error(tmp_path):
  """The student is used through bertexp.tasks.base.RecordTask (training
  records, meta data, seed, shuffle window, config): a task without that
  interface, a distillation among them, is refused before anything runs."""
  not_records = distillation.DistillationTask.__new__(
      distillation.DistillationTask)
  with pytest.raises(ValueError, match=r"student: expected a task trained "
                     r"from prepared records \(a bertexp.tasks.base.RecordTask"):
    distillation.DistillationTask(student=not_records, teacher=str(tmp_path))


def test_layer_maps_and_invalid_maps_name_both_depths():
  assert distillation.layer_pairs("uniform", 3, 6) == [(1, 2), (2, 4), (3, 6)]
  assert distillation.layer_pairs("last", 3, 6) == [(3, 6)]
  assert distillation.layer_pairs([1, 3, 6], 3, 6) == [(1, 1), (2, 3), (3, 6)]
  for bad in ([1, 2], [0, 2, 4], [1, 2, 7], "middle"):
    with pytest.raises(ValueError, match="student of 3 layers, teacher of 6"):
      distillation.layer_pairs(bad, 3, 6)
  with pytest.raises(ValueError, match="student of 4 layers, teacher of 6"):
    distillation.layer_pairs("uniform", 4, 6)


def _config(folder, name, **overrides):
  path = os.path.join(folder, name)
  with open(path, "w") as f:
    json.dump(dict(TINY_CONFIG, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0, **overrides), f)
  return path


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory, tiny_vocab_path):
  """A tiny classifier fine-tuned through the CLI on the clean SST-2
  sentences: the teacher (its run folder)."""
  root = str(tmp_path_factory.mktemp("teacher"))
  paths = prepare_tiny_sst2_run(root, tiny_vocab_path,
                                _config(root, "teacher_config.json"))
  assert _train("demo/movie_sentiment_cpu.gin", paths, steps=80,
                extra=["bertexp.ClassificationTask.dropout_rate=0.0"],
                learning_rate=1e-2) == 0
  return paths


@pytest.fixture(scope="module")
def tiny_vocab_path(tmp_path_factory):
  from conftest import TINY_VOCAB
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(TINY_VOCAB) + "\n")
  return str(path)


def _train(gin_file, paths, steps, extra=(), mode="train_and_eval",
           learning_rate=3e-3):
  bindings = [f'--gin_param={k}="{v}"' for k, v in paths.items()] + [
      f"--gin_param={k}={v}" for k, v in dict(
          TRAIN_BATCH_SIZE=16, EVAL_BATCH_SIZE=16, TRAIN_STEPS=steps,
          STEPS_PER_LOOP=steps, EVAL_INTERVAL_STEPS=steps,
          LEARNING_RATE=learning_rate, SEED=1,
          **{"bertexp.configure_numerics.precision": '"float32"',
             "bertexp.ClassificationTask.shuffle_buffer_size": 0}).items()]
  return cli.main(["train", f"--gin_file={gin_file}", f"--mode={mode}"] +
                  bindings + [f"--gin_param={b}" for b in extra])


def _student_task(teacher_run, config, **kwargs):
  student = classification.ClassificationTask(
      bert_config_file=config,
      meta_data_path=teacher_run["INPUT_META_DATA_PATH"],
      train_data_path=teacher_run["TRAIN_DATA_PATH"],
      eval_data_path=teacher_run["EVAL_DATA_PATH"], shuffle_buffer_size=0,
      dropout_rate=0.0, seed=1)
  return distillation.DistillationTask(
      student=student, teacher=teacher_run["MODEL_DIR"], **kwargs)


def _one_batch(task):
  return next(iter(task.build_inputs("train", batch_size=8)))


def test_student_that_copies_the_teacher_has_zero_distillation_loss(
    teacher_run, tmp_path):
  """Same config, every layer copied: the student equals the teacher, so
  the distill, hidden and attention terms are 0 (the label term is not)."""
  config = teacher_run["BERT_CONFIG_FILE"]
  task = _student_task(teacher_run, config, student_layers=[0, 1],
                       hidden_weight=1.0, attention_weight=1.0,
                       label_weight=1.0, temperature=2.0)
  assert task.teacher_config_file == config     # read from the run's config
  model = task.build_model()
  assert model.hidden_projection is None        # same width: no projection
  features, labels = _one_batch(task)
  outputs = model(features, training=True)
  numerators = task.loss_numerators(labels, outputs)
  for term in ("distill", "hidden", "attention"):
    np.testing.assert_allclose(numerators[term].numpy(), 0.0, atol=1e-5)
  assert float(tf.reduce_mean(numerators["label/loss"])) > 1e-3
  assert "teacher layers [0, 1] -> student layers [0, 1]" in \
      capabilities.find(task, capabilities.RunHooks).initialisation()


def test_narrower_student_gets_a_projection_and_a_positive_hidden_loss(
    teacher_run, tmp_path):
  narrow = _config(str(tmp_path), "narrow.json", hidden_size=8,
                   num_hidden_layers=1)
  task = _student_task(teacher_run, narrow, student_init="random",
                       hidden_weight=1.0, layer_map="last")
  model = task.build_model()
  assert model.hidden_projection is not None
  assert model.hidden_projection.kernel.shape == (8, TINY_CONFIG["hidden_size"])
  assert any("hidden_projection" in v.name for v in model.trainable_variables)
  # The teacher is frozen and outside the student's variables.
  assert len(model.trainable_variables) == len(model.variables)
  assert not any(v.shape == (TINY_CONFIG["intermediate_size"],
                             TINY_CONFIG["hidden_size"])
                 for v in model.variables)
  features, labels = _one_batch(task)
  hidden = task.loss_numerators(labels, model(features, training=True))
  assert float(tf.reduce_min(hidden["hidden"])) > 0
  with pytest.raises(ValueError, match="hidden_size"):
    _student_task(teacher_run, narrow).build_model()   # teacher_layers


def test_hand_computed_distill_term_on_the_models_logits(teacher_run):
  """loss_numerators' distill term = the numpy KL x T^2 of the teacher's
  and the student's logits on the same batch."""
  task = _student_task(teacher_run, teacher_run["BERT_CONFIG_FILE"],
                       student_init="random", temperature=4.0)
  model = task.build_model()
  features, labels = _one_batch(task)
  outputs = model(features, training=True)
  expected = _numpy_kl_t2(outputs["teacher_logits"].numpy().astype(np.float64),
                          outputs["logits"].numpy().astype(np.float64), 4.0)
  # float32 KL of near distributions cancels to ~1e-6 absolute.
  np.testing.assert_allclose(task.loss_numerators(labels, outputs)[
      "distill"].numpy(), expected, rtol=1e-3, atol=2e-6)
  assert expected.mean() > 10 * 2e-6


def _numpy_hidden_term(student, teacher, pairs, kernel, bias, mask):
  """TinyBERT's hidden-state term in float64: for each (student layer,
  teacher layer) pair and the embeddings (0, 0), the mean over real
  positions and the teacher's width of (student state @ kernel + bias -
  teacher state)^2; averaged over the pairs. Returns [B]."""
  terms = []
  for s, t in [(0, 0)] + pairs:
    diff = student[s] @ kernel + bias - teacher[t]                  # [B, S, Ht]
    terms.append((diff ** 2 * mask[..., None]).sum((1, 2)) /
                 (mask.sum(1) * diff.shape[-1]))
  return np.mean(terms, axis=0)


def _numpy_attention_term(student, teacher, pairs, mask):
  """The attention term in float64: the mean squared difference of the
  pre-softmax scores [B, N, S, S] over real (query, key) pairs and heads,
  averaged over the layer pairs. Returns [B]."""
  real = mask[:, None, :, None] * mask[:, None, None, :]            # [B, 1, S, S]
  terms = [((student[s - 1] - teacher[t - 1]) ** 2 * real).sum((1, 2, 3)) /
           (real.sum((1, 2, 3)) * student[s - 1].shape[1]) for s, t in pairs]
  return np.mean(terms, axis=0)


def _both_layers(task, model):
  """One training batch through the model: (features, labels, the model's
  outputs, the student's and the teacher's layers as float64 numpy
  {"hidden_states", "attention_scores"}, the input mask [B, S] float64)."""
  features, labels = _one_batch(task)
  outputs = model(features, training=True)
  _, student = model.student_model()(features, training=True,
                                     return_layers=True)
  _, teacher = model.teacher_outputs(features, return_layers=True)
  as64 = lambda layers: {
      name: [t.numpy().astype(np.float64) for t in layers[name]]
      for name in ("hidden_states", "attention_scores")}
  mask = features["input_mask"].numpy().astype(np.float64)           # [B, S]
  return features, labels, outputs, as64(student), as64(teacher), mask


def test_hand_computed_hidden_and_attention_terms_of_a_student_unlike_its_teacher(
    teacher_run, tmp_path):
  """A 1-layer student of width 8 from random weights against the 2-layer
  teacher of width 16 (layer map "uniform": student layer 1 <- teacher
  layer 2, the embeddings through the projection): the model's hidden and
  attention terms equal a float64 numpy computation from the two encoders'
  own layers, and neither is near zero."""
  narrow = _config(str(tmp_path), "narrow.json", hidden_size=8,
                   intermediate_size=16, num_hidden_layers=1)
  task = _student_task(teacher_run, narrow, student_init="random",
                       hidden_weight=1.0, attention_weight=1.0)
  model = task.build_model()
  features, labels, outputs, student, teacher, mask = _both_layers(
      task, model)
  pairs = [(1, 2)]
  hidden = _numpy_hidden_term(
      student["hidden_states"], teacher["hidden_states"], pairs,
      model.hidden_projection.kernel.numpy().astype(np.float64),
      model.hidden_projection.bias.numpy().astype(np.float64), mask)
  attention = _numpy_attention_term(student["attention_scores"],
                                    teacher["attention_scores"], pairs, mask)
  np.testing.assert_allclose(outputs["hidden_loss"].numpy(), hidden,
                             rtol=1e-4)
  np.testing.assert_allclose(outputs["attention_loss"].numpy(), attention,
                             rtol=1e-4)
  assert hidden.min() > 1e-3 and attention.min() > 1e-4, (hidden, attention)
  numerators = task.loss_numerators(labels, outputs)
  np.testing.assert_allclose(numerators["hidden"].numpy(), hidden, rtol=1e-4)
  np.testing.assert_allclose(numerators["attention"].numpy(), attention,
                             rtol=1e-4)


def test_a_mobilebert_student_learns_from_a_bert_teacher(teacher_run,
                                                         tmp_path):
  """A student of another family (MobileBERT: bottlenecks, NoNorm, the
  same vocabulary) distils from the BERT teacher: its hidden and attention
  terms equal the float64 computation from both encoders' own layers, one
  training step on the whole loss lowers it, and copying the teacher's
  layers into it is a one-line error naming both families."""
  mobile = _config(str(tmp_path), "mobile.json", family="mobilebert",
                   num_hidden_layers=1, embedding_size=8,
                   intra_bottleneck_size=8, num_feedforward_networks=2,
                   hidden_act="relu")
  with pytest.raises(ValueError, match="the student is a mobilebert encoder, "
                     "the teacher a bert one"):
    _student_task(teacher_run, mobile).build_model()
  task = _student_task(teacher_run, mobile, student_init="random",
                       hidden_weight=1.0, attention_weight=1.0,
                       label_weight=0.0, temperature=2.0)
  model = task.build_model()
  assert model.hidden_projection is None              # the same width, 16
  features, labels, outputs, student, teacher, mask = _both_layers(
      task, model)
  width = TINY_CONFIG["hidden_size"]
  hidden = _numpy_hidden_term(
      student["hidden_states"], teacher["hidden_states"], [(1, 2)],
      np.eye(width), np.zeros(width), mask)
  attention = _numpy_attention_term(student["attention_scores"],
                                    teacher["attention_scores"], [(1, 2)],
                                    mask)
  np.testing.assert_allclose(outputs["hidden_loss"].numpy(), hidden, rtol=1e-4)
  np.testing.assert_allclose(outputs["attention_loss"].numpy(), attention,
                             rtol=1e-4)
  assert hidden.min() > 1e-3 and attention.min() > 1e-4, (hidden, attention)

  def total_loss():
    numerators = task.loss_numerators(labels, model(features, training=True))
    return float(tf.reduce_mean(numerators["distill"] + numerators["hidden"] +
                                numerators["attention"]))
  before = total_loss()
  optimizer = tf_keras.optimizers.SGD(0.05)
  with tf.GradientTape() as tape:
    numerators = task.loss_numerators(labels, model(features, training=True))
    loss = tf.reduce_mean(numerators["distill"] + numerators["hidden"] +
                          numerators["attention"])
  optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
  assert total_loss() < before - 1e-3 * before, (before, total_loss())


def _write_noisy_sst2(root, vocab, config):
  """The same sentences with 6 of 16 labels flipped: the student's labels
  are wrong where the teacher is right."""
  flipped = set(POSITIVE[:3] + NEGATIVE[:3])
  folder = os.path.join(root, "noisy")
  os.makedirs(folder)
  with open(os.path.join(folder, "train.tsv"), "w") as f:
    f.write("sentence\tlabel\n")
    for _ in range(4):
      for sentences, label in ((POSITIVE, 1), (NEGATIVE, 0)):
        for s in sentences:
          f.write(f"{s}\t{1 - label if s in flipped else label}\n")
  from bertexp.tasks.classification import data as prepare
  prepare.prepare_classification(
      task_name="noisy", train_file=os.path.join(folder, "train.tsv"),
      eval_file=os.path.join(folder, "train.tsv"),
      text_columns=["sentence"], label_column="label", labels=["0", "1"],
      vocab_file=vocab, output_dir=os.path.join(root, "noisy_data"),
      max_seq_length=16)
  return os.path.join(root, "noisy_data", "noisy_train.tf_record")


def test_student_on_wrong_labels_learns_the_teachers_answers_through_the_cli(
    teacher_run, tmp_path, tiny_vocab_path):
  """bertexp train of the shipped distillation file: a 1-layer student
  from random weights on training labels with 6 of 16 wrong. With the
  teacher's outputs it scores the clean dev labels far above the same
  student trained on the wrong labels alone."""
  student_config = _config(str(tmp_path), "student.json", num_hidden_layers=1)
  noisy = _write_noisy_sst2(str(tmp_path), tiny_vocab_path, student_config)
  accuracy = {}
  for name, weights in (("distilled", dict(DISTILL_WEIGHT=1.0,
                                           LABEL_WEIGHT=0.0)),
                        ("labels_only", dict(DISTILL_WEIGHT=0.0,
                                             LABEL_WEIGHT=1.0))):
    paths = dict(teacher_run, TRAIN_DATA_PATH=noisy,
                 BERT_CONFIG_FILE=student_config, TEACHER_DIR=teacher_run[
                     "MODEL_DIR"], MODEL_DIR=str(tmp_path / name))
    del paths["INIT_CHECKPOINT"]
    extra = [f"{k}={v}" for k, v in weights.items()] + [
        "INIT_CHECKPOINT=None", "TEMPERATURE=1.0", 'STUDENT_INIT="random"',
        "bertexp.ClassificationTask.dropout_rate=0.0"]
    assert _train(DEMO_DISTILL, paths, steps=60, extra=extra,
                  learning_rate=1e-2) == 0
    summary = json.load(open(tmp_path / name / "training_summary.json"))
    accuracy[name] = summary["eval_metrics"]["accuracy"]
    assert summary["initialisation"] == "random"
  # The student exports and serves as an ordinary classifier: no teacher
  # or projection inside, its answers the clean labels.
  assert _train(DEMO_DISTILL, dict(paths, MODEL_DIR=str(tmp_path / "distilled")),
                steps=60, extra=extra, mode="export") == 0
  import bertexp
  predictor = bertexp.Predictor(str(tmp_path / "distilled"))
  served = [row["label"] for row in predictor.predict(POSITIVE + NEGATIVE)]
  assert served == ["1"] * len(POSITIVE) + ["0"] * len(NEGATIVE)
  teacher = json.load(open(os.path.join(teacher_run["MODEL_DIR"],
                                        "training_summary.json")))
  print("teacher", teacher["eval_metrics"]["accuracy"], accuracy)
  assert teacher["eval_metrics"]["accuracy"] >= 0.9
  assert accuracy["labels_only"] <= 0.75, accuracy
  assert accuracy["distilled"] >= accuracy["labels_only"] + 0.2, accuracy


def test_unlabelled_text_is_labelled_by_the_teacher_not_by_the_label_term(
    teacher_run, tmp_path):
  """`prepare classification` without --label_column writes unlabelled
  records; mixed into the student's stream, they count towards epochs, get
  the distill term and weigh 0 in the label term."""
  texts = tmp_path / "unlabelled.tsv"
  sentences = ["a fun movie", "the plot was bad", "great and fun",
               "dull and bad", "it is good", "not fun ."]
  texts.write_text("sentence\n" + "\n".join(sentences) + "\n")
  meta = json.load(open(teacher_run["INPUT_META_DATA_PATH"]))
  out = tmp_path / "unlabelled_data"
  common = ["prepare", "classification", "--task_name=unlabelled",
            f"--train_file={texts}", "--text_columns=sentence",
            f"--vocab_file={meta['vocab_file']}", f"--output_dir={out}",
            "--max_seq_length=16"]
  assert cli.main(common) == 2            # the teacher's label names needed
  assert not out.exists() or not os.listdir(out)
  assert cli.main(common + ["--labels=" + ",".join(meta["label_names"])]) == 0
  unlabelled_meta = json.load(open(out / "unlabelled_meta_data"))
  assert unlabelled_meta["unlabelled"] is True
  assert unlabelled_meta["train_data_size"] == len(sentences)
  task = _student_task(
      teacher_run, teacher_run["BERT_CONFIG_FILE"], label_weight=1.0,
      student_init="random", unlabelled_data_path=str(out / "unlabelled_train.tf_record"),
      unlabelled_meta_data_path=str(out / "unlabelled_meta_data"))
  task.check_training_data()
  total = meta["train_data_size"] + len(sentences)
  assert task.num_train_examples() == total
  features, labels = next(iter(task.build_inputs("train", batch_size=total)))
  unlabelled = labels.numpy() < 0
  assert unlabelled.sum() == len(sentences)
  model = task.build_model()
  outputs = model(features, training=True)
  weights = task.loss_weights(labels)["label/loss"].numpy()
  numerators = {k: v.numpy() for k, v in task.loss_numerators(
      labels, outputs).items()}
  assert (weights[unlabelled] == 0).all() and (weights[~unlabelled] == 1).all()
  assert (numerators["label/loss"][unlabelled] == 0).all()
  assert (numerators["label/loss"][~unlabelled] > 0).all()
  assert np.isfinite(numerators["distill"]).all()
  assert (numerators["distill"][unlabelled] > 0).any()
  # unlabelled_ratio repeats whole files: 1.5 unlabelled per labelled
  # example is the labelled file once and the unlabelled one 4 times here.
  labelled = meta["train_data_size"]
  ratio = 4 * len(sentences) / labelled
  mixed = _student_task(
      teacher_run, teacher_run["BERT_CONFIG_FILE"], label_weight=1.0,
      student_init="random", unlabelled_ratio=ratio,
      unlabelled_data_path=str(out / "unlabelled_train.tf_record"),
      unlabelled_meta_data_path=str(out / "unlabelled_meta_data"))
  assert mixed.repeats == (1, 4)
  assert mixed.num_train_examples() == labelled + 4 * len(sentences)
  _, labels = next(iter(mixed.build_inputs(
      "train", batch_size=mixed.num_train_examples())))
  assert (labels.numpy() < 0).sum() == 4 * len(sentences)   # one epoch
  for bad in (0, -1.0, "2", True):
    with pytest.raises(ValueError, match="unlabelled_ratio"):
      _student_task(teacher_run, teacher_run["BERT_CONFIG_FILE"],
                    unlabelled_ratio=bad,
                    unlabelled_data_path=str(out / "unlabelled_train.tf_record"),
                    unlabelled_meta_data_path=str(out / "unlabelled_meta_data"))
  with pytest.raises(ValueError, match="needs unlabelled_data_path"):
    _student_task(teacher_run, teacher_run["BERT_CONFIG_FILE"],
                  unlabelled_ratio=1.0)


def test_mix_repeats_takes_the_pair_of_file_repeats_nearest_the_ratio():
  assert distillation.mix_repeats(10, 3, 1.0) == (3, 10)      # 30 : 30
  assert distillation.mix_repeats(100, 50, 0.5) == (1, 1)     # as it is
  assert distillation.mix_repeats(100, 50, 0.25) == (2, 1)    # 200 : 50
  assert distillation.mix_repeats(100, 50, 100.0) == (1, 10)  # as near as 10 go
  with pytest.raises(ValueError, match="labelled and unlabelled"):
    distillation.mix_repeats(100, 0, 1.0)


def test_teacher_targets_written_once_train_the_student_the_teacher_would(
    teacher_run, tmp_path):
  """--mode=distill_targets writes the teacher's outputs beside each
  training record; a run that reads them, on one replica and on 2 mirrored
  CPU replicas, trains the same student (weights, loss, metrics) as a run
  that calls the teacher in every step."""
  student_config = _config(str(tmp_path), "student.json", num_hidden_layers=1)
  targets = str(tmp_path / "targets")
  runs = {}
  use_targets = [f'bertexp.DistillationTask.teacher_targets="{targets}"']
  mirrored = ['bertexp.make_strategy.kind="mirrored"',
              "bertexp.make_strategy.num_gpus=0",
              "bertexp.make_strategy.cpu_replicas=2"]
  for name, extra in (("in_step", []), ("targets", use_targets),
                      ("targets_mirrored", use_targets + mirrored)):
    paths = dict(teacher_run, BERT_CONFIG_FILE=student_config,
                 TEACHER_DIR=teacher_run["MODEL_DIR"],
                 MODEL_DIR=str(tmp_path / name))
    del paths["INIT_CHECKPOINT"]
    extra = extra + ["INIT_CHECKPOINT=None", "TEMPERATURE=2.0",
                     "LABEL_WEIGHT=0.5", 'STUDENT_INIT="random"',
                     "bertexp.ClassificationTask.dropout_rate=0.0"]
    if name == "targets":
      assert _train(DEMO_DISTILL, paths, steps=20, extra=extra) == 2  # none yet
      assert _train(DEMO_DISTILL, paths, steps=20, extra=extra,
                    mode="distill_targets") == 0
    assert _train(DEMO_DISTILL, paths, steps=20, extra=extra) == 0
    runs[name] = str(tmp_path / name)
  info = json.load(open(os.path.join(targets, "teacher_targets.json")))
  meta = json.load(open(teacher_run["INPUT_META_DATA_PATH"]))
  assert info["examples"] == meta["train_data_size"]
  assert info["outputs_per_example"] == 2
  reference = tf.train.load_checkpoint(tf.train.latest_checkpoint(
      runs["in_step"]))
  expected = json.load(open(os.path.join(runs["in_step"],
                                         "training_summary.json")))
  for name in ("targets", "targets_mirrored"):
    ours = tf.train.load_checkpoint(tf.train.latest_checkpoint(runs[name]))
    for key, shape in reference.get_variable_to_shape_map().items():
      if key.endswith("/.ATTRIBUTES/VARIABLE_VALUE") and not key.startswith(
          "optimizer") and len(shape) == 2:                  # the kernels
        np.testing.assert_allclose(ours.get_tensor(key),
                                   reference.get_tensor(key), atol=1e-5)
    summary = json.load(open(os.path.join(runs[name],
                                          "training_summary.json")))
    assert summary["train_loss"] == pytest.approx(expected["train_loss"],
                                                  rel=1e-5)
    assert summary["eval_metrics"] == pytest.approx(expected["eval_metrics"],
                                                    rel=1e-5)
    assert summary["replicas"] == (2 if name == "targets_mirrored" else 1)
  with pytest.raises(ValueError, match="hidden_weight and attention_weight"):
    _student_task(teacher_run, student_config, hidden_weight=1.0,
                  teacher_targets=targets)
