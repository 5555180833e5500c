"""A sweep worker: claims trials from the study, runs each as a `bertexp
train` process in the trial's folder, reports its evaluations to the
pruner, and tells the study how it ended.

    OUTPUT_DIR/<trial>/trial.json          its name and bindings
    OUTPUT_DIR/<trial>/trial.gin           reruns the trial alone
    OUTPUT_DIR/<trial>/trial_result.json   done / pruned / failed (+ error)
    OUTPUT_DIR/<trial>/log.txt             the trial process's output
"""
import csv
import dataclasses
import os
import subprocess
import threading
import time
from typing import Callable, Optional

from optuna.trial import TrialState

from bertexp.checkpoints import run_files
from bertexp.train import stop_signals
from bertexp.util import fileio
from bertexp.util import forked


def status(folder):
  """A trial folder's recorded status ("done", "pruned", "failed",
  "interrupted"), or None."""
  path = os.path.join(folder, "trial_result.json")
  return fileio.read_json(path).get("status") if os.path.exists(path) else None


def _error_excerpt(log_path, lines=15):
  with open(log_path, errors="replace") as f:
    text = f.read().splitlines()
  errors = [l for l in text if l.startswith("bertexp: error:")]
  return errors[-1] if errors else "\n".join(text[-lines:])


def selection_value(folder):
  """The finished trial's selection metric value, or None."""
  path = run_files.training_summary(folder)
  if not os.path.exists(path):
    return None
  summary = fileio.read_json(path)
  return summary["eval_metrics"].get(summary["selection_metric"])


def _selection_metric(folder):
  """The metric the trial's best checkpoint is chosen by, once it evaluated."""
  info = run_files.best_info(run_files.best_checkpoint(folder))
  return fileio.read_json(info)["metric"] if os.path.exists(info) else None


def evaluations(folder):
  """[(step, value)] of the trial's evaluations of its selection metric so
  far (metrics.csv's eval rows)."""
  metric, table = _selection_metric(folder), run_files.metrics_table(folder)
  if metric is None or not os.path.exists(table):
    return []
  with open(table, newline="") as f:
    return [(int(row["step"]), float(row["value"])) for row in csv.DictReader(f)
            if row["split"] == "eval" and row["metric"] == metric]


def _record_pruned(folder, step):
  """Marks the trial's run as stopped at `step`, as early stopping does: a
  rerun trains no further, predict and export use best_checkpoint/."""
  fileio.write_json(run_files.early_stopping(folder), {
      "metric": _selection_metric(folder), "stopped_early_at_step": step,
      "pruned": True})


@dataclasses.dataclass
class Worker:
  """Runs claimed trials until the study is done.

  Attributes:
    study: the bertexp.sweeps.study.SweepStudy.
    output_dir: the sweep's folder.
    write_trial_gin: (claim, folder) -> None, writes the trial's trial.gin.
    budget: trials this process may still start (shared by its threads),
      or None.
    poll_seconds: how often an idle worker looks for a trial to claim.
    watch_seconds: how often a running trial's evaluations are read.
  """
  study: object
  output_dir: str
  write_trial_gin: Callable
  budget: Optional[list] = None
  poll_seconds: float = 1.0
  watch_seconds: float = 0.2

  def __post_init__(self):
    self.processes, self.lock = set(), threading.Lock()
    self.stopping = False

  def _take_budget(self):
    with self.lock:
      if self.budget is None:
        return True
      if self.budget[0] <= 0:
        return False
      self.budget[0] -= 1
      return True

  def work(self):
    """Claims and runs trials; returns their results."""
    results = []
    while not self.stopping and self._take_budget():
      claim = self.study.claim(self.poll_seconds)
      if claim is None:
        break
      results.append(self.run(claim))
    return results

  def run(self, claim):
    """One claimed trial, from start (or its last checkpoint) to the end."""
    folder = os.path.join(self.output_dir, claim.name)
    os.makedirs(folder, exist_ok=True)
    if status(folder) == "done":       # finished before the study knew it
      self.study.finish(claim, TrialState.COMPLETE, selection_value(folder))
      print(f"[skip] {claim.name}: finished earlier", flush=True)
      return fileio.read_json(os.path.join(folder, "trial_result.json"))
    fileio.write_json(os.path.join(folder, "trial.json"),
                      {"trial": claim.name, "bindings": claim.bindings})
    self.write_trial_gin(claim, folder)
    with self.study.heartbeat(claim):
      code, pruned_at = self._train(claim, folder)
    return self._record(claim, folder, code, pruned_at)

  def _train(self, claim, folder):
    """Runs the trial's `bertexp train` process; (exit code, the step it
    was pruned at)."""
    mode = ("train_eval_predict" if "FOLD" in claim.bindings
            else "train_and_eval")
    command = ["-m", "bertexp.cli", "train",
               f"--gin_file={os.path.join(folder, 'trial.gin')}",
               f"--mode={mode}"]
    with open(os.path.join(folder, "log.txt"), "a") as log:
      # Forked with TensorFlow imported (~4 CPU-s less a trial); a lost
      # worker process leaves no trial training on into a folder another
      # worker will resume (its zygote kills the trials it forked).
      process = forked.ForkedProcess(
          command, preload=forked.TRAINING_MODULES, stdout=log,
          stderr=subprocess.STDOUT)
      with self.lock:
        self.processes.add(process)
      try:
        pruned_at = self._watch(claim, folder, process)
        return process.wait(), pruned_at
      finally:
        with self.lock:
          self.processes.discard(process)

  def _watch(self, claim, folder, process):
    """Reports each new evaluation to the study while the trial runs; stops
    the trial (SIGTERM: it checkpoints) when the pruner says so. Returns the
    step it was pruned at, or None."""
    reported = set()
    while True:
      running = process.poll() is None
      for step, value in evaluations(folder):
        if step in reported:
          continue
        reported.add(step)
        claim.trial.report(value, step)     # the last ones after it ended too
        if running and claim.trial.should_prune():
          process.terminate()
          return step
      if not running:
        return None
      time.sleep(self.watch_seconds)

  def _record(self, claim, folder, code, pruned_at):
    """trial_result.json and the study's record of how the trial ended."""
    if pruned_at is not None and code == stop_signals.EXIT_STATUS:
      state, name = TrialState.PRUNED, "pruned"
      _record_pruned(folder, pruned_at)
    elif self.stopping and code != 0:
      state, name = None, "interrupted"
    else:
      state, name = ((TrialState.COMPLETE, "done") if code == 0
                     else (TrialState.FAIL, "failed"))
    result = {"trial": claim.name, "bindings": claim.bindings,
              "status": name, "exit_code": code}
    if name == "failed":
      result["error"] = _error_excerpt(os.path.join(folder, "log.txt"))
    if name == "pruned":
      result["pruned_at_step"] = pruned_at         # its last evaluation
    fileio.write_json(os.path.join(folder, "trial_result.json"), result)
    if state is None:
      self.study.requeue(claim)     # a rerun or another worker resumes it
    else:
      self.study.finish(claim, state, selection_value(folder))
    print(f"[{name}] {claim.name}"
          + (f": {result['error']}" if name == "failed" else "")
          + (f" at step {pruned_at}" if name == "pruned" else ""), flush=True)
    return result

  def stop(self):
    """Stops every running trial (they checkpoint) and claims no more."""
    self.stopping = True
    with self.lock:
      for process in self.processes:
        process.terminate()
