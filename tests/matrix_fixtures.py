"""Tiny data for every task, and one way to run any experiment on any strategy.

`build_fixtures(root)` prepares, with bertexp's own `prepare` commands, the
data of six tasks over one tiny vocabulary and a dropout-free tiny encoder:
classification (GLUE SST-2, MRPC and MNLI layouts), regression, SQuAD v1.1,
SQuAD v2.0, tagging (NER) and pretraining. Each task comes with the gin file of a shipped
CPU run and the bindings that point it at the fixtures, with a fixed data
order (shuffle buffer 0) so that runs on different strategies see the same
global batches.
"""
import glob
import json
import os
import random
import subprocess

import numpy as np
import pytest
import tensorflow as tf

import bertexp
from bertexp import cli
from bertexp.checkpoints import converters
import forked_python
from conftest import NEGATIVE, POSITIVE, REPO, TINY_CONFIG, TINY_VOCAB

# Strategy cells: extra bindings on top of an experiment's own runtime.
STRATEGIES = {
    "default": ['bertexp.make_strategy.kind="default"'],
    "mirrored_2": ['bertexp.make_strategy.kind="mirrored"',
                   "bertexp.make_strategy.num_gpus=0",
                   "bertexp.make_strategy.cpu_replicas=2"],
}
TRAIN_STEPS = 3
# 3 AdamW steps at this rate move most kernels by ~1e-3, 100x the equality
# tolerance (a spec may set its own rate); kernels with tiny gradients move
# less and are compared relative to their movement (test_strategy_matrix).
LEARNING_RATE = 1e-3
TOLERANCE = 1e-5
# The cells' encoder: the tiny config with one Transformer layer and no
# dropout. What a cell compares (how a global batch is split, summed and
# gathered across replicas and workers) does not depend on the depth, and
# one layer builds each step's graph in two thirds of the time of two
# (measured: 5.0 against 7.6 CPU-seconds for a 2-replica classification
# run); stacked layers are checked by the family parity tests and the real
# 6-layer MiniLM runs.
MATRIX_CONFIG = dict(TINY_CONFIG, num_hidden_layers=1, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)


def _pairs():
  rows = [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE]
  return [(a, b, la == lb) for a, la in rows for b, lb in rows[:4]]


def _write_glue_folders(root):
  """SST-2, MRPC and MNLI files in GLUE's layouts (header names as GLUE's)."""
  rows = [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE]
  sst = "sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows)
  _write(f"{root}/SST-2/train.tsv", sst + "".join(sst.splitlines(True)[1:]) * 3)
  _write(f"{root}/SST-2/dev.tsv", sst)
  _write(f"{root}/SST-2/test.tsv", "index\tsentence\n" + "".join(
      f"{i}\t{s}\n" for i, (s, _) in enumerate(rows)))
  pairs = _pairs()
  mrpc = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + "".join(
      f"{int(same)}\t{i}\t{i}\t{a}\t{b}\n" for i, (a, b, same) in enumerate(pairs))
  for name in ("train.tsv", "dev.tsv"):
    _write(f"{root}/MRPC/{name}", mrpc)
  _write(f"{root}/MRPC/test.tsv", "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n" +
         "".join(f"{i}\t{i}\t{i}\t{a}\t{b}\n" for i, (a, b, _) in enumerate(pairs)))
  labels = ("entailment", "contradiction", "neutral")
  mnli = "index\tsentence1\tsentence2\tgold_label\n" + "".join(
      f"{i}\t{a}\t{b}\t{labels[0] if same else labels[1 + i % 2]}\n"
      for i, (a, b, same) in enumerate(pairs))
  for name in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
    _write(f"{root}/MNLI/{name}", mnli)
  mnli_test = "index\tsentence1\tsentence2\n" + "".join(
      f"{i}\t{a}\t{b}\n" for i, (a, b, _) in enumerate(pairs))
  for name in ("test_matched.tsv", "test_mismatched.tsv", "diagnostic.tsv"):
    _write(f"{root}/MNLI/{name}", mnli_test)


