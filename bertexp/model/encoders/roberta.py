"""The RoBERTa family (and XLM-RoBERTa, the same network): BERT's blocks
and pooler; positions counted from `pad_token_id` + 1 over the real tokens
(padding takes the pad row), one token type (input_type_ids are not read),
LayerNorm epsilon 1e-5.
Byte-level BPE (RoBERTa) or SentencePiece (XLM-R) tokenization.
"""
import dataclasses

import numpy as np
import tensorflow as tf

from bertexp.data import tokenization
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.model.encoders import bert
from bertexp.model.encoders import reference


@dataclasses.dataclass
class RobertaConfig(modeling.BertConfig):
  """BertConfig's fields and `pad_token_id` (the position table's padding
  row; real tokens take rows pad_token_id + 1, + 2, ...)."""
  FAMILY_NAME = "roberta"
  MAY_BE_ZERO = ("pad_token_id",)
  pad_token_id: int = 1
  max_position_embeddings: int = 514
  type_vocab_size: int = 1
  layer_norm_eps: float = 1e-5
  family: str = "roberta"

  def __post_init__(self):
    super().__post_init__()
    if self.pad_token_id + 2 > self.max_position_embeddings:
      raise ValueError(f"pad_token_id {self.pad_token_id} leaves no position "
                       f"rows in max_position_embeddings "
                       f"{self.max_position_embeddings}")

  @property
  def reads_type_ids(self):
    """No: RoBERTa has one token type, whatever input_type_ids say."""
    return False

  @property
  def max_seq_length(self):
    """The longest sequence the position table covers."""
    return self.max_position_embeddings - self.pad_token_id - 1


def position_ids(input_mask, pad_token_id):
  """Hugging Face's RoBERTa positions: pad_token_id + 1 + (index among the
  real tokens) for a real token, pad_token_id for padding; int [B, S]."""
  mask = np.asarray(input_mask).astype(np.int64)
  return np.cumsum(mask, axis=1) * mask + pad_token_id


class RobertaEncoder(modeling.BertEncoder):
  """BertEncoder with RoBERTa's position ids and no token types: every
  token takes the one type row, whatever input_type_ids says (data
  prepared with segment ids for pairs reads as RoBERTa's tokenizer would
  have made it)."""

  def token_type_ids(self, inputs):
    return tf.zeros_like(tf.cast(inputs["input_word_ids"], tf.int32))

  def position_ids(self, input_mask):
    mask = tf.cast(input_mask, tf.int32)                             # [B, S]
    return tf.cumsum(mask, axis=1) * mask + self.config.pad_token_id

  def onnx_position_ids(self, graph):
    counted = graph.node("CumSum", ["input_mask", graph.constant(
        "position_axis", np.array(1, np.int32))])                    # [B, S]
    return graph.node("Add", [
        graph.node("Mul", [counted, "input_mask"]),
        graph.constant("pad_token_id",
                       np.array(self.config.pad_token_id, np.int32))])


def build(config, recompute=False):
  """A RobertaEncoder named "encoder" (variables created on first call)."""
  return RobertaEncoder(config, recompute=recompute, name="encoder")


# A fine-tuned RobertaForSequenceClassification has no pooler: its head's
# dense + tanh over <s> is one, and becomes the encoder's pooler.
HEAD_DENSE = "classifier.dense"


def pooler_source(tensors):
  """The HF module of the pooler: `pooler.dense` (RobertaModel), else the
  classification head's dense layer, else `pooler.dense` left absent (a
  token classifier or masked LM has neither; hf_optional_sources keeps the
  pooler as initialised)."""
  if "pooler.dense.weight" in tensors or HEAD_DENSE + ".weight" not in tensors:
    return "pooler.dense"
  return HEAD_DENSE


def numpy_reference(tensors, config, word_ids, mask, type_ids):
  """RoBERTa in float64 numpy (the pooler as hf_assignments reads it)."""
  return reference.forward(tensors, config, word_ids, mask, type_ids,
                           position_ids=position_ids(mask, config.pad_token_id),
                           pooler=pooler_source(tensors))


def hf_assignments(encoder, tensors):
  """BERT's table; the pooler from pooler_source(tensors)."""
  return bert.hf_assignments(encoder, tensors, pooler=pooler_source(tensors))


FAMILY = encoders.EncoderFamily(
    name="roberta", config_class=RobertaConfig, build=build,
    hf_model_types=("roberta", "xlm-roberta"),
    hf_assignments=hf_assignments, tokenizers={
        "roberta": tokenization.BYTE_BPE,
        "xlm-roberta": tokenization.sentencepiece_spec(
            "sentencepiece.bpe.model", {"do_lower_case": False},
            "XLMRobertaTokenizer", id_offset=1, unk_id=3, cls="<s>",
            sep="</s>", pad="<pad>", mask="<mask>", pair_separators=2,
            segment_ids=False, albert_text=False)},
    hf_optional_sources=("pooler.dense.weight", "pooler.dense.bias"),
    hf_prefix="roberta", numpy_reference=numpy_reference,
    hf_classes=("Roberta", "XLMRoberta"),
    # RobertaClassificationHead: dense + tanh over <s> (the pooler), then
    # out_proj; the model's own pooler is not used there.
    hf_head_renames={"ForSequenceClassification": {
        "pooler.dense": "classifier.dense", "classifier": "classifier.out_proj"}})
