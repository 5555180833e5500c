"""Faults injected into real training runs of a tiny encoder (dropout on,
shuffled data over several epochs): SIGKILL at random moments, SIGTERM in
the middle of a long loop, non-finite losses, damaged checkpoints."""
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.train import stop_signals
import forked_python
from conftest import (ONE_LAYER_CONFIG, REPO, TINY_VOCAB,
                      prepare_tiny_sst2_run)

DEMO = os.path.join(REPO, "experiments/demo/movie_sentiment_cpu.gin")
ENV = dict(os.environ, PYTHONPATH=REPO, TF_USE_LEGACY_KERAS="1")


@pytest.fixture
def run(tmp_path, tiny_vocab, one_layer_config):
  return prepare_tiny_sst2_run(str(tmp_path / "exp"), tiny_vocab,
                               one_layer_config)


def _args(paths, model_dir, mode="train", **more):
  """`bertexp train` on the tiny SST-2 run: 64 examples, batch 8, a shuffle
  window of 20 (windows straddle epochs' ends), deterministic ops."""
  values = dict(paths, MODEL_DIR=model_dir, TRAIN_BATCH_SIZE=8,
                EVAL_BATCH_SIZE=8, SEED=5, **more)
  params = [f"--gin_param={k}={json.dumps(v) if isinstance(v, str) else v}"
            for k, v in values.items()]
  return (["train", f"--gin_file={DEMO}", f"--mode={mode}"] + params + [
      "--gin_param=bertexp.ClassificationTask.shuffle_buffer_size=20",
      "--gin_param=bertexp.experiment.deterministic=True"])


def _start(args):
  """`bertexp ARGS` in a new process (one CPU thread: reduction order fixed)."""
  args = list(args) + ["--gin_param=bertexp.experiment.cpu_threads=1"]
  return forked_python.popen(["-m", "bertexp.cli", *args], cwd=REPO, env=ENV,
                             text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)


def _finish(args, expect=0, timeout=300):
  process = _start(args)
  output, _ = process.communicate(timeout=timeout)
  assert process.returncode == expect, output[-4000:]
  return output


def _variables(prefix):
  """{name: value} of every variable in a checkpoint (model, optimizer,
  data position and seed)."""
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()
          if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}


def _wait_for(path_pattern, process, timeout=120):
  deadline = time.time() + timeout
  while not glob.glob(path_pattern):
    assert process.poll() is None, process.communicate()[0][-4000:]
    assert time.time() < deadline, f"{path_pattern} never appeared"
    time.sleep(0.05)


def test_sigkill_at_random_moments_then_rerun_ends_bit_identical(run, tmp_path):
  # Kills land in the first half: 20+ steps and 10+ checkpoints remain.
  steps = dict(TRAIN_STEPS=40, STEPS_PER_LOOP=4)
  every_2 = ["--gin_param=bertexp.experiment.checkpoint_interval_steps=2"]
  whole = str(tmp_path / "uninterrupted")
  _finish(_args(run, whole, **steps) + every_2)
  killed = str(tmp_path / "killed")
  # FAULT_SEED=<the printed seed> replays a failure's kill moments.
  seed = int(os.environ.get("FAULT_SEED", time.time()))
  print(f"FAULT_SEED={seed}")
  rng = random.Random(seed)
  kills = []
  for step in sorted(rng.sample(range(4, 20, 4), 2)):   # loop ends
    process = _start(_args(run, killed, **steps) + every_2)
    _wait_for(f"{killed}/ckpt-{step}.index", process)
    time.sleep(rng.uniform(0, 0.2))   # anywhere in the next steps
    process.send_signal(signal.SIGKILL)
    process.wait()
    kills.append(step)
    # The kill interrupted training: no final checkpoint, no summary yet.
    assert process.returncode == -signal.SIGKILL, (seed, kills)
    assert not os.path.exists(f"{killed}/ckpt-40.index"), (seed, kills)
    assert not os.path.exists(f"{killed}/training_summary.json"), (seed, kills)
  output = _finish(_args(run, killed, **steps) + every_2)
  assert "resuming from" in output, (seed, kills, output[-3000:])
  expected, got = _variables(f"{whole}/ckpt-40"), _variables(f"{killed}/ckpt-40")
  assert sorted(expected) == sorted(got)
  for name in expected:
    np.testing.assert_array_equal(
        got[name], expected[name],
        err_msg=f"{name} after kills at {kills} (FAULT_SEED={seed})")
  seen = [n for n in got if "examples_seen" in n]
  assert seen and got[seen[0]] == 40 * 8


