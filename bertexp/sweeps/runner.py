"""`bertexp sweep`: one trial per (grid binding set, seed), each a complete
trial.gin run in its own process; resumable; results table and plot.

    OUTPUT_DIR/sweep.json            the sweep's definition (trials, base files)
    OUTPUT_DIR/<trial>/trial.gin     reruns the trial alone
    OUTPUT_DIR/<trial>/trial_result.json   status (done / failed + error)
    OUTPUT_DIR/<trial>/log.txt       the trial process's output
    OUTPUT_DIR/results.{csv,md,png}  see bertexp.sweeps.results
    OUTPUT_DIR/out_of_fold/          with --folds: each configuration and
                                     seed's predictions for every training row
"""
import concurrent.futures
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from typing import Optional, Tuple

from bertexp import gin_setup
from bertexp.sweeps import grids
from bertexp.util import fileio

_ABBREVIATIONS = {"TRAIN_BATCH_SIZE": "bs", "LEARNING_RATE": "lr",
                  "NUM_TRAIN_EPOCHS": "ep", "FOLD": "fold", "SEED": "seed"}
# Bindings that repeat a configuration rather than define one.
REPEATS = ("SEED", "FOLD")


@dataclasses.dataclass
class Trial:
  """One trial of a sweep: its folder name and its gin bindings."""
  name: str
  bindings: dict           # grid bindings + SEED

  @property
  def config(self):
    """The bindings without seed and fold: trials of one configuration."""
    return {k: v for k, v in self.bindings.items() if k not in REPEATS}


def _value_text(value):
  return f"{value:g}" if isinstance(value, float) else str(value)


def trial_name(bindings):
  """e.g. bs32_lr3e-05_ep3_seed1: known macros first, others sorted, fold and
  seed last."""
  known = [k for k in _ABBREVIATIONS if k in bindings and k not in REPEATS]
  order = known + sorted(set(bindings) - set(_ABBREVIATIONS)) + [
      k for k in ("FOLD", "SEED") if k in bindings]
  parts = [f"{_ABBREVIATIONS.get(k, k.lower())}{_value_text(bindings[k])}"
           for k in order]
  name = "_".join(parts)
  return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)


def expand(grid, seeds, first_seed=1, folds=None):
  """grid x folds x seeds -> trials, seed fastest; names are unique and
  stable. folds: k-fold cross-validation, FOLD = 0 .. folds - 1."""
  trials = []
  for bindings in grid:
    for fold in range(folds) if folds else [None]:
      for seed in range(first_seed, first_seed + seeds):
        full = dict(bindings, SEED=seed)
        if fold is not None:
          full = dict(bindings, FOLD=fold, SEED=seed)
        trials.append(Trial(trial_name(full), full))
  names = [t.name for t in trials]
  if len(set(names)) != len(names):
    raise ValueError("two trials share a folder name; make grid values "
                     "distinguishable")
  return trials


def _gin_literal(value):
  return json.dumps(value) if isinstance(value, str) else repr(value)


def _include_path(gin_file):
  """Its shipped name when the file is one of bertexp's experiments or
  fragments (resolved by every bertexp process's search paths), else
  absolute."""
  path = gin_setup.resolve_gin_file(gin_file)
  return gin_setup.shipped_name(path) or os.path.abspath(path)


def trial_gin_text(trial, gin_files, gin_params, model_dir, cpu_threads):
  """The trial.gin that reruns this trial alone."""
  lines = [f"# Trial {trial.name}: rerun alone with",
           f"#   bertexp train --gin_file={model_dir}/trial.gin "
           "--gin_param='MODEL_DIR=\"another/folder\"'"]
  lines += [f"include '{_include_path(f)}'" for f in gin_files]
  lines += ["", "# The sweep's --gin_param overrides"] + list(gin_params)
  lines += ["", "# This trial"]
  lines += [f"{k} = {_gin_literal(v)}" for k, v in trial.bindings.items()]
  lines += [f"MODEL_DIR = {_gin_literal(model_dir)}",
            "bertexp.experiment.deterministic = True",
            f"bertexp.experiment.cpu_threads = {cpu_threads!r}"]
  return "\n".join(lines) + "\n"