def _write_regression(root):
  rng = random.Random(5)
  rows = [(s, 2.0 + rng.random()) for s in POSITIVE] + [
      (s, -2.0 - rng.random()) for s in NEGATIVE]
  table = "sentence\tscore\n" + "".join(f"{s}\t{v:.3f}\n" for s, v in rows)
  _write(f"{root}/scores/train.tsv", table + "".join(table.splitlines(True)[1:]) * 3)
  _write(f"{root}/scores/eval.tsv", table)


def _squad_json(version_2):
  """Contexts of vocabulary words; answers found by character offset."""
  data, number = [], 0
  for index, context in enumerate([
      "the movie was good and the plot is great .",
      "it is a dull film , the plot is bad .",
      "a great film ! very fun and very good .",
      "the movie is not fun and it is dull ."]):
    questions = []
    for answer in ("good", "plot", "fun", "dull", "great", "film"):
      start = context.find(answer)
      impossible = start < 0
      if impossible and not version_2:
        continue
      qa = {"id": f"q{number}", "question": f"the {answer} ?",
            "answers": [] if impossible else [
                {"text": answer, "answer_start": start}]}
      if version_2:
        qa["is_impossible"] = impossible
      questions.append(qa)
      number += 1
    data.append({"title": f"doc{index}",
                 "paragraphs": [{"context": context, "qas": questions}]})
  return {"version": "v2.0" if version_2 else "1.1", "data": data}


def _write_corpus(path, documents=30):
  rng = random.Random(0)
  sentences = POSITIVE + NEGATIVE
  _write(path, "".join("\n".join(rng.choice(sentences) for _ in range(10)) +
                       "\n\n" for _ in range(documents)))


# The tiny NER fixture's entities: sentiment words and what they are about.
NER_TYPES = {"good": "POS", "great": "POS", "fun": "POS", "bad": "NEG",
             "dull": "NEG", "movie": "OBJ", "films": "OBJ", "plot": "OBJ"}


def ner_sentence(rng, length):
  """(tokens, BIO tags) of a random fixture sentence of at least `length`
  words: "very good" and "not fun" are two-word entities, "films" is two
  word pieces (film ##s)."""
  words = ["the", "movie", "was", "good", "bad", "a", "films", "great", "!",
           ".", "is", "it", "dull", "fun", "plot", "and", "very", "not"]
  tokens, tags = [], []
  while len(tokens) < length:
    word = rng.choice(words)
    if word in ("very", "not"):
      tokens += [word, "good" if word == "very" else "fun"]
      entity_type = "POS" if word == "very" else "NEG"
      tags += [f"B-{entity_type}", f"I-{entity_type}"]
      continue
    tokens.append(word)
    tags.append(f"B-{NER_TYPES[word]}" if word in NER_TYPES else "O")
  return tokens, tags


def write_ner_conll(path, count, longest, seed):
  """`count` sentences of 3..`longest` words in CoNLL columns (token, a
  POS placeholder, tag)."""
  rng = random.Random(seed)
  sentences = [ner_sentence(rng, rng.randint(3, longest)) for _ in range(count)]
  _write(path, "".join("".join(f"{t}\tX\t{g}\n" for t, g in zip(*s)) + "\n"
                       for s in sentences))


def _prepare_all(root, vocab):
  def prepare(*args):
    assert cli.main(["prepare", *args, f"--vocab_file={vocab}"]) == 0
  for task in ("SST-2", "MRPC", "MNLI"):
    prepare("glue", f"--task={task}", f"--input_dir={root}/{task}",
            f"--output_dir={root}/data", "--max_seq_length=16")
  prepare("classification", "--task_name=scores", "--regression",
          f"--train_file={root}/scores/train.tsv",
          f"--eval_file={root}/scores/eval.tsv", f"--test_file={root}/scores/eval.tsv",
          "--text_columns=sentence", "--label_column=score",
          f"--output_dir={root}/data", "--max_seq_length=16")
  for version, flags in (("v1.1", []), ("v2.0", ["--version_2_with_negative"])):
    prepare("squad", f"--squad_file={root}/squad_{version}.json",
            f"--output_dir={root}/data", "--max_seq_length=24", "--doc_stride=8",
            "--max_query_length=8", *flags)
  # Sentences up to 24 words in windows of 14 pieces: many are split.
  prepare("tagging", "--format=conll", "--task_name=ner",
          f"--train_file={root}/ner/train.txt", f"--eval_file={root}/ner/dev.txt",
          f"--test_file={root}/ner/test.txt", f"--output_dir={root}/data",
          "--max_seq_length=16")
  for split, seed in (("train", 1), ("eval", 2)):
    prepare("pretraining", f"--input_file={root}/corpus_{split}.txt",
            f"--output_file={root}/data/pretrain_{split}.tfrecord",
            "--max_seq_length=24", "--max_predictions_per_seq=4",
            "--dupe_factor=1", f"--random_seed={seed}", "--num_workers=1")


