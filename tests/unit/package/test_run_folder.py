"""A run folder has one owner: bertexp/checkpoints/run_files.py knows
MODEL_DIR's layout, and no other module of the package joins a path under
a run folder (read with `ast`): neither from a variable that holds one nor
with the name of a record a run keeps."""
import ast
import os

from conftest import REPO

PACKAGE = os.path.join(REPO, "bertexp")
OWNER = os.path.join(PACKAGE, "checkpoints", "run_files.py")
# Variables that hold a run folder wherever they appear.
RUN_FOLDERS = {"model_dir", "run_folder", "worker_dir", "teacher_dir"}
# The names of what a run keeps (run_files' layout).
RECORDS = {"config.gin", "operative_config.gin", "training_summary.json",
           "metrics.csv", "best_checkpoint", "best_checkpoint.json",
           "early_stopping.json", "eval_results.json", "summaries", "export",
           "workers", "tflite", "onnx", "damaged", "encoder",
           "train_record_counts.json", "checkpoint", "onnx_report.json"}
JOINS = {"join"}          # fileio.join, os.path.join, posixpath.join


def _joins(tree):
  for node in ast.walk(tree):
    if isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Attribute) and node.func.attr in JOINS or
        isinstance(node.func, ast.Name) and node.func.id in JOINS):
      yield node


def _offence(call):
  """Why `call` joins a path under a run folder, or None."""
  if call.args:
    first = call.args[0]
    name = (first.id if isinstance(first, ast.Name) else
            first.attr if isinstance(first, ast.Attribute) else None)
    if name in RUN_FOLDERS:
      return f"joins under {name}"
  for arg in call.args:
    if isinstance(arg, ast.Constant) and arg.value in RECORDS:
      return f"names the run's record {arg.value!r}"
  return None


def offences(root=PACKAGE):
  found = []
  for folder, _, names in os.walk(root):
    for name in names:
      path = os.path.join(folder, name)
      if not name.endswith(".py") or path == OWNER:
        continue
      tree = ast.parse(open(path, encoding="utf-8").read(), path)
      found += [f"{os.path.relpath(path, REPO)}:{call.lineno}: {why}"
                for call in _joins(tree) for why in [_offence(call)] if why]
  return found


def test_no_module_but_the_owner_joins_a_path_under_a_run_folder():
  assert offences() == []


def test_the_check_sees_a_join_under_a_run_folder(tmp_path):
  (tmp_path / "bad.py").write_text(
      "import os\nfrom bertexp.util import fileio\n"
      "a = fileio.join(model_dir, 'anything.json')\n"
      "b = os.path.join(folder, 'training_summary.json')\n"
      "c = fileio.join(data_dir, 'train.tf_record')\n")
  assert [o.split(": ", 1)[1] for o in offences(str(tmp_path))] == [
      "joins under model_dir", "names the run's record 'training_summary.json'"]
