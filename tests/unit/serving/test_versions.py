"""Version folders in TF Serving's layout (bertexp.serving.exporting.versions),
on folders made here: which names count as versions, that a version without
its model file yet is not one, and which version a MODEL_DIR, an export/
folder or a version folder resolves to. A running server's hot swap is in
tests/e2e/test_serving_lifecycle.py."""
import os

import pytest

from bertexp.serving.exporting import versions


def _version(folder, name, model_file="saved_model.pb"):
  path = os.path.join(folder, name)
  os.makedirs(path)
  if model_file:
    open(os.path.join(path, model_file), "w").close()
  return path


def test_only_positive_numbered_folders_with_a_model_file_are_versions(
    tmp_path):
  folder = str(tmp_path)
  want = {3: _version(folder, "3"), 12: _version(folder, "12", "model.onnx")}
  _version(folder, "0")                                   # not positive
  _version(folder, "7", model_file=None)                  # still being written
  _version(folder, "5", model_file="variables.index")     # not a model file
  _version(folder, "20.tmp-4711")                         # an export under way
  _version(folder, "latest")
  open(os.path.join(folder, "9"), "w").close()            # a file, not a folder
  assert versions.list_versions(folder) == want


def test_the_newest_complete_version_is_resolved(tmp_path):
  model_dir = str(tmp_path / "run")
  export = os.path.join(model_dir, "export")
  _version(export, "2")
  newest = _version(export, "10")      # numerically newest (not "2" > "10")
  _version(export, "11", model_file=None)
  assert versions.versions_folder(model_dir) == export
  assert versions.versions_folder(export) == export
  assert versions.resolve_export_dir(model_dir) == newest
  assert versions.resolve_export_dir(export) == newest
  assert versions.resolve_export_dir(newest) == newest    # a version itself
  # The version being written becomes the newest once its file is there.
  open(os.path.join(export, "11", "saved_model.pb"), "w").close()
  assert versions.resolve_export_dir(model_dir) == os.path.join(export, "11")


def test_a_folder_without_a_version_is_named(tmp_path):
  _version(str(tmp_path / "export"), "1", model_file=None)
  with pytest.raises(FileNotFoundError) as error:
    versions.resolve_export_dir(str(tmp_path))
  assert str(error.value).startswith(f"{tmp_path}: no exported model")
