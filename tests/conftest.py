"""Shared fixtures: a tiny vocab, a tiny encoder config, a tiny GLUE folder."""
import json
import os
import tempfile

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The XLA runs (TPU check, XLA families) compile tiny graphs whose run time
# is nothing beside LLVM's optimisation passes: at the lowest backend level
# a TPU-check process takes ~27 % less CPU. The same operations run (what
# the tests compare is unchanged); only the machine code is less tuned.
# Subprocesses inherit it.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_backend_optimization_level=0 "
    "--xla_llvm_disable_expensive_passes=true")

import gin  # noqa: E402
import pytest  # noqa: E402

# Assertions in the shared helpers print the values they compare.
pytest.register_assert_rewrite("matrix_fixtures")

from bertexp.train import strategy  # noqa: E402

# Before any test starts TensorFlow: 8 logical CPUs, so tests can build
# mirrored strategies of up to 8 simulated replicas in this process
# (bertexp.make_strategy.cpu_replicas). Unplaced ops still run on /cpu:0.
strategy.split_cpu(8)

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
MINILM_HF = os.path.join(REPO, ".cache", "minilm_hf")

# 11 word pieces + reserved tokens: enough for the fixture sentences.
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie",
              "was", "good", "bad", "not", "a", "film", "##s", "great", "!",
              ".", ",", "is", "it", "dull", "fun", "plot", "and", "very"]

TINY_CONFIG = {"vocab_size": len(TINY_VOCAB), "hidden_size": 16,
               "num_hidden_layers": 2, "num_attention_heads": 2,
               "intermediate_size": 32, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
               "max_position_embeddings": 64, "type_vocab_size": 2,
               "initializer_range": 0.02}

# The slowest test files, slowest first (by the CPU-seconds
# `tools/suite_cpu.py` counts for them and their subprocesses): with
# `--dist loadfile --no-loadscope-reorder` (the Makefile's) the workers take
# files in this order, so the suite does not end with one worker running a
# long file alone while the others wait. Other files follow in collection
# order.
SLOW_FILES_FIRST = ("test_tpu_check.py", "test_encoder_families.py",
                    "test_sweep.py", "test_strategy_matrix.py",
                    "test_faults.py", "test_embedding_task.py",
                    "test_beam_pipelines.py", "test_pretraining_task.py",
                    "test_accumulation_recompute_padding.py",
                    "test_multiple_choice.py", "test_train.py",
                    "test_sentencepiece_families.py", "test_quickstart.py",
                    "test_real_weights.py", "test_class_weights.py",
                    "test_long_documents.py", "test_install.py",
                    "test_distillation.py", "test_serving.py",
                    "test_serving_lifecycle.py",
                    "test_task_outside_the_package.py", "test_tagging.py",
                    "test_early_stopping.py", "test_kfold.py",
                    "test_train_step.py", "test_squad_task.py",
                    "test_hub_encoder.py")


def pytest_collection_modifyitems(items):
  """Orders the collected tests: SLOW_FILES_FIRST's files first, in its
  order, each file's tests in their own order."""
  rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_finish(session):
  """The modules the test files imported (TensorFlow's millions of objects)
  out of the garbage collector's reach: each full collection during the
  tests walked them all (half the collector's time, 6 -> 3 CPU-s over
  test_train.py and test_class_weights.py)."""
  del session
  import gc
  gc.freeze()


@pytest.fixture(autouse=True)
def clean_gin():
  """Each test starts with no gin bindings and TF's float32 policy (a run of
  a bf16 experiment sets the process-wide Keras policy)."""
  import tf_keras
  gin.clear_config()
  yield
  gin.clear_config()
  tf_keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
  """The URL of a PostgreSQL server (pgserver's binaries, from PyPI) for
  this test process; each test uses a study name of its own."""
  import pgserver
  os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp_path_factory.mktemp("run")))
  server = pgserver.get_server(str(tmp_path_factory.mktemp("pg")),
                               cleanup_mode="stop")
  yield server.get_uri()
  server.cleanup()


@pytest.fixture
def tiny_vocab(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(TINY_VOCAB) + "\n")
  return str(path)


@pytest.fixture
def tiny_config(tmp_path):
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(TINY_CONFIG))
  return str(path)


# For tests of what runs around the model (faults, sweeps, folds, locks):
# one Transformer layer builds each step's graph in two thirds of the time
# of two, and nothing they check depends on the depth.
ONE_LAYER_CONFIG = dict(TINY_CONFIG, num_hidden_layers=1)


@pytest.fixture
def one_layer_config(tmp_path):
  path = tmp_path / "bert_config_1_layer.json"
  path.write_text(json.dumps(ONE_LAYER_CONFIG))
  return str(path)


POSITIVE = ["the movie was good", "a great film !", "it is fun", "very good",
            "the plot is great", "fun and good", "a good movie", "great !"]
NEGATIVE = ["the movie was bad", "a dull film .", "it is not fun",
            "very bad", "the plot is dull", "not good", "a bad movie", "dull ."]


