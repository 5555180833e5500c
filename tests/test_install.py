"""bertexp as users install it: a wheel in a fresh venv, run from a folder
outside the repository, shipped experiments found by name."""
import os
import shutil
import subprocess
import sys
import sysconfig

from bertexp import gin_setup
from conftest import REPO, prepare_tiny_sst2_run


def test_shipped_experiments_resolve_by_name_from_any_folder(tmp_path,
                                                             monkeypatch):
  monkeypatch.chdir(tmp_path)
  for name in ("glue/mrpc_gpu.gin", "experiments/glue/mrpc_gpu.gin"):
    path = gin_setup.resolve_gin_file(name)
    assert path == os.path.join(gin_setup.EXPERIMENTS_DIR, "glue/mrpc_gpu.gin")
    assert gin_setup.shipped_name(path) == "glue/mrpc_gpu.gin"
  assert gin_setup.resolve_gin_file("runtime/gpu.gin") == os.path.join(
      gin_setup.GIN_DIR, "runtime/gpu.gin")
  (tmp_path / "glue").mkdir()
  (tmp_path / "glue" / "mrpc_gpu.gin").write_text("# mine\n")
  assert gin_setup.resolve_gin_file("glue/mrpc_gpu.gin") == "glue/mrpc_gpu.gin"
  assert gin_setup.resolve_gin_file("nope.gin") == "nope.gin"


def _build_wheel(tmp_path):
  """The wheel of a copy of the sources (the checkout stays untouched)."""
  source = tmp_path / "source"
  source.mkdir()
  shutil.copytree(os.path.join(REPO, "bertexp"), source / "bertexp",
                  ignore=shutil.ignore_patterns("__pycache__"))
  for name in ("pyproject.toml", "README.md", "LICENSE"):
    shutil.copy(os.path.join(REPO, name), source / name)
  subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                  "--no-build-isolation", str(source), "-w",
                  str(tmp_path / "dist")], check=True)
  wheels = os.listdir(tmp_path / "dist")
  assert len(wheels) == 1 and wheels[0].endswith("-py3-none-any.whl")
  return str(tmp_path / "dist" / wheels[0])


def _fresh_venv_with(wheel, folder):
  """A new venv holding only the wheel; TensorFlow and the rest of the
  stack come from this test's environment (a .pth line: no download)."""
  subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
  python = str(folder / "bin" / "python")
  subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps",
                  "--no-index", wheel], check=True)
  site = subprocess.run(
      [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
      check=True, capture_output=True, text=True).stdout.strip()
  with open(os.path.join(site, "test_stack.pth"), "w") as f:
    f.write(sysconfig.get_paths()["purelib"] + "\n")
  return folder / "bin"


def test_wheel_in_a_fresh_venv_runs_a_shipped_experiment_by_name(
    tmp_path, tiny_vocab, tiny_config):
  wheel = _build_wheel(tmp_path)
  bin_dir = _fresh_venv_with(wheel, tmp_path / "venv")
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  where = subprocess.run(
      [str(bin_dir / "python"), "-c", "import bertexp; print(bertexp.__file__)"],
      cwd=elsewhere, env=env, check=True, capture_output=True,
      text=True).stdout.strip()
  assert where.startswith(str(tmp_path / "venv")), where

  paths = prepare_tiny_sst2_run(str(tmp_path / "exp"), tiny_vocab, tiny_config)
  paths["MODEL_DIR"] = str(tmp_path / "run")
  bindings = [f'--gin_param={k}="{v}"' for k, v in paths.items()] + [
      f"--gin_param={k}={v}" for k, v in dict(
          TRAIN_BATCH_SIZE=8, EVAL_BATCH_SIZE=5, TRAIN_STEPS=2,
          STEPS_PER_LOOP=1).items()]
  result = subprocess.run(
      [str(bin_dir / "bertexp"), "train",
       "--gin_file=demo/movie_sentiment_cpu.gin", "--mode=train_and_eval"] +
      bindings, cwd=elsewhere, env=env, capture_output=True, text=True,
      timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Training Summary:" in result.stdout
  assert os.path.exists(tmp_path / "run" / "ckpt-2.index")
  # Its includes (tasks/, models/, runtime/ fragments) came from the wheel.
  assert "bertexp.ClassificationTask" in (
      tmp_path / "run" / "operative_config.gin").read_text()
  # TensorFlow's C++ start-up lines are hidden without --verbose.
  assert "cuda" not in result.stderr.lower(), result.stderr[:2000]
  assert "oneDNN custom operations" not in result.stderr
  # bertexp's own line says which CPU kernels ran (asked for before TF loads).
  assert "TensorFlow's oneDNN CPU kernels: " in result.stderr
