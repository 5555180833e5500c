"""The BERT family: google-research/bert's encoder (modeling.BertEncoder)
and config (modeling.BertConfig, bert_config.json), Hugging Face's
`model_type` "bert", WordPiece tokenization."""
import numpy as np

from bertexp.data import tokenization
from bertexp.model import encoders
from bertexp.model import modeling
from bertexp.model.encoders import reference
from bertexp.model.encoders.reference import hf_layer_names
from bertexp.model.encoders.reference import layer_norm_params


def linear_assignments(layer, source):
  """[(kernel, source.weight, transpose), (bias, source.bias, None)]: a Dense
  layer from a PyTorch Linear ([out, in]; Keras kernels are [in, out])."""
  return [(layer.kernel, source + ".weight", np.transpose),
          (layer.bias, source + ".bias", None)]


def norm_assignments(layer, tensors, prefix):
  """[(gamma, scale name, None), (beta, shift name, None)]: a normalisation
  layer from HF's `prefix` (weight/bias or gamma/beta)."""
  gamma, beta = layer_norm_params(tensors, prefix)
  return [(layer.gamma, gamma, None), (layer.beta, beta, None)]


def hf_assignments(encoder, tensors, pooler="pooler.dense",
                   projection="embeddings_project", layer_names=hf_layer_names):
  """[(keras variable, source name, transform)] for every encoder variable
  (sources: HF names without the model prefix).

  Args:
    encoder: a built BERT-shaped encoder.
    tensors: the HF tensors (to tell LayerNorm weight/bias from gamma/beta).
    pooler, projection: the HF modules of the pooler's dense layer and of
      the embeddings' projection (when the encoder has one).
    layer_names: layer_names(i) -> {block attribute: HF module}; a block
      the encoder runs more than once (shared) is mapped once.
  Returns:
    The assignments.
  """
  pairs = []
  emb = encoder.embeddings
  pairs += [(emb.word_embeddings, "embeddings.word_embeddings.weight", None),
            (emb.position_embeddings, "embeddings.position_embeddings.weight",
             None),
            (emb.type_embeddings, "embeddings.token_type_embeddings.weight",
             None)]
  pairs += norm_assignments(emb.layer_norm, tensors, "embeddings.LayerNorm")
  if encoder.embeddings_project is not None:
    pairs += linear_assignments(encoder.embeddings_project, projection)
  mapped = set()
  for i, block in enumerate(encoder.blocks):
    if id(block) in mapped:
      continue
    mapped.add(id(block))
    for attr, source in layer_names(i).items():
      layer = getattr(block, attr)
      if attr.endswith("layer_norm"):
        pairs += norm_assignments(layer, tensors, source)
      else:
        pairs += linear_assignments(layer, source)
  return pairs + linear_assignments(encoder.pooler, pooler)


def numpy_reference(tensors, config, word_ids, mask, type_ids):
  """BERT in float64 numpy from HF-named tensors (see reference.forward)."""
  return reference.forward(tensors, config, word_ids, mask, type_ids)


def build(config, recompute=False):
  """A BertEncoder named "encoder" (variables created on first call)."""
  return modeling.BertEncoder(config, recompute=recompute, name="encoder")


FAMILY = encoders.EncoderFamily(
    name="bert", config_class=modeling.BertConfig, build=build,
    hf_model_types=("bert",), hf_assignments=hf_assignments,
    # DistilBERT folders carry BERT's tokenizer (their encoder is not read).
    tokenizers={"bert": tokenization.WORDPIECE,
                "distilbert": tokenization.WORDPIECE},
    hf_prefix="bert", numpy_reference=numpy_reference,
    hf_classes=("Bert",))
