"""Writes tests/golden/families/<model_type>/: a small random Hugging Face
model of each encoder family bertexp converts (config.json,
model.safetensors, the tokenizer files its family reads) and what
transformers computes from it (outputs.npz: ids, mask, types,
last_hidden_state, pooler_output where the model has one) on a padded
batch of sentence pairs — numbers from an implementation that shares no
code with bertexp's encoders.

Made once, outside the project's environment (transformers and torch are not
bertexp dependencies):
    python3 -m venv /tmp/hfvenv
    /tmp/hfvenv/bin/pip install torch==2.13.0 transformers==5.25.0 safetensors
    /tmp/hfvenv/bin/python tools/make_family_fixtures.py tests/golden/families
(ModernBERT's folders: `make .cache/bench_hf/.installed`, then
    .cache/bench_hf/bin/python tools/make_family_fixtures.py \
        tests/golden/families modernbert modernbert-biased
with transformers 4.57.1, the last with TensorFlow-era ModernBertModel.)
(model types after the folder: only those).
"""
import json
import os
import sys

import numpy as np
import torch
import transformers

VOCAB = 99
SHAPE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=48, max_position_embeddings=40,
             hidden_act="gelu", hidden_dropout_prob=0.1,
             attention_probs_dropout_prob=0.1)
