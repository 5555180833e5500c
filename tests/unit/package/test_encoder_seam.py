"""The encoder seam (bertexp/model/encoders/): a config file names its
family (BERT when it names none), every family module declares the whole
interface, and outside the family modules nothing builds a BertEncoder or
reads a BertConfig directly, so a new family is one module."""
import ast
import json
import os
import pkgutil

import pytest

from bertexp.checkpoints import converters
from bertexp.model import encoders
from bertexp.model import modeling
from conftest import TINY_CONFIG
from test_import_rules import _modules


def _write(path, values):
  with open(path, "w") as f:
    json.dump(values, f)
  return str(path)


def test_a_bert_config_without_a_family_is_bert_and_writes_its_family(
    tmp_path, tiny_vocab):
  config = encoders.read_config(_write(tmp_path / "c.json", TINY_CONFIG))
  assert isinstance(config, modeling.BertConfig) and config.family == "bert"
  encoder = encoders.build_encoder(config)
  assert isinstance(encoder, modeling.BertEncoder)
  folder = converters.write_checkpoint_folder(
      encoder.build_variables(), tiny_vocab, str(tmp_path / "ck"))
  written = json.load(open(os.path.join(folder, "bert_config.json")))
  assert written["family"] == "bert"
  assert encoders.read_config(os.path.join(folder, "bert_config.json")) == config


def test_an_unknown_family_is_a_one_line_error_naming_file_and_families(
    tmp_path):
  path = _write(tmp_path / "c.json", dict(TINY_CONFIG, family="funnel"))
  with pytest.raises(ValueError) as error:
    encoders.read_config(path)
  assert str(error.value) == (f"{path}: encoder family 'funnel' is not one "
                              f"of {sorted(encoders.families())}")
  assert {"bert", "electra", "roberta", "albert"} <= set(encoders.families())


def test_an_unsupported_hugging_face_model_type_is_a_one_line_error(tmp_path):
  path = _write(tmp_path / "config.json", dict(TINY_CONFIG,
                                               model_type="funnel"))
  with pytest.raises(ValueError) as error:
    converters.hf_config(path)
  types = sorted(t for f in encoders.families().values()
                 for t in f.hf_model_types)
  assert {"bert", "electra", "roberta", "xlm-roberta", "albert"} <= set(types)
  assert str(error.value) == (f"{path}: model_type 'funnel' is not "
                              f"supported (supported: {types})")


@pytest.mark.parametrize("name", sorted(encoders.families()))
def test_each_family_maps_every_encoder_variable_to_hugging_face_once(name):
  family = encoders.families()[name]
  # Every model type it converts has its tokenizer declared by the family.
  assert set(family.hf_model_types) <= set(family.tokenizers)
  assert {spec.kind for spec in family.tokenizers.values()} <= {
      "wordpiece", "sentencepiece", "byte_bpe", "tokenizer_json"}
  assert family.hf_model_types
  config = family.config_class.from_dict(dict(TINY_CONFIG, family=name))
  encoder = family.build(config, False).build_variables()
  assert encoder.name == "encoder"
  assigned = [v for v, _, _ in family.hf_assignments(encoder, {})]
  assert sorted(v.name for v in assigned) == sorted(
      v.name for v in encoder.weights)
  sources = [s for _, s, _ in family.hf_assignments(encoder, {})]
  assert len(set(sources)) == len(sources)


# Only the family modules (and modeling, which defines BERT's classes, the
# base of the BERT-shaped families) may construct an encoder class or read
# its config class directly.
FAMILY_MODULES = ("bertexp.model.modeling",) + tuple(
    f"bertexp.model.encoders.{info.name}"
    for info in pkgutil.iter_modules(encoders.__path__))
DIRECT = {"BertEncoder", "BertConfig"}


def direct_uses(module, source):
  """(module, line, name) of each direct use of a family's classes."""
  uses = []
  for node in ast.walk(ast.parse(source)):
    name = (node.attr if isinstance(node, ast.Attribute) else
            node.id if isinstance(node, ast.Name) else None)
    if name in DIRECT:
      uses.append((module, node.lineno, name))
  return uses


def test_nothing_outside_the_family_modules_builds_or_reads_bert_directly():
  found = []
  for module, path in sorted(_modules().items()):
    if module not in FAMILY_MODULES:
      found += direct_uses(module, open(path, encoding="utf-8").read())
  assert found == []


def test_the_direct_use_check_catches_one():
  source = "from bertexp.model import modeling\nx = modeling.BertEncoder(c)\n"
  assert direct_uses("bertexp.tasks.x", source) == [
      ("bertexp.tasks.x", 2, "BertEncoder")]


def test_the_data_side_keeps_no_table_of_families():
  """Tokenizers are the families' (EncoderFamily.tokenizers): the data
  layer names no Hugging Face model_type, and what loads a tokenizer asks
  the families by model_type."""
  from bertexp.model.encoders import tokenizers
  data = [path for module, path in _modules().items()
          if module.startswith("bertexp.data.")]
  types = sorted(tokenizers.specs())
  assert {"bert", "roberta", "xlm-roberta", "albert", "deberta-v2"} <= set(
      types)
  for path in data:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    named = {node.value for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and node.value in types}
    assert not named, (path, named)
  assert tokenizers.spec_for("xlm-roberta").layout.pair_separators == 2
  assert tokenizers.model_type_of_file("hf/spm.model") == "deberta-v2"
  with pytest.raises(ValueError, match="unknown model_type 'funnel'"):
    tokenizers.spec_for("funnel")
