"""bertexp sweep / results: grids, trial.gin, resumability, failures,
determinism, and a real 4-trial sweep of the tiny demo configuration."""
import csv
import glob
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.sweeps import grids
from bertexp.sweeps import runner
from bertexp.train import strategy as strategy_lib
import forked_python
from conftest import REPO, prepare_tiny_sst2_run

DEMO = os.path.join(REPO, "experiments/demo/movie_sentiment_cpu.gin")


def test_named_grids_and_seeds():
  a3 = grids.load_grid("paper_a3")
  assert len(a3) == 18 and {g["TRAIN_BATCH_SIZE"] for g in a3} == {16, 32}
  assert {g["LEARNING_RATE"] for g in a3} == {5e-5, 3e-5, 2e-5}
  assert {g["NUM_TRAIN_EPOCHS"] for g in a3} == {2, 3, 4}
  table1 = grids.load_grid("paper_table1")
  assert [g["LEARNING_RATE"] for g in table1] == [5e-5, 4e-5, 3e-5, 2e-5]
  assert all(g["TRAIN_BATCH_SIZE"] == 32 and g["NUM_TRAIN_EPOCHS"] == 3
             for g in table1)
  small = grids.load_grid("small_bert")
  assert len(small) == 20 and {g["NUM_TRAIN_EPOCHS"] for g in small} == {4}
  trials = runner.expand(a3, seeds=5)
  assert len(trials) == 90 and len({t.name for t in trials}) == 90
  assert trials[0].name == "bs16_lr5e-05_ep2_seed1"
  assert [t.bindings["SEED"] for t in trials[:5]] == [1, 2, 3, 4, 5]


def test_user_grid_file_with_ml_collections(tmp_path):
  path = tmp_path / "grid.py"
  path.write_text(
      "from bertexp.sweeps.grids import cross, product, zip_axes\n"
      "def grid():\n"
      "  return cross(zip_axes(LEARNING_RATE=[1e-4, 5e-5], TRAIN_BATCH_SIZE=[8, 16]),\n"
      "               product(NUM_TRAIN_EPOCHS=[1, 2]))\n")
  grid = grids.load_grid(str(path))
  assert grid == [
      {"LEARNING_RATE": 1e-4, "TRAIN_BATCH_SIZE": 8, "NUM_TRAIN_EPOCHS": 1},
      {"LEARNING_RATE": 1e-4, "TRAIN_BATCH_SIZE": 8, "NUM_TRAIN_EPOCHS": 2},
      {"LEARNING_RATE": 5e-5, "TRAIN_BATCH_SIZE": 16, "NUM_TRAIN_EPOCHS": 1},
      {"LEARNING_RATE": 5e-5, "TRAIN_BATCH_SIZE": 16, "NUM_TRAIN_EPOCHS": 2}]


@pytest.mark.parametrize("body,message", [
    ("return [{'learning_rate': 1e-4}]", "not a gin macro name"),
    ("return [{'SEED': 3}]", "seeds come from --seeds"),
    ("return []", "empty"),
    ("return [{'LEARNING_RATE': 1e-4}, {'LEARNING_RATE': 1e-4}]", "repeats"),
])
def test_bad_grids_are_clear_errors(tmp_path, body, message):
  path = tmp_path / "grid.py"
  path.write_text(f"def grid():\n  {body}\n")
  with pytest.raises(ValueError, match=message):
    grids.load_grid(str(path))
  with pytest.raises(ValueError, match="not one of"):
    grids.load_grid("paper_a4")


@pytest.fixture
def sweep_setup(tmp_path, tiny_vocab, one_layer_config):
  paths = prepare_tiny_sst2_run(str(tmp_path / "exp"), tiny_vocab,
                                one_layer_config)
  grid = tmp_path / "grid.py"
  grid.write_text("from bertexp.sweeps.grids import product\n"
                  "def grid():\n"
                  "  return product(LEARNING_RATE=[1e-3, 1e-4])\n")
  params = [f'--gin_param={k}="{v}"' for k, v in paths.items()
            if k != "MODEL_DIR"] + [
      "--gin_param=TRAIN_BATCH_SIZE=8", "--gin_param=EVAL_BATCH_SIZE=8",
      "--gin_param=NUM_TRAIN_EPOCHS=2", "--gin_param=STEPS_PER_LOOP=4",
      "--gin_param=bertexp.configure_numerics.precision='float32'"]
  return ["sweep", f"--gin_file={DEMO}", f"--grid={grid}", "--seeds=2",
          f"--output_dir={tmp_path}/sweep"] + params, tmp_path / "sweep"