# Per model_type: (config class, model class, extra config fields, the
# encoder's token ids: (cls, sep, pad) and whether pairs are A </s></s> B).
FAMILIES = {
    "bert": (transformers.BertConfig, transformers.BertModel,
             dict(type_vocab_size=2), (2, 3, 0), False),
    "electra": (transformers.ElectraConfig,
                transformers.ElectraForSequenceClassification,
                dict(type_vocab_size=2, embedding_size=16, num_labels=3),
                (2, 3, 0), False),
    "albert": (transformers.AlbertConfig, transformers.AlbertModel,
               dict(type_vocab_size=2, embedding_size=16, hidden_act="gelu_new",
                    num_hidden_groups=1, inner_group_num=1,
                    classifier_dropout_prob=0.1), (2, 3, 0), False),
    "roberta": (transformers.RobertaConfig, transformers.RobertaModel,
                dict(type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                     eos_token_id=2, layer_norm_eps=1e-5,
                     max_position_embeddings=42), (0, 2, 1), True),
    "xlm-roberta": (transformers.XLMRobertaConfig,
                    transformers.XLMRobertaModel,
                    dict(type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                         eos_token_id=2, layer_norm_eps=1e-5,
                         max_position_embeddings=42), (0, 2, 1), True),
    # DeBERTa-v3's layout: shared keys, log buckets, LayerNormed relative
    # table, no absolute positions, no token types.
    "deberta-v2": (transformers.DebertaV2Config,
                   transformers.DebertaV2ForSequenceClassification,
                   dict(type_vocab_size=0, relative_attention=True,
                        position_buckets=8, max_relative_positions=-1,
                        pos_att_type=["p2c", "c2p"], share_att_key=True,
                        norm_rel_ebd="layer_norm", position_biased_input=False,
                        layer_norm_eps=1e-7, num_labels=3), (1, 2, 0), False),
    # DeBERTa-v2's other options: separate position projections, no buckets
    # (offsets clipped at 16), absolute positions, token types, E < H; wider
    # initial weights, so that the position terms of a table that is not
    # LayerNormed weigh in the outputs.
    "deberta-v2-unshared": (transformers.DebertaV2Config,
                            transformers.DebertaV2ForSequenceClassification,
                            dict(type_vocab_size=2, relative_attention=True,
                                 position_buckets=-1, max_relative_positions=16,
                                 pos_att_type=["c2p", "p2c"],
                                 share_att_key=False, norm_rel_ebd="none",
                                 position_biased_input=True, embedding_size=16,
                                 layer_norm_eps=1e-7, num_labels=3,
                                 initializer_range=0.2),
                            (1, 2, 0), False),
    # MobileBERT as released (trigram input, bottlenecks, NoNorm), with
    # three feed-forward networks per block.
    "mobilebert": (transformers.MobileBertConfig, transformers.MobileBertModel,
                   dict(type_vocab_size=2, embedding_size=16,
                        intra_bottleneck_size=16, num_feedforward_networks=3,
                        hidden_act="relu", normalization_type="no_norm"),
                   (2, 3, 0), False),
    # Its other options: LayerNorm, bottleneck attention, no trigrams, the
    # [CLS] row as the pooled output.
    "mobilebert-layer-norm": (transformers.MobileBertConfig,
                              transformers.MobileBertModel,
                              dict(type_vocab_size=2, embedding_size=16,
                                   trigram_input=False,
                                   intra_bottleneck_size=16,
                                   use_bottleneck_attention=True,
                                   key_query_shared_bottleneck=False,
                                   num_feedforward_networks=2,
                                   normalization_type="layer_norm",
                                   classifier_activation=False),
                              (2, 3, 0), False),
    # ModernBERT: 3 layers, global - local - global, a window of 8 (4 each
    # way) on 28-token rows, the two rotary bases, mean pooling before the
    # head; no biases (ModernBERT-base's choice).
    "modernbert": (transformers.ModernBertConfig,
                   transformers.ModernBertForSequenceClassification,
                   dict(num_hidden_layers=3, local_attention=8,
                        global_attn_every_n_layers=2, global_rope_theta=160000.0,
                        local_rope_theta=10000.0, classifier_pooling="mean",
                        num_labels=3), (2, 3, 0), False),
    # Its other options: every bias, [CLS] pooling, one rotary base, a
    # window of 6, two local layers between global ones.
    "modernbert-biased": (transformers.ModernBertConfig,
                          transformers.ModernBertForSequenceClassification,
                          dict(num_hidden_layers=4, local_attention=6,
                               global_attn_every_n_layers=3,
                               global_rope_theta=10000.0, local_rope_theta=None,
                               norm_bias=True, attention_bias=True,
                               mlp_bias=True, classifier_bias=True,
                               classifier_pooling="cls",
                               classifier_activation="silu", num_labels=3),
                          (2, 3, 0), False),
}
# ModernBERT's fields besides the family's own (its names, not BERT's).
MODERN_SHAPE = dict(hidden_size=32, num_attention_heads=4,
                    intermediate_size=48, max_position_embeddings=40,
                    hidden_activation="gelu", pad_token_id=0,
                    cls_token_id=2, sep_token_id=3, bos_token_id=2,
                    eos_token_id=3, reference_compile=False)
# Normalisation weights start at one and zero: moved, so that a scale or
# shift put in the wrong place shows in the outputs.
PERTURBED_NORMS = ("mobilebert", "mobilebert-layer-norm", "modernbert",
                   "modernbert-biased")


def pair_batch(rng, cls, sep, pad, double_sep, seq=28):
  """Three rows of [CLS] A [SEP] B [SEP] (RoBERTa-style: <s> A </s></s> B
  </s>), padded to `seq` with different lengths; word ids avoid the
  special ids."""
  ids = np.full([3, seq], pad, np.int64)
  mask = np.zeros([3, seq], np.int64)
  types = np.zeros([3, seq], np.int64)
  for row, (a, b) in enumerate([(5, 7), (9, 12), (3, 4)]):
    words = lambda n: list(rng.integers(5, VOCAB, size=n))
    tokens = [cls] + words(a) + [sep] + ([sep] if double_sep else [])
    first = len(tokens)
    tokens += words(b) + [sep]
    ids[row, :len(tokens)] = tokens
    mask[row, :len(tokens)] = 1
    if not double_sep:
      types[row, first:len(tokens)] = 1
  return ids, mask, types


