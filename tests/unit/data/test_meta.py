"""The `_meta_data` file `bertexp prepare` writes, read with its fields
checked (bertexp.data.meta): a hand-edited or foreign file is one error
naming the file and the field."""
import json

import pytest

from bertexp.data import meta

FIELDS = dict(positive=("max_seq_length",), counts=("train_data_size",),
              strings=("task_type",), flags=("regression",))
GOOD = {"max_seq_length": 128, "train_data_size": 0,
        "task_type": "classification", "regression": False}


def _write(tmp_path, value, raw=None):
  path = tmp_path / "task_meta_data"
  path.write_text(raw if raw is not None else json.dumps(value))
  return str(path)


def test_a_prepared_files_fields_are_returned(tmp_path):
  extra = dict(GOOD, labels=["a", "b"], split_sizes={"train": 3, "eval": 0})
  path = _write(tmp_path, extra)
  assert meta.read_meta_data(path, **FIELDS) == extra
  assert meta.split_sizes(extra, path) == {"train": 3, "eval": 0}
  assert meta.split_sizes(GOOD, path) == {}
  # Optional counts and flags may be absent.
  assert meta.read_meta_data(_write(tmp_path, {
      "max_seq_length": 8, "task_type": "tagging"}), **FIELDS)


@pytest.mark.parametrize("change,message", [
    ({"max_seq_length": None}, "missing field 'max_seq_length'"),
    ({"task_type": None}, "missing field 'task_type'"),
    ({"max_seq_length": 0}, "field 'max_seq_length' must be a positive "
                            "integer, got 0"),
    ({"max_seq_length": "128"}, "field 'max_seq_length' must be a positive "
                                "integer, got '128'"),
    ({"max_seq_length": True}, "field 'max_seq_length' must be a positive "
                               "integer, got True"),
    ({"train_data_size": -1}, "field 'train_data_size' must be a "
                              "non-negative integer, got -1"),
    ({"train_data_size": 2.0}, "field 'train_data_size' must be a "
                               "non-negative integer, got 2.0"),
    ({"task_type": ""}, "field 'task_type' must be a non-empty string, "
                       "got ''"),
    ({"regression": "false"}, "field 'regression' must be true or false, "
                              "got 'false'"),
])
def test_a_wrong_field_is_named_with_the_file(tmp_path, change, message):
  value = {k: v for k, v in dict(GOOD, **change).items() if v is not None}
  path = _write(tmp_path, value)
  with pytest.raises(ValueError) as error:
    meta.read_meta_data(path, **FIELDS)
  assert str(error.value) == f"{path}: {message}"


def test_a_file_that_is_not_a_json_object_is_named(tmp_path):
  path = _write(tmp_path, ["max_seq_length", 128])
  with pytest.raises(ValueError, match=r"task_meta_data: expected a JSON "
                     r"object \(bertexp prepare's meta data\)$"):
    meta.read_meta_data(path, **FIELDS)
  path = _write(tmp_path, None, raw='{"max_seq_length": 128,')
  with pytest.raises(ValueError, match="task_meta_data"):
    meta.read_meta_data(path, **FIELDS)


@pytest.mark.parametrize("sizes", [[3], {"train": -1}, {"train": "3"}])
def test_bad_split_sizes_are_named(tmp_path, sizes):
  with pytest.raises(ValueError, match="meta: split_sizes must map split "
                     "names to counts"):
    meta.split_sizes({"split_sizes": sizes}, "meta")
