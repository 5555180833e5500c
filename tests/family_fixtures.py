"""Hugging Face folders of the non-WordPiece families for tests: the
transformers-made small models (tests/golden/families) with the tokenizer
files of tests/golden/tokenizers (made by tools/make_family_fixtures.py and
tools/make_tokenizer_fixtures.py)."""
import json
import os
import shutil

import numpy as np
from safetensors.numpy import load_file, save_file

from conftest import TESTS

GOLDEN = os.path.join(TESTS, "golden")
# model_type: (its tokenizer files, the vocabulary they give: XLM-R's
# 2,000 pieces shifted past fairseq's 4 specials, plus <mask>; RoBERTa's
# byte-level BPE of 1,200 tokens).
TOKENIZER_FAMILIES = {"xlm-roberta": (("sentencepiece.bpe.model",), 2002),
                      "albert": (("spiece.model",), 2000),
                      "roberta": (("vocab.json", "merges.txt"), 1200)}


def tokenizer_folder(family):
  """tests/golden/tokenizers/<family>: a --tokenizer folder."""
  return os.path.join(GOLDEN, "tokenizers", family)


def golden_ids(family):
  """The fast tokenizer's ids of the fixture's texts (ids.json)."""
  with open(os.path.join(tokenizer_folder(family), "ids.json"),
            encoding="utf-8") as f:
    return json.load(f)


def hugging_face_folder(folder, family="xlm-roberta", vocab_size=None):
  """Writes `folder`: the transformers-made small model of `family` with
  that family's tokenizer files instead of the fixture's vocab.txt, its
  word embedding table grown to `vocab_size` rows (random new rows;
  default: the tokenizer's vocabulary) and dropout off."""
  tokenizer_files, tokenizer_size = TOKENIZER_FAMILIES[family]
  vocab_size = vocab_size or tokenizer_size
  os.makedirs(folder)
  for name in (*tokenizer_files, "tokenizer_config.json"):
    shutil.copy(os.path.join(tokenizer_folder(family), name), folder)
  source = os.path.join(GOLDEN, "families", family)
  tensors = load_file(os.path.join(source, "model.safetensors"))
  table = tensors["embeddings.word_embeddings.weight"]
  extra = np.random.default_rng(0).normal(
      0, 0.02, [vocab_size - table.shape[0], table.shape[1]])
  tensors["embeddings.word_embeddings.weight"] = np.concatenate(
      [table, extra.astype(table.dtype)])
  save_file(tensors, os.path.join(folder, "model.safetensors"))
  with open(os.path.join(source, "config.json")) as f:
    config = json.load(f)
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump(dict(config, vocab_size=vocab_size, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0), f)
  return folder