def write_vocab(folder):
  """A WordPiece vocab.txt of VOCAB entries with BERT's special tokens."""
  words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  words += [f"w{i}" for i in range(VOCAB - len(words))]
  with open(os.path.join(folder, "vocab.txt"), "w") as f:
    f.write("\n".join(words) + "\n")


# DeBERTa's log buckets of every offset up to 1023 for these (position_buckets,
# max_relative_positions): DeBERTa-v3's (256, 512) and others.
BUCKETS = ((256, 512), (256, 1024), (64, 512), (8, 40))


def write_deberta_buckets(root):
  """deberta_buckets.json: {"B_M": [bucket of offset -1023, ..., 1023]}."""
  from transformers.models.deberta_v2 import modeling_deberta_v2
  offsets = torch.arange(-1023, 1024)
  table = {f"{b}_{m}": modeling_deberta_v2.make_log_bucket_position(
      offsets, b, m).to(torch.int64).tolist() for b, m in BUCKETS}
  with open(os.path.join(root, "deberta_buckets.json"), "w") as f:
    json.dump(table, f)


def main(root, only=()):
  """Writes every family's folder under `root` (or those named in `only`),
  and DeBERTa's bucket table."""
  write_deberta_buckets(root)
  for model_type, (config_class, model_class, extra, special,
                   double_sep) in FAMILIES.items():
    if only and model_type not in only:
      continue
    torch.manual_seed(0)
    modern = model_type.startswith("modernbert")
    config = config_class(vocab_size=VOCAB, **dict(
        MODERN_SHAPE if modern else SHAPE, **extra))
    if modern:
      config._attn_implementation = "eager"  # pylint: disable=protected-access
    model = model_class(config).eval()
    if model_type in PERTURBED_NORMS:
      with torch.no_grad():
        for name, parameter in model.named_parameters():
          if "LayerNorm" in name or "norm." in name:
            parameter.add_(0.2 * torch.randn_like(parameter))
    folder = os.path.join(root, model_type)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    write_vocab(folder)
    ids, mask, types = pair_batch(np.random.default_rng(1), *special,
                                  double_sep)
    inputs = dict(input_ids=torch.tensor(ids),
                  attention_mask=torch.tensor(mask),
                  token_type_ids=torch.tensor(types))
    if modern:                       # no token types
      inputs.pop("token_type_ids")
    with torch.no_grad():
      if modern:                       # the encoder, its pooling and head
        base = model.model(**inputs).last_hidden_state
        real = inputs["attention_mask"][..., None].float()
        pooled = (base[:, 0] if config.classifier_pooling == "cls" else
                  (base * real).sum(1) / real.sum(1))
        outputs = dict(last_hidden_state=base.numpy(),
                       pooler_output=model.head(pooled).numpy())
      elif model_type == "electra":    # the discriminator and its head
        base = model.electra(**inputs).last_hidden_state
        first = base[:, 0]
        pooled = torch.nn.functional.gelu(model.classifier.dense(first))
        outputs = dict(last_hidden_state=base.numpy(),
                       pooler_output=pooled.numpy())
      elif model_type.startswith("deberta-v2"):   # and its ContextPooler
        base = model.deberta(**inputs).last_hidden_state
        outputs = dict(last_hidden_state=base.numpy(),
                       pooler_output=model.pooler(base).numpy())
      else:
        out = model(**inputs)
        outputs = dict(last_hidden_state=out.last_hidden_state.numpy(),
                       pooler_output=out.pooler_output.numpy())
    np.savez(os.path.join(folder, "outputs.npz"), input_ids=ids,
             attention_mask=mask, token_type_ids=types, **outputs)
    with open(os.path.join(folder, "made_by.json"), "w") as f:
      json.dump({"transformers": transformers.__version__,
                 "torch": torch.__version__, "model_class":
                 model_class.__name__}, f, indent=1)
    print(model_type, {k: v.shape for k, v in outputs.items()})


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
