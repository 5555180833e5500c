"""A sentence-transformers folder's pooling, read and written
(bertexp/checkpoints/sentence_transformers.py): what the module chain and
the Pooling config say, both ways, and a chain bertexp does not implement
refused naming the file."""
import json

import pytest

from bertexp.checkpoints import sentence_transformers as st


def _folder(tmp_path, modules, pooling, max_seq_length=128):
  (tmp_path / "1_Pooling").mkdir(exist_ok=True)
  (tmp_path / "modules.json").write_text(json.dumps(
      [{"idx": i, "name": str(i), "path": path,
        "type": f"sentence_transformers.models.{kind}"}
       for i, (kind, path) in enumerate(modules)]))
  (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
  (tmp_path / "sentence_bert_config.json").write_text(json.dumps(
      {"max_seq_length": max_seq_length, "do_lower_case": False}))
  return str(tmp_path)


CHAIN = [("Transformer", ""), ("Pooling", "1_Pooling")]


@pytest.mark.parametrize("mode", ["mean", "cls", "max"])
@pytest.mark.parametrize("normalize", [False, True])
def test_written_files_read_back_as_the_same_pooling(tmp_path, mode,
                                                      normalize):
  for name, text in st.folder_files(mode=mode, normalize=normalize,
                                    max_seq_length=64, width=32).items():
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
  assert st.read_folder(str(tmp_path)) == {
      "mode": mode, "normalize": normalize, "max_seq_length": 64}
  modules = json.loads((tmp_path / "modules.json").read_text())
  assert len(modules) == 2 + normalize


def test_a_folder_without_modules_json_has_no_pooling(tmp_path):
  assert st.read_folder(str(tmp_path)) is None


@pytest.mark.parametrize("modules,pooling,message", [
    (CHAIN + [("Dense", "2_Dense")], {"pooling_mode_mean_tokens": True},
     "modules.json: modules"),
    (CHAIN, {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
     "1_Pooling/config.json: pooling ['mean', 'max']"),
    (CHAIN, {"pooling_mode_mean_sqrt_len_tokens": True},
     "1_Pooling/config.json: pooling ['pooling_mode_mean_sqrt_len_tokens']"),
])
def test_a_chain_bertexp_does_not_implement_is_refused_naming_the_file(
    tmp_path, modules, pooling, message):
  with pytest.raises(ValueError, match=message.replace("[", r"\[")):
    st.read_folder(_folder(tmp_path, modules, pooling))
