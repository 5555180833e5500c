"""`bertexp sweep`: one trial per (grid binding set, seed) or per point of a
TPE search, each a complete trial.gin run in its own process, pulled from an
Optuna study (bertexp.sweeps.study) that any number of `bertexp sweep`
processes share; resumable; results table and plot.

    OUTPUT_DIR/sweep.json            the sweep's definition (trials, base files)
    OUTPUT_DIR/study.db              the study (SQLite; unless --storage)
    OUTPUT_DIR/<trial>/              see bertexp.sweeps.worker
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
from typing import Optional, Tuple

import gin

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
    max_trials: run at most this many trials in this process (None: until
      the study is done).
    dry_run: print the trials and their schedules only.
    storage: the study's database URL (None: OUTPUT_DIR/study.db, SQLite).
    study_name: the study's name in it (None: OUTPUT_DIR's folder name).
    search_space: a JSON search space file: a TPE search of n_trials
      trials instead of a grid.
    n_trials: the search's trials, over all workers.
    prune: None, "median" or "hyperband": stop trials whose evaluations
      trail the others'.
    heartbeat_seconds: how often a running trial's heartbeat is recorded; a
      trial silent for 4x as long is taken as lost and queued again.
  Raises:
    ValueError: parallel or seeds below 1, or a search without its count
      or with a grid.
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
  storage: Optional[str] = None
  study_name: Optional[str] = None
  search_space: Optional[str] = None
  n_trials: Optional[int] = None
  prune: Optional[str] = None
  heartbeat_seconds: int = 30

  def __post_init__(self):
    if self.parallel < 1 or self.seeds < 1:
      raise ValueError("--parallel and --seeds must be at least 1")
    if self.heartbeat_seconds < 1:
      raise ValueError("--heartbeat_seconds must be at least 1")
    if self.prune not in (None, "median", "hyperband"):
      raise ValueError(f"--prune={self.prune}: expected median or hyperband")
    if self.search_space:
      if self.grid or self.folds or self.seeds != 1:
        raise ValueError("--search_space is a search: give it no --grid, "
                         "--folds or --seeds (the seed is --first_seed)")
      if not self.n_trials or self.n_trials < 1:
        raise ValueError("--search_space needs --n_trials (at least 1)")
    elif not self.grid:
      raise ValueError("give --grid (a grid) or --search_space and "
                       "--n_trials (a TPE search)")

  @classmethod
  def from_flags(cls, args):
    """The settings of `bertexp sweep`'s parsed flags."""
    if (args.search == "tpe") != bool(args.search_space):
      raise ValueError("--search=tpe and --search_space=FILE go together")
    return cls(grid=args.grid, gin_files=tuple(args.gin_file),
               output_dir=args.output_dir,
               gin_params=tuple(args.gin_param or ()), seeds=args.seeds,
               first_seed=args.first_seed, folds=args.folds,
               parallel=args.parallel, max_trials=args.max_trials,
               dry_run=args.dry_run, storage=args.storage,
               study_name=args.study_name, search_space=args.search_space,
               n_trials=args.n_trials, prune=args.prune,
               heartbeat_seconds=args.heartbeat_seconds)