def test_dry_run_prints_derived_steps(sweep_setup, capsys):
  args, out = sweep_setup
  assert cli.main(args + ["--dry_run"]) == 0
  text = capsys.readouterr().out
  # 64 training sentences / batch 8 = 8 steps per epoch, 2 epochs, warmup 10 %.
  assert "4 trials" in text
  assert "lr0.001_seed1: global batch 8, 16 steps (8 per evaluation), warmup 1" in text
  assert not out.exists()


def test_the_python_api_takes_typed_settings(sweep_setup, capsys):
  """run_sweep takes a SweepSettings, the flags' typed form: a dry run from
  Python plans what the command line plans; a bad count is refused when
  the settings are made."""
  args, out = sweep_setup
  flags = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args[1:5]}
  params = tuple(a.split("=", 1)[1] for a in args[5:])
  settings = runner.SweepSettings(
      grid=flags["--grid"], gin_files=(flags["--gin_file"],),
      output_dir=flags["--output_dir"], gin_params=params, seeds=2,
      dry_run=True)
  assert runner.run_sweep(settings) == []
  assert "lr0.001_seed2: global batch 8, 16 steps" in capsys.readouterr().out
  assert not out.exists()
  with pytest.raises(ValueError, match="--parallel and --seeds must be at "
                     "least 1"):
    runner.SweepSettings(grid="g", gin_files=("a.gin",), output_dir="o",
                         parallel=0)


def _checkpoint_values(model_dir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith("model/") and "OPTIMIZER_SLOT" not in name}


def test_sweep_resumes_writes_table_and_plot_and_trials_rerun_alone(
    sweep_setup, capsys):
  args, out = sweep_setup
  # Interrupted after two trials ...
  assert cli.main(args + ["--max_trials=2"]) == 0
  first = sorted(p.name for p in out.iterdir() if (p / "trial_result.json").exists())
  assert first == ["lr0.001_seed1", "lr0.001_seed2"]
  stamp = (out / first[0] / "training_summary.json").stat().st_mtime
  assert "not run" in (out / "results.md").read_text()
  capsys.readouterr()
  # ... the rerun runs only the rest.
  assert cli.main(args) == 0
  printed = capsys.readouterr().out
  assert "[skip] lr0.001_seed1" in printed and "[done] lr0.0001_seed2" in printed
  assert (out / first[0] / "training_summary.json").stat().st_mtime == stamp

  with open(out / "results.csv") as f:
    rows = list(csv.DictReader(f))
  assert [r["trial"] for r in rows] == ["lr0.001_seed1", "lr0.001_seed2",
                                        "lr0.0001_seed1", "lr0.0001_seed2"]
  assert all(r["status"] == "done" and 0 <= float(r["accuracy"]) <= 1 for r in rows)
  assert {r["total_training_steps"] for r in rows} == {"16"}
  table = (out / "results.md").read_text()
  assert "LEARNING_RATE=0.001 | " in table and "dev selection" in table
  assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  summary = json.loads((out / "lr0.001_seed1" / "training_summary.json").read_text())
  record = summary["provenance"]
  assert record["seed"] == 1 and record["deterministic"] is True
  assert record["precision"] == "float32"
  # This process imported bertexp before TensorFlow, as the trials do.
  assert record["onednn"] is strategy_lib.onednn_enabled() is not None
  assert record["init_checkpoint"]["sha256"] and record["vocab_file"]["sha256"]
  assert len(record["data_files"]) == 4 and record["versions"]["tensorflow"]
  for name in ("config.gin", "operative_config.gin", "trial.gin"):
    assert (out / "lr0.001_seed1" / name).exists()
  # Different seeds really differ (the comparison below can fail).
  seed2 = json.loads((out / "lr0.001_seed2" / "training_summary.json").read_text())
  assert summary["train_loss"] != seed2["train_loss"]

  # trial.gin alone, into another folder: the same weights and metrics, bit for bit.
  rerun = out.parent / "rerun"
  assert cli.main(["train", f"--gin_file={out}/lr0.001_seed1/trial.gin",
                   f'--gin_param=MODEL_DIR="{rerun}"']) == 0
  again = json.loads((rerun / "training_summary.json").read_text())
  assert again["eval_metrics"] == summary["eval_metrics"]
  assert again["train_loss"] == summary["train_loss"]
  theirs, ours = _checkpoint_values(out / "lr0.001_seed1"), _checkpoint_values(rerun)
  assert theirs.keys() == ours.keys() and len(ours) > 10
  for name in ours:
    np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)

  # `bertexp results` rebuilds the same table from disk.
  (out / "results.md").unlink()
  assert cli.main(["results", str(out)]) == 0
  assert (out / "results.md").read_text() == table