def build_fixtures(root):
  """Prepares every task's data under `root`; returns {task: spec} where a
  spec has `gin_file` (a shipped CPU experiment or fragment), `params` (its
  bindings to the fixtures) and `tpu_gin_files` (shipped TPU experiments of
  that task) with `tpu_params`."""
  vocab = f"{root}/vocab.txt"
  _write(vocab, "\n".join(TINY_VOCAB) + "\n")
  config = f"{root}/bert_config.json"
  _write(config, json.dumps(MATRIX_CONFIG))
  tf.random.set_seed(0)
  converters.write_checkpoint_folder(bertexp.load_encoder(config), vocab,
                                      f"{root}/init")
  _write_glue_folders(root)
  _write_regression(root)
  for version, v2 in (("v1.1", False), ("v2.0", True)):
    _write(f"{root}/squad_{version}.json", json.dumps(_squad_json(v2)))
  for split, count, seed in (("train", 48, 1), ("dev", 12, 2), ("test", 8, 3)):
    write_ner_conll(f"{root}/ner/{split}.txt", count, 24, seed)
  _write_corpus(f"{root}/corpus_train.txt")
  _write_corpus(f"{root}/corpus_eval.txt", documents=6)
  _prepare_all(root, vocab)
  return _specs(root, vocab, config)


def _classification(data, task):
  return {"TRAIN_DATA_PATH": f"{data}/{task}_train.tf_record",
          "EVAL_DATA_PATH": f"{data}/{task}_eval.tf_record",
          "TEST_DATA_PATH": f"{data}/{task}_test.tf_record",
          "INPUT_META_DATA_PATH": f"{data}/{task}_meta_data"}


def _specs(root, vocab, config):
  data = f"{root}/data"
  model = {"BERT_CONFIG_FILE": config,
           "INIT_CHECKPOINT": f"{root}/init/bert_model.ckpt"}
  fine_tuning = ["bertexp.ClassificationTask.shuffle_buffer_size=0",
                 "bertexp.ClassificationTask.dropout_rate=0.0"]
  squad = lambda version: dict(
      model, VOCAB_FILE=vocab, PREDICT_FILE=f"{root}/squad_{version}.json",
      TRAIN_DATA_PATH=f"{data}/squad_{version}_train.tf_record",
      INPUT_META_DATA_PATH=f"{data}/squad_{version}_train_meta_data")
  squad_order = ["bertexp.QuestionAnsweringTask.shuffle_buffer_size=0"]
  pretraining = dict(model, INIT_CHECKPOINT=None,
                     TRAIN_DATA_PATH=f"{data}/pretrain_train.tfrecord",
                     EVAL_DATA_PATH=f"{data}/pretrain_eval.tfrecord",
                     INPUT_META_DATA_PATH=f"{data}/pretrain_train_meta_data")
  mnli = dict(model, **_classification(data, "mnli"), EXTRA_EVAL_DATA_PATHS={
      "eval_mismatched": f"{data}/mnli_eval_mismatched.tf_record"},
              EXTRA_TEST_DATA_PATHS={
                  "test_mismatched": f"{data}/mnli_test_mismatched.tf_record",
                  "ax": f"{data}/mnli_ax.tf_record"})
  return {
      "classification": dict(
          gin_file="experiments/demo/movie_sentiment_cpu.gin",
          params=dict(model, **_classification(data, "sst2")), order=fine_tuning,
          tpu={"experiments/glue/mrpc_tpu.gin": dict(
              model, **_classification(data, "mrpc")),
               "experiments/glue/mnli_tpu.gin": mnli,
               "experiments/glue/mnli_deberta_v3_base_tpu.gin": mnli,
               # TEACHER_DIR: the TPU check's run of mrpc_tpu.gin.
               "experiments/glue/mrpc_distill_tpu.gin": dict(
                   model, **_classification(data, "mrpc"),
                   INIT_CHECKPOINT=None)}),
      "regression": dict(
          gin_file="experiments/demo/movie_score_regression_cpu.gin",
          params=dict(model, **_classification(data, "scores")), order=fine_tuning,
          # No shipped TPU file does regression: the CPU demo + tpu_check.gin.
          tpu={"experiments/demo/movie_score_regression_cpu.gin": dict(
              model, **_classification(data, "scores"))}),
      "squad_v1.1": dict(gin_file="experiments/demo/squad_v1_cpu.gin",
                         params=squad("v1.1"), order=squad_order,
                         tpu={"experiments/squad/squad_v1_tpu.gin": squad("v1.1")}),
      "squad_v2.0": dict(gin_file="experiments/demo/squad_v1_cpu.gin",
                         params=dict(squad("v2.0"), VERSION_2_WITH_NEGATIVE=True),
                         order=squad_order,
                         tpu={"experiments/squad/squad_v2_tpu.gin": squad("v2.0")}),
      "tagging": dict(
          gin_file="experiments/demo/ner_zh_cpu.gin", params=dict(
              model, TRAIN_DATA_PATH=f"{data}/ner_train.tf_record",
              EVAL_DATA_PATH=f"{data}/ner_eval.tf_record",
              TEST_DATA_PATH=f"{data}/ner_test.tf_record",
              INPUT_META_DATA_PATH=f"{data}/ner_meta_data"),
          order=["bertexp.TaggingTask.shuffle_buffer_size=0",
                 "bertexp.TaggingTask.dropout_rate=0.0"], tpu={}),
      "pretraining": dict(
          gin_file="gin/tasks/pretraining.gin", params=pretraining,
          order=["bertexp.PretrainingTask.shuffle_buffer_size=0"],
          tpu={"experiments/pretrain/bert_base_tpu.gin": pretraining}),
  }