def _stop_after(args, seconds, expect_line="training data: seed"):
  """Starts `bertexp ARGS`, sends SIGTERM `seconds` after `expect_line`;
  returns (exit status, output)."""
  process = _start(args)
  lines = []
  for line in process.stdout:
    lines.append(line)
    if expect_line in line:
      break
  time.sleep(seconds)
  process.send_signal(signal.SIGTERM)
  output = "".join(lines) + process.communicate(timeout=180)[0]
  return process.returncode, output


def _checkpoint_steps(model_dir):
  return sorted(int(path.rsplit("-", 1)[1].split(".")[0])
                for path in glob.glob(f"{model_dir}/ckpt-*.index"))


def test_sigterm_mid_loop_checkpoints_at_the_step_reached_then_resumes(
    run, tmp_path):
  model_dir = str(tmp_path / "model")
  # One loop of 100,000 steps: without the signal path nothing would be
  # saved before its end.
  args = _args(run, model_dir, TRAIN_STEPS=100000, STEPS_PER_LOOP=100000)
  status, output = _stop_after(args, 3, expect_line="bertexp: training started")
  assert status == stop_signals.EXIT_STATUS, output[-3000:]
  (step,) = _checkpoint_steps(model_dir)
  assert 0 < step < 100000, output[-3000:]
  assert f"SIGTERM at step {step}" in output and "run the same command" in output
  assert not os.path.exists(f"{model_dir}/training_summary.json")
  state = _variables(f"{model_dir}/ckpt-{step}")
  (seen,) = [n for n in state if "examples_seen" in n]
  assert state[seen] == step * 8
  # The same command resumes at that step and data position (stopped again).
  status, output = _stop_after(args, 1, expect_line="bertexp: training started")
  assert status == stop_signals.EXIT_STATUS, output[-3000:]
  assert f"resuming from {model_dir}/ckpt-{step}" in output
  assert f"starting after {step * 8} examples" in output
  assert max(_checkpoint_steps(model_dir)) > step


def _poison(paths, root, poisoned):
  """A regression copy of the training records whose records at indices
  `poisoned` have the label 1e30 (squared: inf): the loss of any batch
  holding one is not finite."""
  source = paths["TRAIN_DATA_PATH"]
  target = f"{root}/poisoned_train.tf_record"
  with tf.io.TFRecordWriter(target) as writer:
    for i, record in enumerate(tf.data.TFRecordDataset(source)):
      example = tf.train.Example.FromString(record.numpy())
      label = example.features.feature.pop("label_ids").int64_list.value[0]
      example.features.feature["label_ids"].float_list.value.append(
          1e30 if i in poisoned else float(label))
      writer.write(example.SerializeToString())
  with open(paths["INPUT_META_DATA_PATH"]) as f:
    meta = json.load(f)
  meta.update(num_labels=1, label_type="float", label_names=None)
  with open(f"{root}/poisoned_meta_data", "w") as f:
    json.dump(meta, f)
  return dict(paths, TRAIN_DATA_PATH=target,
              INPUT_META_DATA_PATH=f"{root}/poisoned_meta_data")


def _weights_finite(model_dir):
  prefix = tf.train.latest_checkpoint(model_dir)
  values = _variables(prefix)
  return all(np.all(np.isfinite(v)) for v in values.values()
             if np.issubdtype(np.asarray(v).dtype, np.floating))


def test_poisoned_batches_are_skipped_counted_and_logged(run, tmp_path, caplog,
                                                        capfd):
  paths = _poison(run, str(tmp_path), poisoned={3, 40})
  model_dir = str(tmp_path / "model")
  # No shuffle: record i is in step i // 8 + 1 of each epoch.
  args = _args(paths, model_dir, TRAIN_STEPS=16, STEPS_PER_LOOP=4) + [
      "--gin_param=bertexp.ClassificationTask.shuffle_buffer_size=0"]
  assert cli.main(args) == 0
  with open(f"{model_dir}/training_summary.json") as f:
    summary = json.load(f)
  # Two epochs of 8 steps; steps 1 and 6 of each hold a poisoned record.
  assert summary["nonfinite_steps"] == 4
  assert _weights_finite(model_dir)
  logged = capfd.readouterr().err
  for step in (1, 6, 9, 14):
    assert f"skipped step {step} " in logged, logged[-2000:]
  assert "records [0 1 2 3 4 5 6 7]" in logged


