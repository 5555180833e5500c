"""The ALBERT family: factorised embeddings of width `embedding_size`
projected to the hidden size, and one Transformer block whose weights every
layer shares (run num_hidden_layers times); BERT's tanh pooler.
Hugging Face's `num_hidden_groups` and `inner_group_num` above 1 (no
released ALBERT uses them) are refused. SentencePiece tokenization.
"""
import dataclasses

from bertexp.data import tokenization
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.model.encoders import bert
from bertexp.model.encoders import reference

_SHARED = "encoder.albert_layer_groups.0.albert_layers.0."
# {bertexp block attribute: HF module of the shared layer}.
SHARED_LAYER = {
    "query": _SHARED + "attention.query", "key": _SHARED + "attention.key",
    "value": _SHARED + "attention.value",
    "attention_output": _SHARED + "attention.dense",
    "attention_layer_norm": _SHARED + "attention.LayerNorm",
    "intermediate": _SHARED + "ffn", "output_dense": _SHARED + "ffn_output",
    "output_layer_norm": _SHARED + "full_layer_layer_norm",
}
PROJECTION = "encoder.embedding_hidden_mapping_in"


@dataclasses.dataclass
class AlbertConfig(modeling.BertConfig):
  """BertConfig's fields, `embedding_size` (E) and Hugging Face's layer
  grouping (1 group of 1 layer: every layer shares one block)."""
  FAMILY_NAME = "albert"
  embedding_size: int = 128
  num_hidden_groups: int = 1
  inner_group_num: int = 1
  hidden_act: str = "gelu_new"
  family: str = "albert"

  def __post_init__(self):
    super().__post_init__()
    for name in ("num_hidden_groups", "inner_group_num"):
      if getattr(self, name) != 1:
        raise ValueError(f"{name} {getattr(self, name)} is not supported "
                         "(ALBERT with one shared layer: 1)")


  @property
  def distinct_blocks(self):
    return self.num_hidden_groups * self.inner_group_num


class AlbertEncoder(modeling.BertEncoder):
  """BertEncoder whose layers are one shared block."""

  def make_blocks(self, config):
    shared = modeling.TransformerBlock(config, name="layer_0")
    return [shared] * config.num_hidden_layers


def build(config, recompute=False):
  """An AlbertEncoder named "encoder" (variables created on first call)."""
  return AlbertEncoder(config, recompute=recompute, name="encoder")


def hf_assignments(encoder, tensors):
  """The shared block once, the projection and the pooler by ALBERT's
  names."""
  return bert.hf_assignments(encoder, tensors, pooler="pooler",
                             projection=PROJECTION,
                             layer_names=lambda i: SHARED_LAYER)


def numpy_reference(tensors, config, word_ids, mask, type_ids):
  """ALBERT in float64 numpy."""
  return reference.forward(tensors, config, word_ids, mask, type_ids,
                           layer_names=lambda i: SHARED_LAYER,
                           projection=PROJECTION, pooler="pooler")


FAMILY = encoders.EncoderFamily(
    name="albert", config_class=AlbertConfig, build=build,
    hf_model_types=("albert",), hf_assignments=hf_assignments,
    tokenizers={"albert": tokenization.sentencepiece_spec(
        "spiece.model", {"do_lower_case": True, "keep_accents": False},
        "AlbertTokenizer", id_offset=0, unk_id=1, cls="[CLS]", sep="[SEP]",
        pad="<pad>", mask="[MASK]", pair_separators=1, segment_ids=True,
        albert_text=True)},
    hf_prefix="albert",
    numpy_reference=numpy_reference, hf_classes=("Albert",))
