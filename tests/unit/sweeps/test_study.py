"""The sweep's Optuna study with real worker processes on one database
(SQLite, the default, and a PostgreSQL server started here): a queued grid runs each trial exactly once while two
workers hold trials at the same time; a worker SIGKILLed mid-trial loses
nothing (its trial is taken as lost by its heartbeat and rerun, under the
same folder, by the other); another sweep under the same study name is
refused; search spaces are read or refused with the file named."""
import json
import signal
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from bertexp.sweeps import study as study_lib

# A worker process: claims trials until the study is done; logs
# "<trial> <pid>" when it starts one; holds its first trial until
# `rendezvous` other workers hold one too (so both are seen busy at once);
# with `hang`, never finishes its first trial (a worker to kill).
WORKER = r"""
import json, os, sys, time
from optuna.trial import TrialState
from bertexp.sweeps import study as study_lib
options, names, log, rendezvous, hang = json.loads(sys.argv[1])
study = study_lib.SweepStudy(study_lib.StudyOptions(**options),
                             grid=[(n, {"N": i}) for i, n in enumerate(names)])
first = True
while True:
  claim = study.claim(poll_seconds=0.2)
  if claim is None:
    break
  with open(log, "a") as f:
    f.write(f"{claim.name} {os.getpid()}\n")
  with study.heartbeat(claim):
    while first and rendezvous and len(set(
        line.split()[1] for line in open(log))) < rendezvous:
      time.sleep(0.05)
    while hang:
      time.sleep(1)
    first = False
  study.finish(claim, TrialState.COMPLETE, float(claim.bindings["N"]))
"""
NAMES = [f"trial{i:02d}" for i in range(12)]