def write_sst2_folder(folder, repeat=4):
  """A GLUE SST-2-format folder (header, sentence \\t label) of tiny data."""
  os.makedirs(folder, exist_ok=True)
  rows = [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE]
  with open(os.path.join(folder, "train.tsv"), "w") as f:
    f.write("sentence\tlabel\n")
    for _ in range(repeat):
      for s, label in rows:
        f.write(f"{s}\t{label}\n")
  with open(os.path.join(folder, "dev.tsv"), "w") as f:
    f.write("sentence\tlabel\n")
    for s, label in rows:
      f.write(f"{s}\t{label}\n")
  with open(os.path.join(folder, "test.tsv"), "w") as f:
    f.write("index\tsentence\n")
    for i, (s, _) in enumerate(rows):
      f.write(f"{i}\t{s}\n")
  return folder


def prepare_tiny_sst2_run(root, tiny_vocab, tiny_config):
  """SST-2-format data + an initial encoder checkpoint under `root`; returns
  the macro bindings of a run on them."""
  import tensorflow as tf
  import bertexp
  from bertexp.checkpoints import converters
  from bertexp.tasks.classification import data as prepare
  gfile = tf.io.gfile
  # Per process: `make test` runs test files in several processes.
  source = os.path.join(tempfile.gettempdir(),
                        f"bertexp_sst2_src_{os.getpid()}")
  if not os.path.exists(source):
    import atexit
    import shutil
    atexit.register(shutil.rmtree, source, True)     # not left in /tmp
  local = write_sst2_folder(source)
  glue_dir = f"{root}/SST-2"
  gfile.makedirs(glue_dir)
  for name in os.listdir(local):
    gfile.copy(os.path.join(local, name), f"{glue_dir}/{name}", overwrite=True)
  gfile.copy(tiny_vocab, f"{root}/vocab.txt", overwrite=True)
  gfile.copy(tiny_config, f"{root}/bert_config.json", overwrite=True)
  tf.random.set_seed(0)
  encoder = bertexp.load_encoder(f"{root}/bert_config.json")
  converters.write_checkpoint_folder(encoder, f"{root}/vocab.txt",
                                      f"{root}/init")
  prepare.prepare_glue("SST-2", input_dir=glue_dir,
                       vocab_file=f"{root}/vocab.txt",
                       output_dir=f"{root}/data", max_seq_length=16)
  return {
      "BERT_CONFIG_FILE": f"{root}/bert_config.json",
      "INIT_CHECKPOINT": f"{root}/init/bert_model.ckpt",
      "TRAIN_DATA_PATH": f"{root}/data/sst2_train.tf_record",
      "EVAL_DATA_PATH": f"{root}/data/sst2_eval.tf_record",
      "TEST_DATA_PATH": f"{root}/data/sst2_test.tf_record",
      "INPUT_META_DATA_PATH": f"{root}/data/sst2_meta_data",
      "MODEL_DIR": f"{root}/model",
  }


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory):
  """A folder all test processes of one pytest run share (xdist gives each
  worker its own base temp, under one parent), for `shared_run`."""
  base = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    base = base.parent
  return str(base / "shared_runs")


def shared_run(shared_root, name, build):
  """shared_root/name, made by `build(folder)` once per pytest run: the
  first test process that asks builds it under a file lock, the others wait
  for it and reuse it. A test that writes into a shared run works on a copy
  (`copy_run`)."""
  import fcntl
  import shutil
  folder = os.path.join(shared_root, name)
  os.makedirs(shared_root, exist_ok=True)
  with open(folder + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      if not os.path.exists(os.path.join(folder, "COMPLETE")):
        shutil.rmtree(folder, ignore_errors=True)
        build(folder)
        open(os.path.join(folder, "COMPLETE"), "w").close()
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)
  return folder


def copy_run(params, destination):
  """`params` of a shared run with MODEL_DIR copied to `destination` (its
  data stay shared, read only)."""
  import shutil
  shutil.copytree(params["MODEL_DIR"], destination)
  return dict(params, MODEL_DIR=str(destination))


# The shared classifier's training, float32: its probabilities spread over
# a third of [0, 1] without saturating (at 1e-2 they did, and hid what int8
# rounding changes). Tests that check what a run learns, not its
# evaluations, bind EVAL_INTERVAL_STEPS to their step count: a tiny data
# set's epoch (the default interval of evaluations and checkpoints) is a
# few steps, and a long run would evaluate and checkpoint dozens of times.
SPREAD_TRAINING = {"TRAIN_STEPS": 60, "TRAIN_BATCH_SIZE": 16,
                   "STEPS_PER_LOOP": 60, "EVAL_INTERVAL_STEPS": 60,
                   "LEARNING_RATE": 1e-3, "EVAL_BATCH_SIZE": 16}


