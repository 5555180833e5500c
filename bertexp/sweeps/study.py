"""The trials of `bertexp sweep` as an Optuna study in a database: every
`bertexp sweep` process given the same study, on one machine or many, pulls
the next trial from it until the study is done.

    storage    sqlite:///OUTPUT_DIR/study.db by default (one machine, nothing
               to start); any URL of Optuna's RDBStorage (postgresql://...,
               mysql://...) when several machines share the study
    grid       each trial of grid x folds x seeds is put in the study's queue
               once, by the worker that creates the study; a queued trial is
               claimed by exactly one worker: the database serialises the
               claim (a row lock; on SQLite also a lock file beside the
               database). Optuna's GridSampler is not used for this: with
               concurrent workers it may run a grid point twice.
    search     new trials asked from Optuna's TPE sampler over a search
               space until n_trials were made
    heartbeat  a worker records each running trial's heartbeat; a trial
               whose heartbeat stops (its worker killed, its machine lost) is
               failed by the next worker that looks and queued again under
               its folder name, so it resumes from its last checkpoint
               where the folder is shared
    pruning    a running trial's evaluations are reported to the study; a
               trial the pruner stops ends as PRUNED

Each trial's folder name is its user attribute "folder"; the trial's gin
bindings are its "bindings".
"""
import contextlib
import dataclasses
import fcntl
import json
import os
import threading
import time
import warnings
from typing import Optional

import numpy as np
import optuna
import sqlalchemy
from optuna.trial import TrialState

from bertexp.sweeps import grids

# What a retried or re-queued copy of a trial carries (Optuna's own key for
# the trial it retries), so that it is not counted as a new trial.
RETRY_OF = "failed_trial"
FOLDER, BINDINGS = "folder", "bindings"
_READY = "queued_trials"        # set once the creating worker queued the grid


@contextlib.contextmanager
def _heartbeat_notices_off():
  """Optuna's heartbeats without its notices on every call: "experimental"
  (since 2.8, 2021) and "supposed to be used with Study.optimize" (a sweep
  runs each trial in its own process, so it asks and tells)."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage")
    yield


def default_storage(output_dir):
  """The study's database when --storage is not given: a SQLite file in the
  sweep's folder."""
  return "sqlite:///" + os.path.abspath(os.path.join(output_dir, "study.db"))


def _sqlite_path(url):
  return url[len("sqlite:///"):] if url.startswith("sqlite:///") else None


@dataclasses.dataclass
class Claim:
  """A trial a worker claimed: the Optuna trial, its folder name and gin
  bindings."""
  trial: optuna.trial.Trial
  trial_id: int
  name: str
  bindings: dict


@dataclasses.dataclass(frozen=True)
class StudyOptions:
  """How the study is stored and run.

  Attributes:
    storage: the database URL (default_storage(output_dir) when None).
    study_name: the study's name in the database.
    direction: "maximize" or "minimize" the selection metric.
    pruner: None, "median" or "hyperband".
    heartbeat_seconds: how often a running trial's heartbeat is recorded;
      a trial silent for 4x as long is failed and queued again.
    seed: the TPE sampler's seed (with the trial's number: TrialSeededTPE).
  """
  storage: str
  study_name: str
  direction: str = "maximize"
  pruner: Optional[str] = None
  heartbeat_seconds: int = 30
  seed: Optional[int] = None


def _storage(options, attempts=3):
  """Optuna's RDBStorage of the study, with heartbeats. Workers starting
  together may race to create its tables (a server database reports the
  loser's CREATE TABLE as an error): such a failure is retried."""
  sqlite = _sqlite_path(options.storage)
  engine_kwargs = {"connect_args": {"timeout": 120}} if sqlite else {}
  for attempt in range(attempts):
    try:
      with _heartbeat_notices_off():
        return optuna.storages.RDBStorage(
            options.storage, engine_kwargs=engine_kwargs,
            heartbeat_interval=options.heartbeat_seconds,
            grace_period=4 * options.heartbeat_seconds,
            heartbeat_stale_trial_callback=(
                optuna.storages.RetryHeartbeatStaleTrialCallback()))
    except sqlalchemy.exc.SQLAlchemyError:
      if attempt == attempts - 1:
        raise
      time.sleep(1.0 + attempt)


class TrialSeededTPE(optuna.samplers.BaseSampler):
  """Optuna's TPE sampler whose random draws for trial n come from (seed, n).

  One TPESampler(seed) per process would make every process of a sweep
  draw the same sequence: two `bertexp sweep` processes on one study would
  ask for the same points. Trial numbers are unique in the study (the
  database gives them), so processes asking at once draw different points,
  while a rerun with the same seed draws what the first run drew for each
  trial number (given the same finished trials: TPE models them).

  Args:
    seed: the sweep's seed, or None for fresh randomness.
  """

  def __init__(self, seed=None):
    self._seed = seed
    self._samplers = {}        # trial number -> its TPESampler

  def _for(self, trial):
    if trial.number not in self._samplers:
      seed = None if self._seed is None else int(np.random.SeedSequence(
          [int(self._seed), trial.number]).generate_state(1)[0])
      self._samplers[trial.number] = optuna.samplers.TPESampler(seed=seed)
    return self._samplers[trial.number]

  def infer_relative_search_space(self, study, trial):
    return self._for(trial).infer_relative_search_space(study, trial)

  def sample_relative(self, study, trial, search_space):
    return self._for(trial).sample_relative(study, trial, search_space)

  def sample_independent(self, study, trial, param_name, param_distribution):
    return self._for(trial).sample_independent(study, trial, param_name,
                                               param_distribution)

  def before_trial(self, study, trial):
    self._for(trial).before_trial(study, trial)

  def after_trial(self, study, trial, state, values):
    self._for(trial).after_trial(study, trial, state, values)
    self._samplers.pop(trial.number, None)

  def reseed_rng(self):
    for sampler in self._samplers.values():
      sampler.reseed_rng()