def _status(folder):
  path = os.path.join(folder, "trial_result.json")
  return fileio.read_json(path).get("status") if os.path.exists(path) else None


def _error_excerpt(log_path, lines=15):
  with open(log_path, errors="replace") as f:
    text = f.read().splitlines()
  errors = [l for l in text if l.startswith("bertexp: error:")]
  return errors[-1] if errors else "\n".join(text[-lines:])


class _Runner:
  """Runs trial processes; terminates them all if the sweep is interrupted."""

  def __init__(self):
    self.processes, self.lock = set(), threading.Lock()
    self.stopping = False

  def run(self, trial, folder):
    log_path = os.path.join(folder, "log.txt")
    # A fold's trial also predicts its held-out rows (out-of-fold).
    mode = "train_eval_predict" if "FOLD" in trial.bindings else "train_and_eval"
    command = [sys.executable, "-m", "bertexp.cli", "train",
               f"--gin_file={os.path.join(folder, 'trial.gin')}",
               f"--mode={mode}"]
    with open(log_path, "a") as log:
      process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
      with self.lock:
        self.processes.add(process)
      code = process.wait()
      with self.lock:
        self.processes.discard(process)
    status = "done" if code == 0 else (
        "interrupted" if self.stopping else "failed")
    result = {"trial": trial.name, "bindings": trial.bindings,
              "status": status, "exit_code": code}
    if status == "failed":
      result["error"] = _error_excerpt(log_path)
    fileio.write_json(os.path.join(folder, "trial_result.json"), result)
    print(f"[{result['status']}] {trial.name}"
          + (f": {result['error']}" if status == "failed" else ""), flush=True)
    return result

  def stop(self):
    self.stopping = True
    with self.lock:
      for process in self.processes:
        process.terminate()


def _raise_interrupt(signum, frame):
  raise KeyboardInterrupt(f"signal {signum}")


@dataclasses.dataclass(frozen=True)
class SweepSettings:
  """What one `bertexp sweep` runs (its command-line flags, typed).

  Attributes:
    grid: the grid file (.json, .py, or a shipped name).
    gin_files, gin_params: the experiment every trial starts from.
    output_dir: the sweep's folder (one subfolder per trial).
    seeds, first_seed: seeds per configuration, from first_seed on.
    folds: k-fold cross-validation over data prepared with --folds=K (each
      configuration x seed runs every fold), or None.
    parallel: trials at once.
    max_trials: run at most this many of the pending trials (None: all).
    dry_run: print the trials and their schedules only.
  Raises:
    ValueError: parallel or seeds below 1.
  """
  grid: str
  gin_files: Tuple[str, ...]
  output_dir: str
  gin_params: Tuple[str, ...] = ()
  seeds: int = 1
  first_seed: int = 1
  folds: Optional[int] = None
  parallel: int = 1
  max_trials: Optional[int] = None
  dry_run: bool = False

  def __post_init__(self):
    if self.parallel < 1 or self.seeds < 1:
      raise ValueError("--parallel and --seeds must be at least 1")

  @classmethod
  def from_flags(cls, args):
    """The settings of `bertexp sweep`'s parsed flags."""
    return cls(grid=args.grid, gin_files=tuple(args.gin_file),
               output_dir=args.output_dir,
               gin_params=tuple(args.gin_param or ()), seeds=args.seeds,
               first_seed=args.first_seed, folds=args.folds,
               parallel=args.parallel, max_trials=args.max_trials,
               dry_run=args.dry_run)


def _definition(sweep, trials):
  return {"gin_files": list(sweep.gin_files),
          "gin_params": list(sweep.gin_params),
          "grid": sweep.grid, "seeds": sweep.seeds,
          "first_seed": sweep.first_seed, "folds": sweep.folds,
          "trials": [{"name": t.name, "bindings": t.bindings} for t in trials]}


