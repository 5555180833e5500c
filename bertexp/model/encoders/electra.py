"""The ELECTRA family (the discriminator, what fine-tuning starts from):
BERT's Transformer blocks over factorised embeddings of width
`embedding_size`, projected to the hidden size (`embeddings_project`), and
no pooler of its own. Its pooled output is what Hugging Face's
ElectraClassificationHead computes before its last layer: a Dense(H) with
GELU over [CLS]'s row, taken from `classifier.dense` when the checkpoint is
an ElectraForSequenceClassification and newly initialised otherwise.
WordPiece tokenization, as BERT.
"""
import dataclasses

from bertexp.data import tokenization
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.model.encoders import bert
from bertexp.model.encoders import reference

HEAD_DENSE = "classifier.dense"


@dataclasses.dataclass
class ElectraConfig(modeling.BertConfig):
  """BertConfig's fields and `embedding_size` (E, the embeddings' width;
  128 in ELECTRA-base's discriminator against H = 768)."""
  FAMILY_NAME = "electra"
  embedding_size: int = 128
  family: str = "electra"


class ElectraEncoder(modeling.BertEncoder):
  """BertEncoder with factorised embeddings and a GELU pooler."""
  POOLER_ACTIVATION = "gelu"


def build(config, recompute=False):
  """An ElectraEncoder named "encoder" (variables created on first call)."""
  return ElectraEncoder(config, recompute=recompute, name="encoder")


def hf_assignments(encoder, tensors):
  """BERT's table with ELECTRA's projection, the pooler from the
  classification head's dense layer."""
  return bert.hf_assignments(encoder, tensors, pooler=HEAD_DENSE)


def numpy_reference(tensors, config, word_ids, mask, type_ids):
  """ELECTRA in float64 numpy (the pooler when the head's dense is there)."""
  renamed = {("pooler.dense" + k[len(HEAD_DENSE):]
              if k.startswith(HEAD_DENSE + ".") else k): v
             for k, v in tensors.items()}
  return reference.forward(renamed, config, word_ids, mask, type_ids,
                           pooler_activation="gelu")


FAMILY = encoders.EncoderFamily(
    name="electra", config_class=ElectraConfig, build=build,
    hf_model_types=("electra",), hf_assignments=hf_assignments,
    tokenizers={"electra": tokenization.WORDPIECE}, hf_prefix="electra",
    numpy_reference=numpy_reference,
    hf_optional_sources=(HEAD_DENSE + ".weight", HEAD_DENSE + ".bias"),
    hf_classes=("Electra",),
    # ElectraClassificationHead: dense (the pooler), then out_proj; its
    # multiple-choice model summarises [CLS] with `sequence_summary`.
    hf_head_renames={
        "ForSequenceClassification": {"classifier": "classifier.out_proj"},
        "ForMultipleChoice": {HEAD_DENSE: "sequence_summary.summary"}})
