"""`make bench`: a 12-trial grid swept by one `bertexp sweep` process, then
by two processes sharing the study (the default SQLite file), on this
machine; the wall-time ratio two / one, with the CPU.

    python tools/bench_sweep.py [--trials 12] [--steps 40]

The trials are the demo's movie-sentiment file on a 2-layer tiny encoder
trained from random weights on the demo's sentences (a trial is mostly its
process's start and graph building, as a short fine-tuning trial of a
paper grid is per step; each trial uses one CPU thread in both sweeps, so
two fit side by side on a 2-core host).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bertexp.util import machine  # noqa: E402

DEMO = os.path.join(REPO, "experiments", "demo", "movie_sentiment_cpu.gin")
DATA = os.path.join(REPO, ".cache", "data", "movie_sentiment")
TINY = {"vocab_size": 30522, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 128,
        "max_position_embeddings": 64, "type_vocab_size": 2}


def _grid(path, trials):
  rates = [round(1e-4 * (i + 1), 6) for i in range(trials // 2)]
  with open(path, "w") as f:
    f.write("from bertexp.sweeps.grids import product\n"
            f"def grid():\n  return product(LEARNING_RATE={rates!r})\n")


def _sweep(root, name, workers, args, trials):
  """Wall seconds of `workers` sweep processes pulling one study."""
  command = [sys.executable, "-m", "bertexp.cli", "sweep",
             f"--output_dir={root}/{name}"] + args
  start = time.time()
  processes = [subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT)
               for _ in range(workers)]
  codes = [p.wait() for p in processes]
  seconds = time.time() - start
  done = [t for t in os.listdir(f"{root}/{name}") if os.path.exists(
      f"{root}/{name}/{t}/training_summary.json")]
  if any(codes) or len(done) != trials:
    raise SystemExit(f"{name}: exit codes {codes}, {len(done)} of {trials} "
                     "trials done")
  return seconds


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
  parser.add_argument("--trials", type=int, default=12)
  parser.add_argument("--steps", type=int, default=40)
  args = parser.parse_args()
  if not os.path.exists(f"{DATA}/movie_sentiment_meta_data"):
    raise SystemExit(f"{DATA}: run `make demo-data` first")
  print(machine.cpu_line(), flush=True)
  with tempfile.TemporaryDirectory() as root:
    with open(f"{root}/bert_config.json", "w") as f:
      json.dump(TINY, f)
    _grid(f"{root}/grid.py", args.trials)
    params = {"BERT_CONFIG_FILE": f'"{root}/bert_config.json"',
              "INIT_CHECKPOINT": "None", "REQUIRE_PRETRAINED_ENCODER": "False",
              "TRAIN_STEPS": args.steps, "STEPS_PER_LOOP": args.steps,
              "bertexp.experiment.cpu_threads": 1,
              "bertexp.experiment.eval_steps": 4}
    sweep_args = [f"--gin_file={DEMO}", f"--grid={root}/grid.py", "--seeds=2"] + [
        f"--gin_param={k}={v}" for k, v in params.items()]
    one = _sweep(root, "one", 1, sweep_args, args.trials)
    two = _sweep(root, "two", 2, sweep_args, args.trials)
  print(f"{args.trials}-trial grid ({args.steps} steps a trial, 1 CPU thread "
        f"each): 1 sweep process {one:.0f} s, 2 processes sharing the study "
        f"{two:.0f} s: {two / one:.2f}x", flush=True)


if __name__ == "__main__":
  main()
