"""Versioned exports in TF Serving's layout: BASE/<version>/saved_model.pb
(or model.onnx, what `bertexp export-onnx` writes), the version a positive
integer; other names (bertexp's `*.tmp-*` folders while an export is
written) are not versions."""
import tensorflow as tf

from bertexp.checkpoints import run_files
from bertexp.util import fileio

# What makes a folder a version: TensorFlow's SavedModel, or export-onnx's.
MODEL_FILES = ("saved_model.pb", "model.onnx")


def versions_folder(path):
  """The folder that holds the numeric versions: `path` itself, or its
  export/ (a MODEL_DIR).

  Raises:
    FileNotFoundError: neither holds a version.
  """
  for folder in (run_files.exports(path), path):
    if tf.io.gfile.isdir(folder) and list_versions(folder):
      return folder
  raise FileNotFoundError(f"{path}: no exported model (a MODEL_DIR after "
                          "--mode=export, or a folder of numeric version "
                          "folders holding saved_model.pb or model.onnx)")


def list_versions(folder):
  """{version: path} of the complete versions in `folder` (with a
  saved_model.pb or a model.onnx), in no particular order."""
  found = {}
  for name in tf.io.gfile.listdir(folder):
    name = name.strip("/")
    if name.isdigit() and int(name) > 0:
      path = fileio.join(folder, name)
      if any(tf.io.gfile.exists(fileio.join(path, model_file))
             for model_file in MODEL_FILES):
        found[int(name)] = path
  return found


def resolve_export_dir(path):
  """A version folder (a SavedModel, or an ONNX model); an export/ folder or
  a MODEL_DIR gives its newest version.

  Raises:
    FileNotFoundError: no exported model there.
  """
  if any(tf.io.gfile.exists(fileio.join(path, model_file))
         for model_file in MODEL_FILES):
    return path
  found = list_versions(versions_folder(path))
  return found[max(found)]
