"""The sweep table, from what is on disk (`bertexp results OUTPUT_DIR`).

results.csv   one row per trial: status, bindings, the selection metric,
              every eval metric, steps, warmup, speed, error
results.md    the same per trial, then per configuration mean ± std (sample
              std over seeds, and folds with --folds), max and count, and the
              configuration selected by its mean dev metric — labelled as dev
              selection (with folds: each fold's held-out rows)
out_of_fold/  with --folds: every training row's held-out prediction
results.png   the metric against the learning rate, one line per batch size
              and epochs (mean over seeds, seeds as dots)
"""
import csv
import glob
import io
import logging
import os
import statistics

from bertexp.checkpoints import run_files
from bertexp.util import fileio


def _trials(output_dir, definition):
  """A grid's trials (sweep.json), or a search's: those its workers started
  (each folder's trial.json), in the order the study numbered them."""
  if not definition.get("search_space"):
    return definition["trials"]
  started = []
  for path in sorted(glob.glob(os.path.join(output_dir, "*", "trial.json"))):
    trial = fileio.read_json(path)
    started.append({"name": trial["trial"], "bindings": trial["bindings"]})
  return started


def collect(output_dir):
  """Rows from the sweep's trials and each trial's files."""
  definition = fileio.read_json(os.path.join(output_dir, "sweep.json"))
  rows = []
  for trial in _trials(output_dir, definition):
    folder = os.path.join(output_dir, trial["name"])
    row = {"trial": trial["name"], "bindings": trial["bindings"],
           "status": "not run", "metric": None, "eval": {}}
    result_path = os.path.join(folder, "trial_result.json")
    if os.path.exists(result_path):
      result = fileio.read_json(result_path)
      row["status"], row["error"] = result["status"], result.get("error", "")
    summary_path = run_files.training_summary(folder)
    if row["status"] == "done" and os.path.exists(summary_path):
      summary = fileio.read_json(summary_path)
      row["eval"] = summary["eval_metrics"]
      row["metric_name"] = summary["selection_metric"]
      row["metric"] = summary["eval_metrics"].get(summary["selection_metric"])
      for key in ("total_training_steps", "warmup_steps", "global_batch_size",
                  "examples_per_second", "wall_time_seconds"):
        row[key] = summary.get(key)
    rows.append(row)
  return rows


def _metric_name(rows):
  names = {r["metric_name"] for r in rows if r.get("metric_name")}
  return names.pop() if len(names) == 1 else "metric"


def by_configuration(rows):
  """[(bindings without SEED and FOLD, [metric of each finished trial])],
  grid order: with --folds the values are the folds' (x seeds)."""
  groups = {}
  for row in rows:
    config = {k: v for k, v in row["bindings"].items()
              if k not in ("SEED", "FOLD")}
    key = tuple(sorted(config.items()))
    groups.setdefault(key, (config, []))
    if row["metric"] is not None:
      groups[key][1].append(row["metric"])
  return list(groups.values())


def _summary(values):
  if not values:
    return None
  std = statistics.stdev(values) if len(values) > 1 else 0.0
  return {"mean": statistics.fmean(values), "std": std, "max": max(values),
          "n": len(values)}


def _fmt(value):
  if value is None:
    return ""
  return f"{value:.4f}" if isinstance(value, float) else str(value)


def write_csv(rows, path):
  """results.csv: a row per trial (status, bindings, metrics, speed, error)."""
  keys = sorted({k for r in rows for k in r["bindings"]})
  eval_keys = sorted({k for r in rows for k in r["eval"]})
  columns = (["trial", "status"] + keys + [_metric_name(rows)] +
             [f"eval/{k}" for k in eval_keys] +
             ["total_training_steps", "warmup_steps", "global_batch_size",
              "examples_per_second", "wall_time_seconds", "error"])
  out = io.StringIO()
  writer = csv.writer(out)
  writer.writerow(columns)
  for r in rows:
    writer.writerow([r["trial"], r["status"]] +
                    [r["bindings"].get(k, "") for k in keys] + [_fmt(r["metric"])] +
                    [_fmt(r["eval"].get(k)) for k in eval_keys] +
                    [_fmt(r.get(k)) for k in columns[-6:-1]] +
                    [r.get("error", "")])
  fileio.write_text(path, out.getvalue())


def _config_text(config):
  return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in config.items())