def gin_value(value):
  if value is None or isinstance(value, (bool, int, float)):
    return str(value)
  if isinstance(value, dict):
    return json.dumps(value)
  return f'"{value}"'


def train_args(gin_files, params, extra=(), mode="train_and_eval"):
  """`bertexp train` arguments: gin files, MACRO=value params, raw bindings."""
  return (["train", "--mode=" + mode] + [f"--gin_file={f}" for f in gin_files] +
          [f"--gin_param={k}={gin_value(v)}" for k, v in params.items()] +
          [f"--gin_param={b}" for b in extra])


def run_params(spec, model_dir, batch=8, **more):
  params = dict(LEARNING_RATE=LEARNING_RATE)
  params.update(spec["params"])
  return dict(params, MODEL_DIR=model_dir, TRAIN_BATCH_SIZE=batch,
              EVAL_BATCH_SIZE=batch, TRAIN_STEPS=TRAIN_STEPS,
              STEPS_PER_LOOP=TRAIN_STEPS, SEED=3) | more


def run_in_process(spec, model_dir, strategy_bindings, extra=(), mode=None):
  args = train_args([spec["gin_file"]], run_params(spec, model_dir),
                    list(spec["order"]) + list(strategy_bindings) + list(extra))
  if mode:
    args[1] = "--mode=" + mode
  assert cli.main(args) == 0, args


def _environment():
  return dict(os.environ, PYTHONPATH=REPO, TF_USE_LEGACY_KERAS="1")