# A search's worker process: claims one trial of a 2-trial TPE search (seed
# 1), holds it until `rendezvous` trials are held, logs "<number> <learning
# rate>" and finishes it.
SEARCH_WORKER = r"""
import json, sys, time
from optuna.trial import TrialState
from bertexp.sweeps import study as study_lib
options, space, log, rendezvous = json.loads(sys.argv[1])
study = study_lib.SweepStudy(
    study_lib.StudyOptions(**options, seed=1),
    search_space=study_lib.load_search_space(space), n_trials=2,
    fixed={"SEED": 1})
claim = study.claim(poll_seconds=0.2)
with open(log, "a") as f:
  f.write(f"{claim.trial.number} {claim.bindings['LEARNING_RATE']!r}\n")
while len(open(log).read().splitlines()) < rendezvous:
  time.sleep(0.05)
study.finish(claim, TrialState.COMPLETE, 0.5)
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request, tmp_path):
  """A database URL: the default SQLite file, or the PostgreSQL server."""
  if request.param == "sqlite":
    return study_lib.default_storage(str(tmp_path))
  return request.getfixturevalue("postgres")


def _options(storage, tmp_path, heartbeat=30):
  """A study of its own (the server's database outlives a test)."""
  return {"storage": storage, "study_name": tmp_path.name,
          "heartbeat_seconds": heartbeat}


def _start(options, log, rendezvous=0, hang=False):
  return subprocess.Popen(
      [sys.executable, "-c", WORKER,
       json.dumps([options, NAMES, str(log), rendezvous, hang])],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _search(options, space, log, rendezvous):
  """A search worker process (SEARCH_WORKER)."""
  return subprocess.Popen(
      [sys.executable, "-c", SEARCH_WORKER,
       json.dumps([options, str(space), str(log), rendezvous])],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process, timeout=120):
  try:
    out, _ = process.communicate(timeout=timeout)
  finally:
    process.kill()                   # none left behind by a failing test
  assert process.returncode == 0, out[-3000:]


def _lines(log):
  return [line.split() for line in open(log).read().splitlines()]


def _completed(options):
  study = optuna.load_study(study_name=options["study_name"],
                            storage=options["storage"])
  done = study.get_trials(states=(TrialState.COMPLETE,))
  return study, sorted(t.user_attrs["folder"] for t in done)


def test_two_workers_run_each_queued_trial_exactly_once_both_busy(storage,
                                                                 tmp_path):
  options, log = _options(storage, tmp_path), tmp_path / "log.txt"
  workers = [_start(options, log, rendezvous=2) for _ in range(2)]
  for worker in workers:
    _finish(worker)
  started = _lines(log)
  assert sorted(name for name, _ in started) == NAMES     # each exactly once
  assert {pid for _, pid in started} == {str(w.pid) for w in workers}
  study, done = _completed(options)
  assert done == NAMES and len(study.trials) == 12
  assert sorted(t.value for t in study.trials) == list(range(12))


def test_a_killed_workers_trial_is_rerun_under_its_folder_by_the_other(
    storage, tmp_path):
  options = _options(storage, tmp_path, heartbeat=1)
  log = tmp_path / "log.txt"
  doomed = _start(options, log, hang=True)
  try:
    deadline = time.time() + 60
    while not (log.exists() and log.read_text()):
      assert time.time() < deadline and doomed.poll() is None
      time.sleep(0.1)
  finally:
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
  lost = _lines(log)[0][0]
  survivor = _start(options, log)
  _finish(survivor)
  started = _lines(log)
  assert [n for n, pid in started if pid == str(doomed.pid)] == [lost]
  rerun = sorted(n for n, pid in started if pid == str(survivor.pid))
  assert rerun == NAMES                # the lost trial again, all the others
  study, done = _completed(options)
  assert done == NAMES                 # nothing lost, nothing twice
  failed = study.get_trials(states=(TrialState.FAIL,))
  assert [t.user_attrs["folder"] for t in failed] == [lost]
  retry = [t for t in study.trials if t.system_attrs.get(
      study_lib.RETRY_OF) == failed[0].number]
  assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE


def test_another_sweep_under_the_same_study_name_is_refused(storage, tmp_path):
  options = study_lib.StudyOptions(**_options(storage, tmp_path))
  study_lib.SweepStudy(options, grid=[("a", {}), ("b", {})])
  study_lib.SweepStudy(options, grid=[("a", {}), ("b", {})])      # rejoins
  with pytest.raises(ValueError, match="holds another sweep's trials"):
    study_lib.SweepStudy(options, grid=[("a", {}), ("c", {})])


def test_search_space_file(tmp_path):
  path = tmp_path / "space.json"
  path.write_text(json.dumps({
      "LEARNING_RATE": {"low": 1e-5, "high": 1e-3, "log": True},
      "NUM_TRAIN_EPOCHS": {"low": 1, "high": 3},
      "TRAIN_BATCH_SIZE": [8, 16]}))
  space = study_lib.load_search_space(str(path))
  assert space["LEARNING_RATE"] == optuna.distributions.FloatDistribution(
      1e-5, 1e-3, log=True)
  assert space["NUM_TRAIN_EPOCHS"] == optuna.distributions.IntDistribution(1, 3)
  assert space["TRAIN_BATCH_SIZE"] == (
      optuna.distributions.CategoricalDistribution([8, 16]))


@pytest.mark.parametrize("content,message", [
    ("{", "not a JSON search space"),
    ("[]", "expected an object"),
    ('{"lr": [1, 2]}', "not a gin macro name"),
    ('{"SEED": [1, 2]}', "comes from --first_seed"),
    ('{"LEARNING_RATE": {"low": 1}}', "expected a list of choices"),
    ('{"LEARNING_RATE": {"low": 0, "high": 1, "log": true}}', "LEARNING_RATE"),
])
def test_bad_search_space_names_the_file_and_entry(tmp_path, content, message):
  path = tmp_path / "space.json"
  path.write_text(content)
  with pytest.raises(ValueError, match=message) as error:
    study_lib.load_search_space(str(path))
  assert str(path) in str(error.value)


def test_a_search_asks_tpe_for_n_trials_named_by_number_and_bindings(
    tmp_path):
  path = tmp_path / "space.json"
  path.write_text(json.dumps({
      "LEARNING_RATE": {"low": 1e-5, "high": 1e-3, "log": True},
      "TRAIN_BATCH_SIZE": [8, 16]}))
  options = study_lib.StudyOptions(
      **_options(study_lib.default_storage(str(tmp_path)), tmp_path), seed=3)
  study = study_lib.SweepStudy(
      options, search_space=study_lib.load_search_space(str(path)),
      n_trials=3, fixed={"SEED": 3},
      namer=lambda b: "_".join(f"{k}{v}" for k, v in sorted(b.items())))
  claims = [study.claim() for _ in range(3)]
  for number, claim in enumerate(claims):
    bindings = claim.bindings
    assert sorted(bindings) == ["LEARNING_RATE", "SEED", "TRAIN_BATCH_SIZE"]
    assert 1e-5 <= bindings["LEARNING_RATE"] <= 1e-3 and bindings["SEED"] == 3
    assert bindings["TRAIN_BATCH_SIZE"] in (8, 16)
    assert claim.name == f"t{number:03d}_" + "_".join(
        f"{k}{v}" for k, v in sorted(bindings.items()))
    study.finish(claim, TrialState.COMPLETE, bindings["LEARNING_RATE"])
  assert len({c.bindings["LEARNING_RATE"] for c in claims}) == 3
  assert study.claim() is None               # n_trials made, none running
  assert len(study.trials()) == 3


def test_parallel_search_processes_draw_distinct_trials_a_rerun_the_same(
    tmp_path):
  """Two processes of one TPE search (same seed) holding a trial at once
  draw different points (each building TPE from the seed alone drew the
  same point twice); one process making the same trials one after the
  other draws the same points again, trial number by trial number."""
  space = tmp_path / "space.json"
  space.write_text(json.dumps(
      {"LEARNING_RATE": {"low": 1e-5, "high": 1e-3, "log": True}}))

  storage = study_lib.default_storage(str(tmp_path))
  log = tmp_path / "parallel.log"
  started = [_search(dict(_options(storage, tmp_path), study_name="parallel"),
                     space, log, 2) for _ in range(2)]
  for process in started:            # both hold a trial at once
    _finish(process)
  parallel = {int(number): float(rate) for number, rate in _lines(log)}
  assert sorted(parallel) == [0, 1]
  assert parallel[0] != parallel[1]
  # The same search again, in this process, one trial after the other.
  serial = study_lib.SweepStudy(
      study_lib.StudyOptions(**dict(_options(storage, tmp_path),
                                    study_name="serial"), seed=1),
      search_space=study_lib.load_search_space(str(space)), n_trials=2,
      fixed={"SEED": 1})
  for number in range(2):
    claim = serial.claim()
    assert claim.trial.number == number
    assert claim.bindings["LEARNING_RATE"] == parallel[number]
    serial.finish(claim, TrialState.COMPLETE, 0.5)