def write_markdown(rows, path):
  """results.md: the trials, then per configuration mean, std and max over seeds;
  returns the configuration with the best mean."""
  name = _metric_name(rows)
  lines = [f"# Sweep results ({name}, on the eval split)", "",
           f"| trial | status | {name} | steps | warmup |", "|---|---|---|---|---|"]
  for r in rows:
    status = r["status"] if r["status"] != "failed" else f"failed: {r['error'][:80]}"
    lines.append(f"| {r['trial']} | {status} | {_fmt(r['metric'])} | "
                 f"{_fmt(r.get('total_training_steps'))} | {_fmt(r.get('warmup_steps'))} |")
  repeats = "folds and seeds" if any(
      "FOLD" in r["bindings"] for r in rows) else "seeds"
  lines += ["", f"## Per configuration (over {repeats})", "",
            f"| configuration | mean {name} ± std | max | trials |",
            "|---|---|---|---|"]
  best = None
  for config, values in by_configuration(rows):
    stats = _summary(values)
    if stats is None:
      lines.append(f"| {_config_text(config)} | no finished trial | | 0 |")
      continue
    lines.append(f"| {_config_text(config)} | {stats['mean']:.4f} ± "
                 f"{stats['std']:.4f} | {stats['max']:.4f} | {stats['n']} |")
    if best is None or stats["mean"] > best[1]["mean"]:
      best = (config, stats)
  lines.append("")
  if best:
    lines.append(
        f"**Selected configuration (dev selection: chosen on the same eval "
        f"split it is scored on, so its score is optimistic):** "
        f"{_config_text(best[0])} — mean {name} {best[1]['mean']:.4f} ± "
        f"{best[1]['std']:.4f} over {best[1]['n']} trials ({repeats}).")
  counts = {s: sum(r["status"] == s for r in rows)
            for s in ("done", "failed", "interrupted", "not run")}
  lines += ["", "Trials: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v)]
  fileio.write_text(path, "\n".join(lines) + "\n")
  return best


def plot(rows, path):
  """Metric vs learning rate, a line per (batch, epochs); False if nothing
  to plot (no finished trial or no LEARNING_RATE axis)."""
  try:
    import matplotlib
  except ImportError:
    logging.warning("%s not drawn: matplotlib is not installed (pip install "
                    "'bertexp[plots]'); the table is complete", path)
    return False
  matplotlib.use("Agg")
  from matplotlib import pyplot
  done = [r for r in rows if r["metric"] is not None
          and "LEARNING_RATE" in r["bindings"]]
  if not done:
    return False
  name = _metric_name(rows)
  figure, axis = pyplot.subplots(figsize=(7, 4.5))
  series = {}
  for r in done:
    b = r["bindings"]
    label = ", ".join(f"{short} {b[k]}" for k, short in (
        ("TRAIN_BATCH_SIZE", "batch"), ("NUM_TRAIN_EPOCHS", "epochs")) if k in b)
    series.setdefault(label or "all", {}).setdefault(
        b["LEARNING_RATE"], []).append(r["metric"])
  for label, points in sorted(series.items()):
    rates = sorted(points)
    line, = axis.plot(rates, [statistics.fmean(points[x]) for x in rates],
                      marker="o", label=label)
    for x in rates:
      axis.scatter([x] * len(points[x]), points[x], s=12, alpha=0.5,
                   color=line.get_color())
  axis.set_xscale("log")
  axis.set_xlabel("learning rate")
  axis.set_ylabel(f"{name} (eval split; line = mean over seeds)")
  axis.legend(fontsize=8)
  axis.grid(alpha=0.3)
  figure.tight_layout()
  with fileio.atomic_path(path) as tmp:
    figure.savefig(tmp, format="png", dpi=110)
  pyplot.close(figure)
  return True


def write_out_of_fold(output_dir, rows):
  """With folds: out_of_fold/<configuration>_seed<k>.tsv, the held-out
  predictions of every fold put together, one row per training row (its
  row number, predicted label or value, probabilities); only configurations
  whose folds all finished. Returns the paths written."""
  groups = {}
  for row in rows:
    if "FOLD" not in row["bindings"]:
      continue
    key = tuple(sorted((k, v) for k, v in row["bindings"].items()
                       if k != "FOLD"))
    groups.setdefault(key, []).append(row)
  written = []
  for key, trials in groups.items():
    if any(t["status"] != "done" for t in trials):
      continue
    lines = {}
    for trial in trials:
      folder = os.path.join(output_dir, trial["trial"])
      submission = glob.glob(run_files.output_file(folder, "submission",
                                                   "*_oof.tsv"))
      results = run_files.output_file(folder, "test_results_oof.tsv")
      ids = fileio.read_text(submission[0]).splitlines()[1:]
      values = fileio.read_text(results).splitlines()
      for line, value in zip(ids, values):
        index, prediction = line.split("\t")
        if int(index) in lines:
          raise ValueError(f"{folder}: training row {index} is in two folds")
        lines[int(index)] = f"{index}\t{prediction}\t{value}"
    name = "_".join(f"{k.lower()}{v}" for k, v in key)
    path = os.path.join(output_dir, "out_of_fold", f"{name}.tsv")
    fileio.write_text(path, "row\tprediction\toutputs\n" + "".join(
        lines[i] + "\n" for i in sorted(lines)))
    written.append(path)
  return written


def write(output_dir):
  """results.csv, results.md and results.png of a sweep folder (and, with
  folds, its out-of-fold predictions)."""
  rows = collect(output_dir)
  write_out_of_fold(output_dir, rows)
  write_csv(rows, os.path.join(output_dir, "results.csv"))
  best = write_markdown(rows, os.path.join(output_dir, "results.md"))
  plotted = plot(rows, os.path.join(output_dir, "results.png"))
  print(fileio.read_text(os.path.join(output_dir, "results.md")), flush=True)
  print(f"Wrote {output_dir}/results.csv, results.md"
        + (", results.png" if plotted else ""), flush=True)
  return rows, best
