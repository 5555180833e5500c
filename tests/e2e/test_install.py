"""bertexp as users install it: a wheel in a fresh venv, run from a folder
outside the repository, shipped experiments found by name."""
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

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


def _build_wheel(tmp_path, extra_dependency=None):
  """The wheel of a copy of the sources (the checkout stays untouched);
  `extra_dependency` is added to its declared dependencies."""
  source = tmp_path / "source"
  source.mkdir()
  shutil.copytree(os.path.join(REPO, "bertexp"), source / "bertexp",
                  ignore=shutil.ignore_patterns("__pycache__"))
  for name in ("pyproject.toml", "README.md", "LICENSE"):
    shutil.copy(os.path.join(REPO, name), source / name)
  if extra_dependency:
    project = (source / "pyproject.toml").read_text()
    (source / "pyproject.toml").write_text(project.replace(
        "dependencies = [\n", f'dependencies = [\n  "{extra_dependency}",\n', 1))
  subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                  "--no-build-isolation", str(source), "-w",
                  str(tmp_path / "dist")], check=True)
  wheels = os.listdir(tmp_path / "dist")
  assert len(wheels) == 1 and wheels[0].endswith("-py3-none-any.whl")
  return str(tmp_path / "dist" / wheels[0])


def _fresh_venv(folder):
  """A new venv that sees this test's installed packages (a .pth line) but
  has nothing installed itself: pip resolves the wheel's declared
  dependencies against them, with no index (no download)."""
  subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
  python = str(folder / "bin" / "python")
  site = subprocess.run(
      [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
      check=True, capture_output=True, text=True).stdout.strip()
  with open(os.path.join(site, "test_stack.pth"), "w") as f:
    f.write(sysconfig.get_paths()["purelib"] + "\n")
  return python


def _install(python, wheel):
  """pip install of the wheel with its dependencies, then pip check."""
  install = subprocess.run([python, "-m", "pip", "install", "-q",
                            "--no-index", wheel], capture_output=True, text=True)
  check = subprocess.run([python, "-m", "pip", "check"], capture_output=True,
                         text=True)
  # tf-models-official (Orbit) is installed with --no-deps on purpose: its
  # pins would downgrade TensorFlow (pyproject.toml says so).
  broken = [line for line in check.stdout.splitlines()
            if line.strip() and not line.startswith("tf-models-official ")
            and line != "No broken requirements found."]
  return install, broken


def test_a_declared_dependency_that_is_not_installed_fails_the_install(
    tmp_path):
  """The install check can fail: a wheel declaring a package the stack does
  not have does not install."""
  python = _fresh_venv(tmp_path / "venv")
  install, _ = _install(python, _build_wheel(
      tmp_path, extra_dependency="bertexp-no-such-package==1.0"))
  assert install.returncode != 0
  assert "bertexp-no-such-package" in install.stderr


def test_wheel_installs_with_its_dependencies_and_runs_a_shipped_experiment(
    tmp_path, tiny_vocab, tiny_config):
  python = _fresh_venv(tmp_path / "venv")
  install, broken = _install(python, _build_wheel(tmp_path))
  # Its declared dependencies resolved (no --no-deps) and pip check passes.
  assert install.returncode == 0, install.stderr
  assert broken == []
  requires = subprocess.run(
      [python, "-c", "import importlib.metadata as m; "
       "print('\\n'.join(m.requires('bertexp')))"], check=True,
      capture_output=True, text=True).stdout
  for package in ("tensorflow", "tf-keras", "tensorflow-text", "gin-config",
                  "safetensors"):
    assert package in requires, requires
  bin_dir = tmp_path / "venv" / "bin"
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


SERVER_LIBRARIES = ("grpc", "werkzeug", "tensorflow_serving", "apache_beam")


def test_training_and_export_import_no_server_library():
  """The [serve] and [beam] extras' libraries are the server's and the
  Beam pipelines' alone: importing bertexp, its configurables, the
  experiment (train, export, ONNX export), the Predictor and the in-process
  pretraining data path loads none of them."""
  code = ("import sys, bertexp\n"
          "from bertexp import cli, experiment, registry\n"
          "from bertexp.serving.exporting import onnx_export, predictor\n"
          "from bertexp.tasks.pretraining import data, prepare, task\n"
          "from bertexp.data import vocab\n"
          "cli.build_parser()\n"
          f"print([m for m in {SERVER_LIBRARIES!r} if m in sys.modules])\n")
  done = subprocess.run([sys.executable, "-c", code], cwd=REPO, text=True,
                        capture_output=True, check=True,
                        env=dict(os.environ, TF_USE_LEGACY_KERAS="1"))
  assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr[-2000:]


@pytest.mark.parametrize("missing,command,message", [
    ("werkzeug", "['serve', 'no_such_model']",
     "bertexp serve needs werkzeug: pip install 'bertexp[serve]'"),
    ("apache_beam", "['build-vocab', '--input_file=*', '--vocab_size=100', "
                    "'--output=v.txt', '--runner=beam']",
     "--runner=beam needs apache_beam: pip install 'bertexp[beam]'"),
])
def test_a_missing_extra_names_its_install_command(tmp_path, missing, command,
                                                   message):
  code = ("import sys\n"
          f"sys.modules[{missing!r}] = None      # as if not installed\n"
          "from bertexp import cli\n"
          f"sys.exit(cli.main({command}))\n")
  done = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), text=True,
                        capture_output=True,
                        env=dict(os.environ, TF_USE_LEGACY_KERAS="1"))
  assert done.returncode == 2, done.stderr[-2000:]
  last = done.stderr.strip().splitlines()[-1]
  assert last.startswith("bertexp: error: " + message), last