def test_failed_trial_is_recorded_and_the_sweep_goes_on_in_parallel(
    sweep_setup, tmp_path):
  args, out = sweep_setup
  grid = tmp_path / "bad_grid.py"
  grid.write_text("def grid():\n"
                  "  return [{'TRAIN_BATCH_SIZE': 1000}, {'TRAIN_BATCH_SIZE': 32}]\n")
  args = [a if not a.startswith("--grid=") else f"--grid={grid}" for a in args]
  args = [a if a != "--seeds=2" else "--seeds=1" for a in args]
  args = [a for a in args if "TRAIN_BATCH_SIZE" not in a] + ["--parallel=2"]
  assert cli.main(args) == 0
  bad = json.loads((out / "bs1000_seed1" / "trial_result.json").read_text())
  assert bad["status"] == "failed" and "smaller than one batch" in bad["error"]
  good = json.loads((out / "bs32_seed1" / "trial_result.json").read_text())
  assert good["status"] == "done"
  assert "failed: bertexp: error:" in (out / "results.md").read_text()
  # Two trials ran at once, each told to use its share of the cores.
  threads = max(1, (os.cpu_count() or 1) // 2)
  assert f"bertexp.experiment.cpu_threads = {threads}" in (
      out / "bs32_seed1" / "trial.gin").read_text()
  summary = json.loads((out / "bs32_seed1" / "training_summary.json").read_text())
  assert summary["provenance"]["cpu_threads"] == threads


def test_dry_run_lists_trials_before_the_model_and_data_exist(sweep_setup,
                                                             capsys):
  """A paper grid planned before the pretrained model's bert_config.json is
  downloaded lists every trial with its schedule (the memory plan says why
  it is missing); without the data's meta data, the trials and bindings."""
  args, out = sweep_setup
  missing = [a for a in args if "BERT_CONFIG_FILE" not in a] + [
      '--gin_param=BERT_CONFIG_FILE="/nowhere/bert_config.json"']
  assert cli.main(missing + ["--dry_run"]) == 0
  text = capsys.readouterr().out
  assert "lr0.001_seed1: global batch 8, 16 steps (8 per evaluation)" in text
  assert "memory plan: unavailable" in text and "/nowhere" in text
  no_data = [a for a in missing if "INPUT_META_DATA_PATH" not in a] + [
      '--gin_param=INPUT_META_DATA_PATH="/nowhere/meta_data"']
  assert cli.main(no_data + ["--dry_run"]) == 0
  text = capsys.readouterr().out
  assert text.count("no schedule yet") == 4 and "'LEARNING_RATE': 0.001" in text
  assert not out.exists()


def _sweep_process(args, log):
  return forked_python.popen(["-m", "bertexp.cli", *args], cwd=REPO,
                             stdout=log, stderr=subprocess.STDOUT)


def _study(out, storage=None, name="sweep"):
  import optuna
  return optuna.load_study(study_name=name,
                           storage=storage or f"sqlite:///{out}/study.db")


def _pid_running(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  return True


@pytest.mark.parametrize("stop", ["SIGKILL", "SIGINT"])
def test_a_stopped_sweep_workers_trial_resumes_from_its_checkpoint_in_another(
    sweep_setup, tmp_path, stop):
  """Two `bertexp sweep` processes of one study (the default SQLite file):
  the first is stopped mid-trial — SIGKILL (its trial process dies with it;
  the second takes the trial as lost when its heartbeat stops) or SIGINT
  (Ctrl-C: its trial checkpoints and goes back to the queue, the process
  exits 130); the second runs the other trial and resumes the first's from
  its last checkpoint: every trial done once."""
  STEPS = 400     # ~3 s of training: the stop lands in it
  args, out = sweep_setup
  # Evaluations and checkpoints every 40 steps, not every 8-step epoch.
  args = [a for a in args if a != "--seeds=2"] + [
      "--seeds=1", "--heartbeat_seconds=1", f"--gin_param=TRAIN_STEPS={STEPS}",
      "--gin_param=STEPS_PER_LOOP=8", "--gin_param=EVAL_INTERVAL_STEPS=40"]
  with open(tmp_path / "first.log", "w+") as log:
    first = _sweep_process(args, log)
    try:
      deadline = time.time() + 300
      while not glob.glob(f"{out}/*/ckpt-*.index"):
        assert first.poll() is None and time.time() < deadline
        time.sleep(0.02)
    finally:
      first.send_signal(getattr(signal, stop))
      code = first.wait(timeout=120)
  assert code == (-signal.SIGKILL if stop == "SIGKILL" else 130)
  lost = os.path.basename(os.path.dirname(glob.glob(f"{out}/*/ckpt-*.index")[0]))
  lock = out / lost / "writer.lock"    # released by a trial stopped cleanly
  holder = json.loads(lock.read_text())["pid"] if lock.exists() else None
  deadline = time.time() + 30
  while holder and _pid_running(holder):     # died with its sweep process
    assert time.time() < deadline, "the trial outlived its sweep worker"
    time.sleep(0.1)
  killed_at = max(int(p.split("ckpt-")[1].split(".")[0])
                  for p in glob.glob(f"{out}/{lost}/ckpt-*.index"))
  assert killed_at < STEPS
  with open(tmp_path / "second.log", "w+") as log:
    second = _sweep_process(args, log)
    assert second.wait(timeout=600) == 0, (tmp_path / "second.log").read_text()
  printed = (tmp_path / "second.log").read_text()
  assert "[done] lr0.001_seed1" in printed and "[done] lr0.0001_seed1" in printed
  resumed = (out / lost / "log.txt").read_text()
  assert f"resuming from {out}/{lost}/ckpt-" in resumed
  for name in ("lr0.001_seed1", "lr0.0001_seed1"):
    summary = json.loads((out / name / "training_summary.json").read_text())
    assert summary["total_training_steps"] == STEPS
  other = ({"lr0.001_seed1", "lr0.0001_seed1"} - {lost}).pop()
  states = sorted((t.user_attrs["folder"], t.state.name)
                  for t in _study(out).trials)
  assert states == sorted([(lost, "FAIL"), (lost, "COMPLETE"),
                           (other, "COMPLETE")])


def test_median_pruning_stops_trials_that_trail_at_their_first_evaluation(
    sweep_setup, tmp_path, capsys):
  """Selected on the eval loss (best_mode min: the study minimises): two
  trials at a small learning rate (16 steps), then two at 5.0 whose loss
  jumps (2,000 steps if let run) — the median pruner stops each at its
  first evaluation, which trails the median of the trials before; pruned
  trials stay pruned when the sweep is run again."""
  args, out = sweep_setup
  grid = tmp_path / "grid.py"
  grid.write_text(
      "def grid():\n"
      "  return [{'LEARNING_RATE': 0.0001, 'TRAIN_STEPS': 16},\n"
      "          {'LEARNING_RATE': 5.0, 'TRAIN_STEPS': 2000}]\n")
  args = [a if not a.startswith("--grid=") else f"--grid={grid}"
          for a in args] + [
      "--prune=median", "--gin_param=STEPS_PER_LOOP=8",
      '--gin_param=bertexp.CheckpointSettings.best_metric="loss"',
      '--gin_param=bertexp.CheckpointSettings.best_mode="min"']
  assert cli.main(args) == 0
  printed = capsys.readouterr().out
  for seed in (1, 2):
    assert f"[done] lr0.0001_train_steps16_seed{seed}" in printed
    name = f"lr5_train_steps2000_seed{seed}"
    assert f"[pruned] {name} at step 8" in printed
    result = json.loads((out / name / "trial_result.json").read_text())
    assert result["status"] == "pruned" and result["pruned_at_step"] == 8
    record = json.loads((out / name / "early_stopping.json").read_text())
    assert record["stopped_early_at_step"] == 8
    steps = [int(p.split("ckpt-")[1].split(".")[0])
             for p in glob.glob(f"{out}/{name}/ckpt-*.index")]
    assert max(steps) < 2000
  study = _study(out)
  assert study.direction.name == "MINIMIZE"
  assert sorted(t.state.name for t in study.trials) == [
      "COMPLETE", "COMPLETE", "PRUNED", "PRUNED"]
  assert "| pruned |" in (out / "results.md").read_text()
  assert cli.main(args) == 0           # nothing left to run
  assert capsys.readouterr().out.count("finished earlier") == 4
  assert len(_study(out).trials) == 4


def test_a_tpe_search_on_postgresql_runs_n_trials_two_at_a_time(
    sweep_setup, tmp_path, postgres):
  """--storage: the study on a PostgreSQL server; `bertexp results` lists
  the search's trials from their folders."""
  args, out = sweep_setup
  space = tmp_path / "space.json"
  space.write_text(json.dumps(
      {"LEARNING_RATE": {"low": 1e-4, "high": 1e-2, "log": True}}))
  args = [a for a in args if not a.startswith(("--grid=", "--seeds="))] + [
      "--search=tpe", f"--search_space={space}", "--n_trials=2", "--parallel=2",
      f"--storage={postgres}", "--study_name=tpe"]
  assert cli.main(args) == 0
  assert not (out / "study.db").exists()
  with open(out / "results.csv") as f:
    rows = list(csv.DictReader(f))
  assert [r["trial"][:5] for r in rows] == ["t000_", "t001_"]
  assert all(r["status"] == "done" for r in rows)
  study = _study(out, postgres, "tpe")
  assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
  for trial, row in zip(study.trials, rows):
    assert trial.user_attrs["folder"] == row["trial"]
    assert float(row["LEARNING_RATE"]) == trial.params["LEARNING_RATE"]
    assert trial.value == float(row["accuracy"])
    assert 1e-4 <= trial.params["LEARNING_RATE"] <= 1e-2