def test_divergence_rolls_back_and_stops_after_max_trials(run, tmp_path,
                                                          capsys, caplog):
  model_dir = str(tmp_path / "model")
  every_2 = ["--gin_param=bertexp.experiment.checkpoint_interval_steps=2"]
  base = _args(run, model_dir, TRAIN_STEPS=4, STEPS_PER_LOOP=2) + every_2
  assert cli.main(base) == 0
  good = _variables(f"{model_dir}/ckpt-4")
  # Now every loss is "too large": each step is skipped, the run rolls back
  # twice, then stops with an error; no checkpoint changes.
  diverging = _args(run, model_dir, TRAIN_STEPS=40, STEPS_PER_LOOP=2) + every_2 + [
      "--gin_param=bertexp.experiment.loss_upper_bound=0.0",
      "--gin_param=bertexp.experiment.max_consecutive_bad_steps=3",
      "--gin_param=bertexp.experiment.recovery_max_trials=2"]
  assert cli.main(diverging) == 2
  error = capsys.readouterr().err
  assert "diverged again after 2 roll-backs" in error, error
  assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-4")
  latest = _variables(f"{model_dir}/ckpt-4")
  for name, value in good.items():
    if name.startswith("model/"):
      np.testing.assert_array_equal(latest[name], value, err_msg=name)
  assert "rolled back to" in caplog.text


def _two_checkpoints_args(run, model_dir):
  return _args(run, model_dir, TRAIN_STEPS=4, STEPS_PER_LOOP=2) + [
      "--gin_param=bertexp.experiment.checkpoint_interval_steps=2"]


@pytest.fixture(scope="module")
def two_checkpoints_run(tmp_path_factory):
  """One run of 4 steps with checkpoints at steps 2 and 4, made once: each
  test damages its own copy (the folder's files name checkpoints relative
  to it, so a copy is a run of its own)."""
  root = tmp_path_factory.mktemp("two_checkpoints")
  vocab, config = str(root / "vocab.txt"), str(root / "config.json")
  with open(vocab, "w") as f:
    f.write("\n".join(TINY_VOCAB) + "\n")
  with open(config, "w") as f:
    json.dump(ONE_LAYER_CONFIG, f)
  paths = prepare_tiny_sst2_run(str(root / "exp"), vocab, config)
  model_dir = str(root / "model")
  assert cli.main(_two_checkpoints_args(paths, model_dir)) == 0
  assert os.path.exists(f"{model_dir}/ckpt-4.manifest.json")
  return paths, model_dir


def _two_checkpoints(two_checkpoints_run, model_dir):
  """A copy of the two-checkpoint run at `model_dir`; returns its command."""
  paths, source = two_checkpoints_run
  shutil.copytree(source, model_dir)
  return paths, _two_checkpoints_args(paths, model_dir)


def _truncate(path):
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) // 2)