def _definition(sweep, trials):
  return {"gin_files": list(sweep.gin_files),
          "gin_params": list(sweep.gin_params),
          "grid": sweep.grid, "seeds": sweep.seeds,
          "first_seed": sweep.first_seed, "folds": sweep.folds,
          "search_space": sweep.search_space, "n_trials": sweep.n_trials,
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


def _print_plan(sweep, trials):
  print(f"{len(trials)} trials ({sweep.grid} x {sweep.seeds} seeds):")
  for row in plan(trials, list(sweep.gin_files), list(sweep.gin_params),
                  sweep.output_dir):
    if "unavailable" in row:
      print(f"  {row['trial']}: {row['bindings']} (no schedule yet: "
            f"{row['unavailable']})", flush=True)
      continue
    print(f"  {row['trial']}: global batch {row['global_batch_size']}, "
          f"{row['total_steps']} steps ({row['eval_interval_steps']} per "
          f"evaluation), warmup {row['warmup_steps']}", flush=True)


def _direction(gin_files, gin_params, bindings, output_dir):
  """"maximize" or "minimize": the experiment's best_mode ("max" unless
  bound otherwise), which the study optimises the selection metric by
  (read with one trial's `bindings`)."""
  gin_setup.parse_gin(gin_files, list(gin_params) + [
      f"{k}={_gin_literal(v)}" for k, v in bindings.items()] + [
          f"MODEL_DIR={_gin_literal(output_dir)}"])
  mode = "max"
  for name in ("bertexp.CheckpointSettings.best_mode",
               "bertexp.experiment.best_mode"):
    try:
      mode = gin.query_parameter(name)
    except ValueError:          # not bound
      continue
  gin.clear_config()
  return {"max": "maximize", "min": "minimize"}[mode]


def _open_study(sweep, trials):
  """The sweep's SweepStudy: created (and its grid queued) by the first
  worker, joined by the others."""
  from bertexp.sweeps import study as study_lib
  space = (study_lib.load_search_space(sweep.search_space)
           if sweep.search_space else None)
  example = trials[0].bindings if trials else study_lib.example_point(space)
  options = study_lib.StudyOptions(
      storage=sweep.storage or study_lib.default_storage(sweep.output_dir),
      study_name=sweep.study_name or os.path.basename(
          os.path.abspath(sweep.output_dir)),
      direction=_direction(sweep.gin_files, sweep.gin_params, example,
                           sweep.output_dir),
      pruner=sweep.prune, heartbeat_seconds=sweep.heartbeat_seconds,
      seed=sweep.first_seed)
  if sweep.search_space:
    return study_lib.SweepStudy(
        options, search_space=space,
        n_trials=sweep.n_trials, fixed={"SEED": sweep.first_seed},
        namer=trial_name)
  return study_lib.SweepStudy(options, grid=[(t.name, t.bindings)
                                             for t in trials])


def _report_finished(study):
  from optuna.trial import TrialState
  for frozen in study.trials(states=(TrialState.COMPLETE,
                                     TrialState.PRUNED)):
    print(f"[skip] {frozen.user_attrs['folder']}: finished earlier",
          flush=True)


def run_sweep(sweep: SweepSettings):
  """Plans (dry_run) or runs the sweep's trials: this process's share of
  them, pulled from the study other `bertexp sweep` processes of the same
  sweep (same study) pull from too.

  Args:
    sweep: the SweepSettings.
  Returns:
    One result per trial this process ran ([] for a dry run).
  Raises:
    ValueError: output_dir or the study holds another sweep, or a bad grid
      or search space.
    KeyboardInterrupt: Ctrl-C or SIGTERM (this process's running trials
      are stopped at a checkpoint and queued again).
  """
  trials = ([] if sweep.search_space else expand(
      grids.load_grid(sweep.grid), sweep.seeds, sweep.first_seed, sweep.folds))
  if sweep.dry_run and sweep.search_space:
    from bertexp.sweeps import study as study_lib
    space = study_lib.load_search_space(sweep.search_space)
    print(f"a TPE search of {sweep.n_trials} trials over:", flush=True)
    for name, distribution in space.items():
      print(f"  {name}: {distribution}", flush=True)
    return []
  if sweep.dry_run:
    _print_plan(sweep, trials)
    return []
  os.makedirs(sweep.output_dir, exist_ok=True)
  definition = _definition(sweep, trials)
  sweep_json = os.path.join(sweep.output_dir, "sweep.json")
  _check_same_sweep(sweep_json, definition)
  fileio.write_json(sweep_json, definition)
  cpu_threads = (max(1, (os.cpu_count() or 1) // sweep.parallel)
                 if sweep.parallel > 1 else None)
  study = _open_study(sweep, trials)
  _report_finished(study)

  def write_trial_gin(claim, folder):
    path = os.path.join(folder, "trial.gin")
    if not os.path.exists(path):         # a rerun keeps the trial's own file
      fileio.write_text(path, trial_gin_text(
          Trial(claim.name, claim.bindings), list(sweep.gin_files),
          list(sweep.gin_params), folder, cpu_threads))

  from bertexp.sweeps import worker as worker_lib
  worker = worker_lib.Worker(
      study, sweep.output_dir, write_trial_gin,
      budget=None if sweep.max_trials is None else [sweep.max_trials])
  logging.info("sweep: %d trials in the study, %d in parallel here",
               len(study.trials()), sweep.parallel)
  pool = concurrent.futures.ThreadPoolExecutor(sweep.parallel)
  # SIGINT too: a process started with SIGINT ignored (a background job, a
  # test runner's worker) still stops its trials on Ctrl-C's signal.
  handlers = {s: signal.signal(s, _raise_interrupt)
              for s in (signal.SIGTERM, signal.SIGINT)}
  try:
    futures = [pool.submit(worker.work) for _ in range(sweep.parallel)]
    results = [r for f in futures for r in f.result()]
  except BaseException:
    worker.stop()        # its trials checkpoint and are queued again
    raise
  finally:
    pool.shutdown(wait=True, cancel_futures=True)
    for number, handler in handlers.items():
      signal.signal(number, handler)
  from bertexp.sweeps import results as sweep_results
  sweep_results.write(sweep.output_dir)
  return results