def run_cli(args, timeout=600):
  """`bertexp ARGS` in a new Python process; returns its output."""
  done = forked_python.run(["-m", "bertexp.cli", *args], cwd=REPO,
                           env=_environment(), text=True, timeout=timeout,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  assert done.returncode == 0, done.stdout[-4000:]
  return done.stdout


def run_two_workers(spec, model_dir, extra=(), mode="train_and_eval",
                    timeout=400, **params):
  """The same experiment as 2 MultiWorkerMirroredStrategy workers on
  localhost: `bertexp launch --platform=local --workers=2`, which gives
  each worker process its TF_CONFIG; the strategy comes from it ("auto");
  `params` override run_params' macros (SEED=None unbinds the seed).
  Returns the launch's output (each line prefixed with its worker)."""
  args = train_args([spec["gin_file"]], run_params(spec, model_dir, **params),
                    list(spec["order"]) + list(extra), mode=mode)
  launch = ["launch", "--platform=local", "--workers=2"] + [
      a for a in args[1:] if not a.startswith("--mode=")] + [f"--mode={mode}"]
  output = run_cli(launch, timeout=timeout)
  assert "[worker 1] " in output and "multi_worker_mirrored" in output, (
      output[-3000:])
  return output


def model_weights(model_dir, step=TRAIN_STEPS):
  """{name: array} of the model's variables in MODEL_DIR's last checkpoint."""
  path = tf.train.latest_checkpoint(model_dir)
  assert path and path.endswith(f"ckpt-{step}"), path
  return {name: tf.train.load_variable(path, name)
          for name, _ in tf.train.list_variables(path)
          if name.startswith("model/")}


def kernel_movement(model_dir, init_checkpoint):
  """{encoder kernel name: max |trained - initial|} of MODEL_DIR's last
  checkpoint against the INIT_CHECKPOINT it started from."""
  trained = model_weights(model_dir)
  moved = {}
  for name, value in trained.items():
    if name.startswith("model/encoder/") and "/kernel/" in name:
      start = tf.train.load_variable(init_checkpoint, name[len("model/"):])
      moved[name] = float(np.abs(value - start).max())
  return moved


def question_ids(squad_file):
  with open(squad_file) as f:
    data = json.load(f)["data"]
  return [qa["id"] for article in data for paragraph in article["paragraphs"]
          for qa in paragraph["qas"]]


def summary(model_dir):
  with open(os.path.join(model_dir, "training_summary.json")) as f:
    return json.load(f)


def evaluated_steps(model_dir):
  """The steps MODEL_DIR/metrics.csv has evaluation rows for, in order."""
  import csv
  with open(os.path.join(model_dir, "metrics.csv")) as f:
    return sorted({int(r["step"]) for r in csv.DictReader(f)
                   if r["split"] == "eval"})


# -- equality of two runs (the "= reference" rules of docs/strategies.md) --
COUNTS = ("num_examples", "exact_match", "accuracy", "mlm_accuracy",
          "nsp_accuracy", "HasAns_exact", "NoAns_exact")


def assert_same_weights(ours, reference):
  assert ours.keys() == reference.keys() and len(ours) > 10
  for name in ours:
    np.testing.assert_allclose(ours[name], reference[name], atol=TOLERANCE,
                               rtol=TOLERANCE, err_msg=name)


def assert_same_metrics(ours, reference):
  assert ours.keys() == reference.keys() and ours
  for name, value in ours.items():
    if name.split("/")[-1] in COUNTS:
      assert value == reference[name], name
    elif name.split("/")[-1] in ("pearson", "spearman"):
      # Correlations of a 3-step tiny model's nearly constant predictions
      # magnify 1e-6 noise (reduction order across replicas, XLA's fusions,
      # thread counts) into 1e-4 and more (seen on 8 XLA replicas); ranks
      # of predictions closer than that noise swap, and each swap of two
      # neighbours moves Spearman by 12 / (n^3 - n) (0.0029 for the 16
      # regression examples; seen on 2 XLA replicas with one TensorFlow
      # thread: 0.0088, and 0.016 in one make test of three on an AMD EPYC,
      # the MSE equal to 7 digits). The regression outputs themselves are
      # held to rel 1e-4 through "mse" and "loss" below, and Pearson to
      # 2e-3; Spearman is allowed 14 such swaps.
      tolerance = 0.04 if name.endswith("spearman") else 2e-3
      assert value == pytest.approx(reference[name], abs=tolerance), name
    else:
      assert value == pytest.approx(reference[name], rel=1e-4, abs=1e-5), name


def prediction_files(model_dir):
  return sorted(glob.glob(f"{model_dir}/test_results*.tsv") +
                glob.glob(f"{model_dir}/predictions.json") +
                glob.glob(f"{model_dir}/predictions_*.conll") +
                glob.glob(f"{model_dir}/entities_*.jsonl"))


def _without_scores(entities_file):
  """An entities JSONL file's sentences with each entity's score apart."""
  sentences, scores = [], []
  for line in open(entities_file):
    sentence = json.loads(line)
    scores += [e.pop("score") for e in sentence["entities"]]
    sentences.append(sentence)
  return sentences, scores


def assert_same_predictions(model_dir, reference_dir):
  files = prediction_files(model_dir)
  assert [os.path.basename(f) for f in files] == [
      os.path.basename(f) for f in prediction_files(reference_dir)]
  for path in files:
    reference = os.path.join(reference_dir, os.path.basename(path))
    if path.endswith(".json"):
      assert json.load(open(path)) == json.load(open(reference))
    elif path.endswith(".conll"):
      assert open(path).read() == open(reference).read()
    elif path.endswith(".jsonl"):
      ours, our_scores = _without_scores(path)
      theirs, their_scores = _without_scores(reference)
      assert ours == theirs
      np.testing.assert_allclose(our_scores, their_scores, atol=1e-5)
    else:
      np.testing.assert_allclose(np.loadtxt(path, ndmin=2),
                                 np.loadtxt(reference, ndmin=2), atol=1e-5)


def assert_differences_far_below_movement(model_dir, reference_dir,
                                           init_checkpoint):
  """Each encoder kernel's difference between the two runs is under 1 % of
  how far training moved it: a fixed tolerance alone proves little for
  kernels whose gradients are tiny (attention keys move ~1e-5 in 3 steps)."""
  ours = model_weights(model_dir)
  moved = kernel_movement(reference_dir, init_checkpoint)
  assert len(moved) >= 7      # a block's six kernels and the pooler, at least
  reference = model_weights(reference_dir)
  for name, movement in moved.items():
    difference = float(np.abs(ours[name] - reference[name]).max())
    # A kernel outside the loss (SQuAD's pooler) must not move on either.
    assert movement == difference == 0 or (
        movement > 1e-6 and difference <= movement / 100), (
            name, difference, movement)


# The last step's gradient norm, relative. Summing in another order (8 XLA
# replicas, a cross-replica sum, or only oneDNN's AVX2 instead of AVX-512
# kernels on one replica) rounds each activation h by ~eps·|h| (float32 eps
# 6e-8); summed over a tiny batch that stays near 1e-6 of the norm.
GRADIENT_NORM_RTOL = 1e-5
# A distillation student whose embeddings and layers are copies of its
# teacher's (student_init "teacher_layers", as the shipped TPU file) starts
# with hidden states equal to the teacher's: after 2 steps at 1e-3,
# |h_student - h_teacher| ~ 1e-3·|h|, and the hidden-state term's gradient
# (proportional to that difference) carries the rounding of h magnified
# ~1000x. Measured on one replica of the TPU check's distillation cell, the
# same run under four CPU kernel orders (oneDNN AVX-512 / AVX2 / SSE4.1 via
# ONEDNN_MAX_CPU_ISA, and Eigen via TF_ENABLE_ONEDNN_OPTS=0): gradient norms
# 0.45947784 ... 0.45948476, a spread of 1.5e-5 (the embeddings' part 4.5e-5);
# the 8-replica XLA run (0.45948249) lies inside it. 1e-4 is ~7x that spread
# and still fails any gradient scaled by more than 1.0001.
COPIED_STUDENT_GRADIENT_NORM_RTOL = 1e-4


def assert_equal_runs(model_dir, reference_dir, init_checkpoint=None, *,
                      gradient_norm_rtol=GRADIENT_NORM_RTOL):
  assert_same_weights(model_weights(model_dir),
                       model_weights(reference_dir))
  if init_checkpoint:          # pretraining starts from random weights
    assert_differences_far_below_movement(model_dir, reference_dir,
                                           init_checkpoint)
  ours, reference = summary(model_dir), summary(reference_dir)
  assert_same_metrics(ours["eval_metrics"], reference["eval_metrics"])
  assert ours["train_loss"] == pytest.approx(reference["train_loss"], rel=1e-5)
  # Adam hides a constant gradient scale from the weights; the norm shows it.
  norm = ours["last_train_metrics"]["gradient_norm"]
  expected = reference["last_train_metrics"]["gradient_norm"]
  assert norm == pytest.approx(expected, rel=gradient_norm_rtol), (
      f"last gradient norm {norm!r} vs the reference's {expected!r}: relative "
      f"difference {abs(norm - expected) / abs(expected):.3g} above "
      f"{gradient_norm_rtol:g}")
  assert_same_predictions(model_dir, reference_dir)
