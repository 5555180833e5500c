"""Hugging Face -> bertexp conversion on the real MiniLM weights."""
import os
import shutil

import numpy as np
import pytest

import bertexp
from bertexp import checkpoints
from bertexp import cli
from conftest import MINILM_HF, requires_minilm


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  requires_minilm()
  out = str(tmp_path_factory.mktemp("minilm") / "bertexp")
  report = checkpoints.convert_huggingface(MINILM_HF, out)
  return out, report


def test_minilm_parity_within_1e5(converted):
  _, report = converted
  assert not report.missing
  assert report.unmapped_source == []
  assert len(report.mapped) == 5 + 16 * 6 + 2
  assert max(report.max_abs_diff.values()) <= 1e-5, report.max_abs_diff


def test_converted_folder_loads(converted):
  out, _ = converted
  assert sorted(os.listdir(out)) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001",
      "bert_model.ckpt.index", "vocab.txt"]
  encoder = bertexp.load_encoder(os.path.join(out, "bert_config.json"),
                                 os.path.join(out, "bert_model.ckpt"))
  assert encoder.config.hidden_size == 384
  tensors = checkpoints.read_safetensors(os.path.join(MINILM_HF, "model.safetensors"))
  np.testing.assert_array_equal(
      encoder.embeddings.word_embeddings.numpy(),
      tensors["embeddings.word_embeddings.weight"])


def _copy_minilm(tmp_path, edit):
  from safetensors import numpy as st_numpy
  folder = tmp_path / "hf"
  folder.mkdir()
  for name in ("config.json", "vocab.txt"):
    shutil.copy(os.path.join(MINILM_HF, name), folder / name)
  tensors = st_numpy.load_file(os.path.join(MINILM_HF, "model.safetensors"))
  edit(tensors)
  st_numpy.save_file(tensors, str(folder / "model.safetensors"))
  return str(folder)


def test_missing_tensor_is_an_error_and_writes_nothing(tmp_path, capsys):
  requires_minilm()
  src = _copy_minilm(tmp_path, lambda t: t.pop("encoder.layer.3.output.dense.bias"))
  out = tmp_path / "out"
  code = cli.main(["convert-checkpoint", "--from=huggingface", f"--input={src}",
                   f"--output={out}"])
  assert code == 2
  assert "encoder.layer.3.output.dense.bias" in capsys.readouterr().err
  assert not out.exists()


def test_extra_tensors_are_listed_with_bert_prefix(tmp_path):
  requires_minilm()

  def edit(tensors):
    for name in list(tensors):
      tensors["bert." + name] = tensors.pop(name)
    tensors["classifier.weight"] = np.zeros([2, 384], np.float32)
  src = _copy_minilm(tmp_path, edit)
  report = checkpoints.convert_huggingface(src, str(tmp_path / "out"))
  assert report.unmapped_source == ["classifier.weight"]


def test_parity_failure_refuses_to_write(tmp_path):
  requires_minilm()
  with pytest.raises(ValueError, match="parity check failed"):
    checkpoints.convert_huggingface(MINILM_HF, str(tmp_path / "out"),
                                    tolerance=1e-12)
  assert not (tmp_path / "out").exists()
