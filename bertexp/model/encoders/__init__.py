"""The encoder seam: one module per encoder family behind one interface.

An encoder family is a module `bertexp/model/encoders/<family>.py` that
defines `FAMILY`, an EncoderFamily: its config class (a dataclass with a
`family` field naming it), how to build its encoder, its Hugging Face
`model_type`s and tensor mapping, and its tokenizer kind. A config file says
which family it is by its "family" field; a bert_config.json without one is
BERT, so google-research and Model Garden files read as they always did.
Everything that reads a config or builds an encoder goes through here
(`read_config`, `build_encoder`), never through one family's classes.

    config = encoders.read_config("bert_config.json")   # family "bert"
    encoder = encoders.build_encoder(config)            # [B, S, H] outputs

The encoder's call contract, for every family: a dict of int32
input_word_ids / input_mask / input_type_ids [B, S], `training`,
`dropout_seed`, `pooled_only` -> {"sequence_output": [B, S, H],
"pooled_output": [B, H]}.
"""
import contextlib
import dataclasses
import importlib
import pkgutil
from typing import Any, Callable, Dict, List, Optional, Tuple

import gin

from bertexp.model.encoders.saved_model import SavedModelEncoder
from bertexp.util import fileio

DEFAULT_FAMILY = "bert"


@dataclasses.dataclass(frozen=True)
class EncoderFamily:
  """One encoder family.

  Attributes:
    name: the value of a config file's "family" field.
    config_class: its config dataclass: `from_dict(values, source)` (source
      names the file in errors), a `family` field, `to_json_string()`, and
      the fields every task reads (vocab_size, hidden_size,
      num_hidden_layers, max_position_embeddings, initializer_range,
      hidden_dropout_prob).
    build: build(config, recompute) -> the encoder layer, named "encoder".
    hf_model_types: Hugging Face config.json `model_type`s it converts.
    hf_assignments: hf_assignments(encoder, tensors {HF name: array}) ->
      [(encoder variable, HF tensor name, transform or None)], every
      variable of the encoder once.
    tokenizers: {Hugging Face model_type: bertexp.data.tokenization.
      TokenizerSpec}: the tokenizer of each model type it reads (its kind,
      files, special tokens and pair template); the data side and the
      command line ask the family for it (bertexp.model.encoders.tokenizers).
    hf_prefix: the module name HF task models put the encoder under
      ("bert" in BertForSequenceClassification's "bert.embeddings...").
    numpy_reference: numpy_reference(tensors, config, word_ids, mask,
      type_ids) -> {"sequence_output", maybe "pooled_output"} in float64
      from HF-named tensors: what a conversion checks the encoder against.
    hf_optional_sources: HF tensor names an encoder may lack (a head layer
      the family's pooler takes when the checkpoint has it); their
      variables keep their initial values. Going back to Hugging Face they
      stay outside the encoder's module prefix.
    hf_classes: transformers' class-name stem of each hf_model_types entry
      ("Bert" for BertModel, BertForSequenceClassification...).
    hf_head_renames: {architecture suffix: {HF module: the module transformers
      names it in that architecture}} for the task models whose head
      layout differs from BERT's (RoBERTa's and ELECTRA's
      `classifier.dense` + `classifier.out_proj`); renamed modules stay
      outside the encoder's module prefix.
    hf_exports: whether `convert-checkpoint --to=huggingface` writes the
      family (False: a one-line error naming it).
  """
  name: str
  config_class: type
  build: Callable[[Any, bool], Any]
  hf_model_types: Tuple[str, ...]
  hf_assignments: Callable[[Any, Dict[str, Any]], List[Tuple[Any, str, Any]]]
  tokenizers: Dict[str, Any]
  hf_prefix: str
  numpy_reference: Callable[..., Dict[str, Any]]
  hf_optional_sources: Tuple[str, ...] = ()
  hf_classes: Tuple[str, ...] = ()
  hf_head_renames: Dict[str, Dict[str, str]] = dataclasses.field(
      default_factory=dict)
  hf_exports: bool = True

  def hf_class(self, model_type):
    """transformers' class-name stem for `model_type` (one of
    hf_model_types)."""
    return dict(zip(self.hf_model_types, self.hf_classes))[model_type]


def families() -> Dict[str, EncoderFamily]:
  """{name: EncoderFamily} of every module in this package that defines
  FAMILY (found by looking, not registered on import)."""
  found = {}
  for info in pkgutil.iter_modules(__path__):
    module = importlib.import_module(f"{__name__}.{info.name}")
    family = getattr(module, "FAMILY", None)
    if isinstance(family, EncoderFamily):
      found[family.name] = family
  return found