def _check_same_sweep(path, definition):
  if not os.path.exists(path):
    return
  old = fileio.read_json(path)
  for key in ("gin_files", "gin_params", "trials"):
    if old.get(key) != definition[key]:
      raise ValueError(
          f"{path}: this folder holds another sweep ({key} differ); use a new "
          "--output_dir or the same arguments to resume")


def plan(trials, gin_files, gin_params, output_dir):
  """The schedule of every trial (parsed in this process, nothing trained)."""
  from bertexp import experiment
  rows = []
  for trial in trials:
    params = list(gin_params) + [f"{k}={_gin_literal(v)}"
                                 for k, v in trial.bindings.items()]
    params.append(f"MODEL_DIR={_gin_literal(os.path.join(output_dir, trial.name))}")
    gin_setup.parse_gin(gin_files, params)
    try:
      rows.append(dict(experiment.experiment(mode="plan"), trial=trial.name))
    except (FileNotFoundError, ValueError) as e:   # e.g. data not prepared yet
      rows.append({"trial": trial.name, "bindings": trial.bindings,
                   "unavailable": str(e)})
  return rows


def run_sweep(sweep: SweepSettings):
  """Plans (dry_run) or runs the sweep's trials.

  Args:
    sweep: the SweepSettings.
  Returns:
    One result per trial run ([] for a dry run).
  Raises:
    ValueError: output_dir holds another sweep, or a bad grid.
    KeyboardInterrupt: Ctrl-C or SIGTERM (running trials are stopped).
  """
  trials = expand(grids.load_grid(sweep.grid), sweep.seeds, sweep.first_seed,
                  sweep.folds)
  if sweep.dry_run:
    print(f"{len(trials)} trials ({sweep.grid} x {sweep.seeds} seeds):")
    for row in plan(trials, list(sweep.gin_files), list(sweep.gin_params), sweep.output_dir):
      if "unavailable" in row:
        print(f"  {row['trial']}: {row['bindings']} (no schedule yet: "
              f"{row['unavailable']})", flush=True)
        continue
      print(f"  {row['trial']}: global batch {row['global_batch_size']}, "
            f"{row['total_steps']} steps ({row['steps_per_epoch']} per "
            f"evaluation), warmup {row['warmup_steps']}", flush=True)
    return []
  os.makedirs(sweep.output_dir, exist_ok=True)
  definition = _definition(sweep, trials)
  sweep_json = os.path.join(sweep.output_dir, "sweep.json")
  _check_same_sweep(sweep_json, definition)
  fileio.write_json(sweep_json, definition)
  cpu_threads = (max(1, (os.cpu_count() or 1) // sweep.parallel)
                 if sweep.parallel > 1 else None)
  pending = []
  for trial in trials:
    folder = os.path.join(sweep.output_dir, trial.name)
    os.makedirs(folder, exist_ok=True)
    if _status(folder) == "done":
      print(f"[skip] {trial.name}: finished earlier", flush=True)
      continue
    gin_path = os.path.join(folder, "trial.gin")
    if not os.path.exists(gin_path):     # a rerun keeps the trial's own file
      fileio.write_text(gin_path, trial_gin_text(
          trial, list(sweep.gin_files), list(sweep.gin_params), folder, cpu_threads))
    pending.append((trial, folder))
  if sweep.max_trials is not None:
    pending = pending[:sweep.max_trials]
  logging.info("sweep: %d trials, %d to run, %d in parallel", len(trials),
               len(pending), sweep.parallel)
  runner = _Runner()
  pool = concurrent.futures.ThreadPoolExecutor(sweep.parallel)
  signal.signal(signal.SIGTERM, _raise_interrupt)
  try:
    results = list(pool.map(lambda p: runner.run(*p), pending))
  except BaseException:
    runner.stop()        # a rerun restarts these trials from their checkpoints
    raise
  finally:
    pool.shutdown(wait=True, cancel_futures=True)
  from bertexp.sweeps import results as sweep_results
  sweep_results.write(sweep.output_dir)
  return results