def _create_or_load(options, storage):
  """(the study, whether this call created it)."""
  kwargs = dict(storage=storage, study_name=options.study_name,
                sampler=TrialSeededTPE(options.seed),
                pruner=_pruner(options.pruner))
  try:
    return optuna.create_study(direction=options.direction, **kwargs), True
  except optuna.exceptions.DuplicatedStudyError:
    return optuna.load_study(**kwargs), False


def _pruner(name):
  if name is None:
    return optuna.pruners.NopPruner()
  if name == "median":
    return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
  if name == "hyperband":
    return optuna.pruners.HyperbandPruner(min_resource=1)
  raise ValueError(f"--prune={name!r}: expected median or hyperband")


class SweepStudy:
  """The study a sweep's workers share.

  Args:
    options: StudyOptions.
    grid: [(folder name, bindings)] to queue when the study is created
      (None for a search).
    search_space: {macro: optuna distribution} of a search (None for a grid).
    n_trials: trials a search makes in all.
    fixed: bindings every trial of a search adds to the sampled ones (its
      seed).
    namer: bindings -> folder name of a search's trial (prefixed with the
      trial's number).
  Raises:
    ValueError: the study in the database holds another sweep's trials.
  """

  def __init__(self, options, *, grid=None, search_space=None, n_trials=None,
               fixed=None, namer=None):
    self.options = options
    self.search_space, self.n_trials = search_space, n_trials
    self.fixed, self.namer = dict(fixed or {}), namer or str
    sqlite = _sqlite_path(options.storage)
    self._lock_path = sqlite + ".lock" if sqlite else None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # bertexp prints
    with self.claim_lock():
      self.storage = _storage(options)
      self.study, created = _create_or_load(options, self.storage)
      if created:
        self._queue(grid or [])
    self._wait_until_queued(grid or [])
    self._study_id = self.storage.get_study_id_from_name(options.study_name)

  @contextlib.contextmanager
  def claim_lock(self):
    """Serialises claims between this machine's workers of a SQLite study
    (SQLite reads outside a write transaction, so two workers could both see
    a trial waiting); a server database locks the row itself."""
    if self._lock_path is None:
      yield
      return
    with open(self._lock_path, "a") as f:
      fcntl.flock(f, fcntl.LOCK_EX)
      try:
        yield
      finally:
        fcntl.flock(f, fcntl.LOCK_UN)

  def _queue(self, grid):
    for name, bindings in grid:
      self.study.enqueue_trial({}, user_attrs={FOLDER: name,
                                               BINDINGS: bindings})
    self.study.set_user_attr(_READY, [name for name, _ in grid])

  def _wait_until_queued(self, grid, timeout=120):
    """Another worker created the study: wait until it queued its trials,
    then check they are this sweep's."""
    deadline = time.time() + timeout
    while _READY not in self.study.user_attrs:
      if time.time() > deadline:
        raise ValueError(
            f"study {self.options.study_name!r} in {self.options.storage} was "
            f"created by a worker that never queued its trials; delete the "
            "study or use another --study_name")
      time.sleep(0.5)
    queued = self.study.user_attrs[_READY]
    if queued != [name for name, _ in grid]:
      raise ValueError(
          f"study {self.options.study_name!r} in {self.options.storage} holds "
          f"another sweep's trials ({len(queued)} queued, this sweep has "
          f"{len(grid)}); use another --study_name or the same arguments")

  def trials(self, states=None):
    """The study's trials (FrozenTrial), in the order they were made."""
    return self.study.get_trials(deepcopy=False, states=states)

  def _trial_id(self, number):
    return self.storage.get_trial_id_from_study_id_trial_number(
        self._study_id, number)

  def _pop_waiting(self):
    """Claims the oldest queued trial: (its id, Trial), or None."""
    for frozen in self.trials(states=(TrialState.WAITING,)):
      trial_id = self._trial_id(frozen.number)
      try:
        if self.storage.set_trial_state_values(trial_id, TrialState.RUNNING):
          return trial_id, optuna.trial.Trial(self.study, trial_id)
      except optuna.exceptions.UpdateFinishedTrialError:
        continue
    return None

  def _ask_new(self):
    """A new trial of the search, or None when n_trials were made."""
    made = [t for t in self.trials() if RETRY_OF not in t.system_attrs]
    if self.search_space is None or len(made) >= self.n_trials:
      return None
    with _heartbeat_notices_off():
      trial = self.study.ask(fixed_distributions=self.search_space)
    if FOLDER not in trial.user_attrs:
      bindings = dict(trial.params, **self.fixed)
      trial.set_user_attr(BINDINGS, bindings)
      trial.set_user_attr(FOLDER,
                          f"t{trial.number:03d}_{self.namer(bindings)}")
    return self._trial_id(trial.number), trial

  def claim(self, poll_seconds=1.0):
    """The next trial this worker runs, or None when the study is done.

    While the queue is empty but trials run elsewhere, waits: one of them
    may be lost (its heartbeat stops) and queued again.
    """
    while True:
      with _heartbeat_notices_off():
        optuna.storages.fail_stale_trials(self.study)
      with self.claim_lock():
        claimed = self._pop_waiting() or self._ask_new()
        if claimed is not None:   # a heartbeat at once: a worker lost now
          self.storage.record_heartbeat(claimed[0])     # is seen as lost
      if claimed is not None:
        trial_id, trial = claimed
        attrs = self.storage.get_trial(trial_id).user_attrs
        return Claim(trial, trial_id, attrs[FOLDER], dict(attrs[BINDINGS]))
      if not self.trials(states=(TrialState.RUNNING,)):
        return None
      time.sleep(poll_seconds)

  @contextlib.contextmanager
  def heartbeat(self, claim):
    """Records `claim`'s heartbeat every heartbeat_seconds while the block
    runs."""
    stop = threading.Event()
    trial_id = claim.trial_id

    def beat():
      while not stop.is_set():
        self.storage.record_heartbeat(trial_id)
        stop.wait(self.options.heartbeat_seconds)

    thread = threading.Thread(target=beat, daemon=True,
                              name=f"heartbeat-{claim.name}")
    thread.start()
    try:
      yield
    finally:
      stop.set()
      thread.join()

  def finish(self, claim, state, value=None):
    """Ends the claimed trial: COMPLETE with its metric value, PRUNED or
    FAIL."""
    if state == TrialState.COMPLETE and value is None:
      state = TrialState.FAIL       # finished without its selection metric
    self.study.tell(claim.trial, value if state == TrialState.COMPLETE
                    else None, state=state)

  def requeue(self, claim):
    """Fails the claimed trial and queues a copy under the same folder (a
    worker stopped by Ctrl-C: another one, or a rerun, resumes it)."""
    frozen = self.storage.get_trial(claim.trial_id)
    self.study.tell(claim.trial, state=TrialState.FAIL)
    self.study.add_trial(optuna.trial.create_trial(
        state=TrialState.WAITING, params=frozen.params,
        distributions=frozen.distributions, user_attrs=frozen.user_attrs,
        system_attrs={RETRY_OF: frozen.system_attrs.get(RETRY_OF,
                                                         frozen.number)}))