def family_named(name, source="config"):
  """The family called `name`.

  Raises:
    ValueError: no such family (naming the known ones).
  """
  known = families()
  if name not in known:
    raise ValueError(f"{source}: encoder family {name!r} is not one of "
                     f"{sorted(known)}")
  return known[name]


def family_for_hf_model_type(model_type, source="config.json"):
  """The family that converts Hugging Face `model_type`.

  Raises:
    ValueError: no family converts it (naming the ones that exist).
  """
  known = families().values()
  for family in known:
    if model_type in family.hf_model_types:
      return family
  supported = sorted(t for f in known for t in f.hf_model_types)
  raise ValueError(f"{source}: model_type {model_type!r} is not supported "
                   f"(supported: {supported})")


def family_of(config) -> EncoderFamily:
  """The family of a config object (its `family` field)."""
  return family_named(getattr(config, "family", DEFAULT_FAMILY))


def config_from_dict(values, source="config"):
  """The config object of the family `values["family"]` names (BERT when
  absent).

  Raises:
    ValueError: not a JSON object, an unknown family, or a field the
      family's config refuses (naming `source`).
  """
  if not isinstance(values, dict):
    raise ValueError(f"{source}: expected a JSON object of encoder config "
                     f"fields, found {type(values).__name__}")
  family = family_named(values.get("family", DEFAULT_FAMILY), source)
  return family.config_class.from_dict(values, source=source)


def read_config(path):
  """The config of the encoder config file at `path` (see config_from_dict)."""
  return config_from_dict(fileio.read_json(path), source=path)


@gin.configurable("build_encoder", module="bertexp")
@dataclasses.dataclass(frozen=True)
class EncoderSettings:
  """How encoders are built, bound by their historical name
  (`bertexp.build_encoder.recompute = True`).

  Attributes:
    hub_module_url: a SavedModel encoder folder instead of the family's own
      encoder (its heads still take dropout and initializer_range from the
      config).
    hub_module_trainable: whether that SavedModel's weights train.
    recompute: recompute each Transformer block's activations in the
      backward pass (a family's own encoder only) to save memory.
  """
  hub_module_url: Optional[str] = None
  hub_module_trainable: bool = True
  recompute: bool = False


_SETTINGS = [EncoderSettings()]


@contextlib.contextmanager
def settings_scope(settings: EncoderSettings):
  """Within: `build_encoder` builds with `settings` (the experiment reads
  them once from gin and builds its task's model inside)."""
  _SETTINGS.append(settings)
  try:
    yield settings
  finally:
    _SETTINGS.pop()


def build_encoder(config, settings: Optional[EncoderSettings] = None):
  """The encoder of `config`'s family, or a SavedModel encoder.

  Args:
    config: the encoder's config.
    settings: EncoderSettings; default those of the innermost
      settings_scope (the experiment's), else the defaults.
  Raises:
    ValueError: recompute with a SavedModel encoder; an unknown family.
  """
  settings = settings or _SETTINGS[-1]
  hub_module_url, recompute = settings.hub_module_url, settings.recompute
  hub_module_trainable = settings.hub_module_trainable
  if recompute and hub_module_url:
    raise ValueError("bertexp.build_encoder.recompute needs bertexp's encoder, "
                     "not HUB_MODULE_URL")
  if hub_module_url:
    return SavedModelEncoder(hub_module_url, config,
                             trainable=hub_module_trainable, name="encoder")
  return family_of(config).build(config, recompute)


def variable_groups(model):
  """{variable.ref(): (group name, depth)} of every bertexp encoder inside
  `model` (a tf.Module), from the encoders' own layer_groups(): each
  variable belongs to the first group that holds it; depth is -1 for the
  embeddings and what every block shares, i for block i, None for the
  pooler. A variable outside every encoder (a task's head) is absent."""
  groups = {}
  # A family's encoder declares its layers through layer_groups() (see
  # bertexp.model.modeling.BertEncoder.layer_groups).
  encoders_in = [m for m in (model, *model.submodules)
                 if callable(getattr(m, "layer_groups", None))]
  for encoder in encoders_in:
    for name, depth, variables in encoder.layer_groups():
      for variable in variables:
        groups.setdefault(variable.ref(), (name, depth))
  return groups


__all__ = ["EncoderFamily", "EncoderSettings", "SavedModelEncoder",
           "build_encoder", "settings_scope", "variable_groups",
           "config_from_dict", "families", "family_for_hf_model_type",
           "family_named", "family_of", "read_config"]
