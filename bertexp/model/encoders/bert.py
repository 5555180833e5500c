"""The BERT family: google-research/bert's encoder (modeling.BertEncoder)
and config (modeling.BertConfig, bert_config.json), Hugging Face's
`model_type` "bert", WordPiece tokenization."""
import numpy as np

from bertexp.model import encoders
from bertexp.model import modeling


def hf_layer_names(i):
  """{our attribute of block i: Hugging Face's module name}."""
  p = f"encoder.layer.{i}."
  return {
      "query": p + "attention.self.query", "key": p + "attention.self.key",
      "value": p + "attention.self.value",
      "attention_output": p + "attention.output.dense",
      "attention_layer_norm": p + "attention.output.LayerNorm",
      "intermediate": p + "intermediate.dense", "output_dense": p + "output.dense",
      "output_layer_norm": p + "output.LayerNorm",
  }


def layer_norm_params(tensors, prefix):
  """HF LayerNorm is weight/bias in new files, gamma/beta in old ones."""
  for scale, shift in (("weight", "bias"), ("gamma", "beta")):
    if f"{prefix}.{scale}" in tensors:
      return f"{prefix}.{scale}", f"{prefix}.{shift}"
  return f"{prefix}.weight", f"{prefix}.bias"


def hf_assignments(encoder, tensors):
  """[(keras variable, source name, transform)] for every encoder variable."""
  pairs = []
  emb = encoder.embeddings
  pairs += [(emb.word_embeddings, "embeddings.word_embeddings.weight", None),
            (emb.position_embeddings, "embeddings.position_embeddings.weight",
             None),
            (emb.type_embeddings, "embeddings.token_type_embeddings.weight",
             None)]
  gamma, beta = layer_norm_params(tensors, "embeddings.LayerNorm")
  pairs += [(emb.layer_norm.gamma, gamma, None), (emb.layer_norm.beta, beta, None)]
  for i, block in enumerate(encoder.blocks):
    for attr, source in hf_layer_names(i).items():
      layer = getattr(block, attr)
      if attr.endswith("layer_norm"):
        gamma, beta = layer_norm_params(tensors, source)
        pairs += [(layer.gamma, gamma, None), (layer.beta, beta, None)]
      else:  # PyTorch Linear stores [out, in]; Keras Dense kernels are [in, out]
        pairs += [(layer.kernel, source + ".weight", np.transpose),
                  (layer.bias, source + ".bias", None)]
  pairs += [(encoder.pooler.kernel, "pooler.dense.weight", np.transpose),
            (encoder.pooler.bias, "pooler.dense.bias", None)]
  return pairs


def build(config, recompute=False):
  """A BertEncoder named "encoder" (variables created on first call)."""
  return modeling.BertEncoder(config, recompute=recompute, name="encoder")


FAMILY = encoders.EncoderFamily(
    name="bert", config_class=modeling.BertConfig, build=build,
    hf_model_types=("bert",), hf_assignments=hf_assignments,
    tokenizer="wordpiece")