def load_search_space(path):
  """{macro: optuna distribution} from a JSON search space file:

      {"LEARNING_RATE": {"low": 1e-5, "high": 1e-4, "log": true},
       "NUM_TRAIN_EPOCHS": {"low": 2, "high": 4, "step": 1},
       "TRAIN_BATCH_SIZE": [16, 32]}

  A list is a categorical choice; low/high of integers an integer range,
  else a float range (log, step as Optuna takes them).

  Raises:
    ValueError: an unreadable file or a bad entry, naming it.
  """
  try:
    with open(path) as f:
      space = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{path}: not a JSON search space ({e})") from None
  if not isinstance(space, dict) or not space:
    raise ValueError(f"{path}: expected an object of macro: range")
  return {name: _distribution(path, name, spec) for name, spec in space.items()}


def example_point(space):
  """{macro: its lowest value or first choice} of a search space."""
  return {name: (dist.choices[0] if isinstance(
      dist, optuna.distributions.CategoricalDistribution) else dist.low)
          for name, dist in space.items()}


def _distribution(path, name, spec):
  if not grids.MACRO_NAME.match(name):
    raise ValueError(f"{path}: {name!r} is not a gin macro name (UPPER_CASE, "
                     "e.g. LEARNING_RATE)")
  if name in ("SEED", "FOLD"):
    raise ValueError(f"{path}: {name} comes from --first_seed, not the space")
  if isinstance(spec, list) and spec:
    return optuna.distributions.CategoricalDistribution(spec)
  if not (isinstance(spec, dict) and {"low", "high"} <= set(spec) and
          set(spec) <= {"low", "high", "log", "step"}):
    raise ValueError(f"{path}: {name}: expected a list of choices or "
                     "{low, high[, log][, step]}")
  low, high = spec["low"], spec["high"]
  try:
    if all(isinstance(v, int) and not isinstance(v, bool)
           for v in (low, high, spec.get("step", 1))):
      return optuna.distributions.IntDistribution(
          low, high, log=spec.get("log", False), step=spec.get("step", 1))
    return optuna.distributions.FloatDistribution(
        low, high, log=spec.get("log", False), step=spec.get("step"))
  except (ValueError, TypeError) as e:
    raise ValueError(f"{path}: {name}: {e}") from None