@pytest.fixture(scope="session")
def trained_h64_classifier(shared_runs):
  """The macro bindings of one tiny SST-2 classifier, hidden size 64
  (kernels of 64 x 64 and more: above TFLite's and ONNX Runtime's
  quantisation floors), trained as SPREAD_TRAINING says in float32 and
  exported, once per `make test` for every test process: the TFLite and
  ONNX export tests start from it (each on its own copy)."""
  from bertexp import cli

  def build(folder):
    os.makedirs(folder)
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
      f.write("\n".join(TINY_VOCAB) + "\n")
    with open(os.path.join(folder, "config_h64.json"), "w") as f:
      json.dump(dict(TINY_CONFIG, hidden_size=64, intermediate_size=128), f)
    params = prepare_tiny_sst2_run(os.path.join(folder, "exp"),
                                   os.path.join(folder, "vocab.txt"),
                                   os.path.join(folder, "config_h64.json"))
    with open(os.path.join(folder, "params.json"), "w") as f:
      json.dump(params, f)
    for mode in ("train", "export"):
      gin.clear_config()
      assert cli.main(["train", f"--gin_file={DEMO_GIN}", f"--mode={mode}"] +
                      gin_params(params, **SPREAD_TRAINING) + [
                          "--gin_param=bertexp.configure_numerics.precision="
                          "'float32'"]) == 0
    gin.clear_config()

  folder = shared_run(shared_runs, "h64_classifier", build)
  with open(os.path.join(folder, "params.json")) as f:
    return json.load(f)


DEMO_GIN = os.path.join(REPO, "experiments", "demo", "movie_sentiment_cpu.gin")


def gin_params(params, **more):
  """--gin_param flags binding each MACRO of `params` (and `more`)."""
  return [f"--gin_param={k}={json.dumps(v)}"
          for k, v in dict(params, **more).items()]


def requires_minilm():
  if not os.path.exists(os.path.join(MINILM_HF, "model.safetensors")):
    pytest.fail(f"{MINILM_HF} is missing: `make test` fetches it "
                "(make setup, or python tools/demo_data.py fetch)")


def tiny_sst2_task(root, vocab, dropout=0.0, layers=None):
  """A ClassificationTask on the tiny SST-2 data under `root`, in file order
  (no shuffle), with the tiny encoder's dropout rates set to `dropout` (and
  `layers` Transformer layers, when given)."""
  from bertexp.tasks.classification import task as classification
  config = os.path.join(root, f"config_{dropout}.json")
  os.makedirs(root, exist_ok=True)
  depth = {} if layers is None else {"num_hidden_layers": layers}
  with open(config, "w") as f:
    json.dump(dict(TINY_CONFIG, hidden_dropout_prob=dropout,
                   attention_probs_dropout_prob=dropout, **depth), f)
  paths = prepare_tiny_sst2_run(os.path.join(root, f"exp_{dropout}"), vocab,
                                config)
  return classification.ClassificationTask(
      bert_config_file=config, meta_data_path=paths["INPUT_META_DATA_PATH"],
      train_data_path=paths["TRAIN_DATA_PATH"],
      eval_data_path=paths["EVAL_DATA_PATH"], shuffle_buffer_size=0,
      dropout_rate=dropout, seed=1)


def tiny_trainer(task, replicas, make_optimizer, batch, total_steps,
                 **step_settings):
  """bertexp's Trainer for `task` on 1 replica or `replicas` mirrored CPU
  replicas, the optimizer built, reading the task's training batches."""
  from bertexp.train import strategy as strategy_lib
  from bertexp.train import trainer as trainer_lib
  strategy = (strategy_lib.make_strategy("default") if replicas == 1 else
              strategy_lib.make_strategy("mirrored", cpu_replicas=replicas))
  with strategy.scope():
    model = task.build_model()
    optimizer = make_optimizer()
    optimizer.build(model.trainable_variables)
  dataset = strategy.distribute_datasets_from_function(
      lambda ctx: task.build_inputs("train", ctx,
                                    ctx.get_per_replica_batch_size(batch)))
  return trainer_lib.Trainer(
      task=task, model=model, optimizer=optimizer, strategy=strategy,
      settings=trainer_lib.StepSettings(global_batch_size=batch,
                                        eval_batch_size=batch, **step_settings),
      total_steps=total_steps, train_dataset=dataset)


def start_server(model_dir, *flags, name="tiny"):
  """`bertexp serve` in a new process (forked_python's) on free localhost
  ports: (process, REST port, gRPC port)."""
  import re
  import subprocess
  import forked_python
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
  where = [model_dir, f"--model_name={name}"] if model_dir else []
  process = forked_python.popen(
      ["-m", "bertexp.cli", "serve", *where,
       "--rest_port=0", "--grpc_port=0", "--host=127.0.0.1", *flags],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
  line = process.stdout.readline()
  match = re.search(r"REST port (\d+), gRPC port (\d+)", line)
  if not match:
    process.kill()
    pytest.fail(f"no server: {line}{process.stderr.read()[-3000:]}")
  return process, int(match[1]), int(match[2])