@pytest.mark.parametrize("damage", ["truncated", "missing_shard", "flipped"])
def test_damaged_newest_checkpoint_falls_back_to_the_previous(
    two_checkpoints_run, tmp_path, damage, caplog):
  model_dir = str(tmp_path / "model")
  run, args = _two_checkpoints(two_checkpoints_run, model_dir)
  data = glob.glob(f"{model_dir}/ckpt-4.data-*")[0]
  if damage == "truncated":
    _truncate(data)
  elif damage == "missing_shard":
    os.remove(data)
  else:   # same size, one byte changed
    with open(data, "r+b") as f:
      f.seek(os.path.getsize(data) // 2)
      byte = f.read(1)
      f.seek(-1, 1)
      f.write(bytes([byte[0] ^ 0xFF]))
  with caplog.at_level("WARNING"):
    assert cli.main(_args(run, model_dir, mode="eval")) == 0
  assert "damaged checkpoint" in caplog.text and "ckpt-4" in caplog.text
  with open(f"{model_dir}/eval_results.json") as f:
    assert json.load(f)["checkpoint"].endswith("ckpt-2")
  # Training resumes from ckpt-2; the damaged files are kept aside.
  caplog.clear()
  with caplog.at_level("INFO"):
    assert cli.main(args) == 0
  assert "resuming from" in caplog.text and "ckpt-2" in caplog.text
  assert os.listdir(f"{model_dir}/damaged")
  with open(f"{model_dir}/training_summary.json") as f:
    assert json.load(f)["resumed_from_step"] == 2


def test_unreadable_state_file_is_rebuilt_not_a_fresh_start(
    two_checkpoints_run, tmp_path, caplog):
  model_dir = str(tmp_path / "model")
  run, args = _two_checkpoints(two_checkpoints_run, model_dir)
  with open(f"{model_dir}/checkpoint", "w") as f:
    f.write("model_checkpoint_path: \x00garbage {{{")
  args = [a.replace("TRAIN_STEPS=4", "TRAIN_STEPS=6") for a in args]
  with caplog.at_level("INFO"):
    assert cli.main(args) == 0
  assert "rebuilt from the checkpoint files" in caplog.text
  with open(f"{model_dir}/training_summary.json") as f:
    assert json.load(f)["resumed_from_step"] == 4


def test_no_intact_checkpoint_is_an_error_not_a_fresh_start(
    two_checkpoints_run, tmp_path, capsys):
  model_dir = str(tmp_path / "model")
  run, args = _two_checkpoints(two_checkpoints_run, model_dir)
  for data in glob.glob(f"{model_dir}/ckpt-*.data-*"):
    _truncate(data)
  assert cli.main(args) == 2
  error = capsys.readouterr().err
  assert "no intact checkpoint" in error and "ckpt-2" in error, error
  assert not glob.glob(f"{model_dir}/ckpt-6*")
  shutil.rmtree(model_dir)


def test_rollback_continues_past_the_bad_batch_and_finishes(run, tmp_path,
                                                            caplog):
  paths = _poison(run, str(tmp_path), poisoned={20})
  model_dir = str(tmp_path / "model")
  args = _args(paths, model_dir, TRAIN_STEPS=8, STEPS_PER_LOOP=1) + [
      "--gin_param=bertexp.ClassificationTask.shuffle_buffer_size=0",
      "--gin_param=bertexp.experiment.checkpoint_interval_steps=2",
      "--gin_param=bertexp.experiment.max_consecutive_bad_steps=1"]
  with caplog.at_level("INFO"):
    assert cli.main(args) == 0
  rolled_back = re.search(r"rolled back to \S+/ckpt-(\d+) \(trial 1\)",
                          caplog.text)
  assert rolled_back, caplog.text[-2000:]
  back_to = int(rolled_back.group(1))
  assert back_to < 3
  with open(f"{model_dir}/training_summary.json") as f:
    summary = json.load(f)
  # Step 3 (records 16-23) was skipped, the run went back to step `back_to`
  # and went on with records 24-...: 3 + (8 - back_to) batches read.
  assert summary["nonfinite_steps"] == 1
  assert summary["examples_seen"] == (3 + 8 - back_to) * 8
  assert _weights_finite(model_dir)


@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_a_lost_worker_makes_the_other_exit_naming_it(run, tmp_path, fault):
  from bertexp.launch.local import free_ports
  model_dir = str(tmp_path / "model")
  args = _args(run, model_dir, TRAIN_STEPS=100000, STEPS_PER_LOOP=100000) + [
      '--gin_param=bertexp.make_strategy.kind="multi_worker_mirrored"',
      "--gin_param=bertexp.make_strategy.collective_timeout_seconds=30"]
  cluster = {"worker": [f"localhost:{p}" for p in free_ports(2)]}
  logs = [open(tmp_path / f"worker{i}.log", "w+") for i in range(2)]
  workers = [forked_python.popen(
      ["-m", "bertexp.cli", *args], cwd=REPO, text=True,
      stdout=logs[i], stderr=subprocess.STDOUT, env=dict(ENV, TF_CONFIG=json.dumps(
          {"cluster": cluster, "task": {"type": "worker", "index": i}})))
             for i in range(2)]
  try:
    deadline = time.time() + 180
    while "training started" not in (tmp_path / "worker0.log").read_text():
      assert workers[0].poll() is None and time.time() < deadline
      time.sleep(0.2)
    time.sleep(2)   # into the loop
    workers[1].send_signal(getattr(signal, fault))
    faulted = time.time()
    workers[0].wait(timeout=120)
    waited = time.time() - faulted
  finally:
    for worker in workers:
      worker.kill()
      worker.wait()
  output = (tmp_path / "worker0.log").read_text()
  assert workers[0].returncode == stop_signals.WORKER_LOST_STATUS, output[-3000:]
  assert "lost contact with worker 1" in output, output[-3000:]
  # TensorFlow's heartbeats or the 30 s collective timeout; the margin is for
  # a loaded machine (measured 8-64 s while the rest of the suite ran).
  assert waited < 90, waited


def _rewrite_records(source, target, change):
  """Copies TFRecords, passing each tf.train.Example (and its index)
  through change(example, i)."""
  with tf.io.TFRecordWriter(target) as writer:
    for i, record in enumerate(tf.data.TFRecordDataset(source)):
      example = tf.train.Example.FromString(record.numpy())
      change(example, i)
      writer.write(example.SerializeToString())


def _set_int(feature, name, position, value):
  feature[name].int64_list.value[position] = value


# fault: (feature, record, position, value, the error's words)
POISONED_VALUES = {
    "token_id": ("input_word_ids", 5, 2, 999,
                 "record 5 has token id 999, outside [0, 25)"),
    "segment_id": ("input_type_ids", 7, 1, 2, "record 7 has segment id 2"),
    "label": ("label_ids", 3, 0, 2, "record 3 has label 2, outside [0, 2)"),
}


@pytest.mark.parametrize("fault", ["sequence_length", "token_id", "label",
                                   "segment_id", "garbage"])
def test_data_that_disagree_with_the_configuration_stop_before_training(
    run, tmp_path, fault, capsys):
  bad = str(tmp_path / "bad_train.tf_record")
  paths = dict(run, TRAIN_DATA_PATH=bad)
  features = lambda example: example.features.feature
  if fault == "sequence_length":   # meta data says 16; records hold 12
    _rewrite_records(run["TRAIN_DATA_PATH"], bad, lambda e, i: [
        features(e)[name].int64_list.value.__delitem__(slice(12, None))
        for name in ("input_word_ids", "input_mask", "input_type_ids")])
    expected = "records do not match"
  elif fault in POISONED_VALUES:
    name, record, position, value, expected = POISONED_VALUES[fault]
    _rewrite_records(run["TRAIN_DATA_PATH"], bad, lambda e, i: i == record and (
        _set_int(features(e), name, position, value)))
  else:
    with open(bad, "wb") as f:
      f.write(os.urandom(3000))
    expected = "not a TFRecord file, or damaged"
  model_dir = str(tmp_path / "model")
  assert cli.main(_args(paths, model_dir, TRAIN_STEPS=2)) == 2
  error = capsys.readouterr().err
  assert bad in error and expected in error, error
  assert not glob.glob(f"{model_dir}/ckpt-*")


def test_sigterm_to_one_worker_stops_every_worker_at_the_same_step(run,
                                                                   tmp_path):
  from bertexp.launch.local import free_ports
  model_dir = str(tmp_path / "model")
  args = _args(run, model_dir, TRAIN_STEPS=100000, STEPS_PER_LOOP=100000) + [
      '--gin_param=bertexp.make_strategy.kind="multi_worker_mirrored"']
  cluster = {"worker": [f"localhost:{p}" for p in free_ports(2)]}
  logs = [tmp_path / f"worker{i}.log" for i in range(2)]
  workers = [forked_python.popen(
      ["-m", "bertexp.cli", *args], cwd=REPO, text=True,
      stdout=open(logs[i], "w"), stderr=subprocess.STDOUT,
      env=dict(ENV, TF_CONFIG=json.dumps(
          {"cluster": cluster, "task": {"type": "worker", "index": i}})))
             for i in range(2)]
  try:
    deadline = time.time() + 180
    while "training started" not in logs[1].read_text():
      assert workers[1].poll() is None and time.time() < deadline
      time.sleep(0.2)
    time.sleep(2)
    workers[1].send_signal(signal.SIGTERM)   # only the second worker
    for worker in workers:
      worker.wait(timeout=120)
  finally:
    for worker in workers:
      worker.kill()
      worker.wait()
  outputs = [log.read_text() for log in logs]
  for worker, output in zip(workers, outputs):
    assert worker.returncode == stop_signals.EXIT_STATUS, output[-3000:]
  chief, other = (_checkpoint_steps(model_dir),
                  _checkpoint_steps(f"{model_dir}/workers/worker_1"))
  assert chief == other and len(chief) == 1 and chief[0] > 0, (chief, other)
  assert all(f"at step {chief[0]}" in output for output in outputs)
