"""SentencePiece tokenizers (ALBERT, XLM-RoBERTa, DeBERTa-v3) against what the Hugging
Face fast tokenizer of each family gives (tests/golden/tokenizers, made by
tools/make_tokenizer_fixtures.py from SentencePiece models trained on the
demo's English and Chinese text): ids, special tokens, pair layout, token
types, padding and longest-first truncation, from `pack` and in the graph."""
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bertexp.data import tokenization
from bertexp.model.encoders import tokenizers
from conftest import REPO

GOLDEN = os.path.join(REPO, "tests", "golden", "tokenizers")
FAMILIES = ("xlm-roberta", "albert", "deberta-v2")
NAMES = {"input_ids": "input_word_ids", "attention_mask": "input_mask",
         "token_type_ids": "input_type_ids"}


def _golden(family):
  folder = os.path.join(GOLDEN, family)
  with open(os.path.join(folder, "ids.json"), encoding="utf-8") as f:
    golden = json.load(f)
  tokenizer = tokenizers.load(**tokenizers.folder_settings(folder))
  return tokenizer, golden


def _words(tokenizer, ids):
  """ids -> [(text of a word, sorted ids)], a word starting at a piece that
  starts with '▁' (or at a special token)."""
  words = []
  for token_id in ids:
    token = tokenizer.vocab[token_id]
    if not words or token.startswith("\u2581") or token_id in (
        tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id):
      words.append(("", []))
    text, members = words[-1]
    words[-1] = (text + token, members + [token_id])
  return [(text, sorted(members)) for text, members in words]


def _assert_fast_tokenizer_ids(tokenizer, got, want, what):
  """Equal ids, or (where the fast tokenizer's Unigram lattice breaks a tie
  of equal-score segmentations another way than SentencePiece's own) the
  same words from the same pieces in another order; returns whether the ids
  were exactly equal."""
  for key, name in NAMES.items():
    if key != "input_ids":
      assert list(got[name]) == want[key], (what, key)
  ids = [int(i) for i in got["input_word_ids"]]
  if ids == want["input_ids"]:
    return True
  assert _words(tokenizer, ids) == _words(tokenizer, want["input_ids"]), (
      what, ids, want["input_ids"])
  return False


@pytest.mark.parametrize("family", FAMILIES)
def test_prepare_ids_equal_the_fast_tokenizer_on_accents_cjk_emoji(family):
  tokenizer, golden = _golden(family)
  seq, texts, pairs = golden["seq"], golden["texts"], golden["pairs"]
  single, _ = tokenization.pack(tokenizer, tokenizer.tokenize(texts), None, seq)
  pair, truncated = tokenization.pack(
      tokenizer, tokenizer.tokenize([a for a, _ in pairs]),
      tokenizer.tokenize([b for _, b in pairs]), seq)
  exact = [
      _assert_fast_tokenizer_ids(
          tokenizer, {k: v[i] for k, v in single.items()}, want, texts[i])
      for i, want in enumerate(golden["ids"]["single"])] + [
      _assert_fast_tokenizer_ids(
          tokenizer, {k: v[i] for k, v in pair.items()}, want, pairs[i])
      for i, want in enumerate(golden["ids"]["pair"])]
  # Ties are rare: all rows but the one with "9,000" ("0"+"00" against
  # "00"+"0") and the pair that holds it are equal id for id.
  assert sum(exact) >= len(exact) - 2, exact
  assert truncated >= 3         # longest-first cut both texts, and one
  if family == "xlm-roberta":   # <s> A </s></s> B </s>, no token types
    assert pair["input_word_ids"][0].tolist().count(tokenizer.sep_id) == 3
    assert not pair["input_type_ids"].any()
  else:                         # [CLS] A [SEP] B [SEP], B's types 1
    assert pair["input_type_ids"].any()


@pytest.mark.parametrize("family", FAMILIES)
def test_packing_in_the_graph_equals_prepare(family):
  """serve_text's path (tokenize_tf + pack_tf) gives prepare's ids."""
  tokenizer, golden = _golden(family)
  seq, pairs = golden["seq"], golden["pairs"]
  a, b = [p[0] for p in pairs], [p[1] for p in pairs]
  want, _ = tokenization.pack(tokenizer, tokenizer.tokenize(a),
                              tokenizer.tokenize(b), seq)
  got = tokenization.pack_tf(tokenizer, tf.constant(a), tf.constant(b), seq)
  for name, values in want.items():
    np.testing.assert_array_equal(got[name].numpy(), values, err_msg=name)
  want, _ = tokenization.pack(tokenizer, tokenizer.tokenize(golden["texts"]),
                              None, seq)
  got = tokenization.pack_tf(tokenizer, tf.constant(golden["texts"]), None, seq)
  np.testing.assert_array_equal(got["input_word_ids"].numpy(),
                                want["input_word_ids"])


@pytest.mark.parametrize("len_a,len_b,budget,google,huggingface", [
    (12, 30, 21, (11, 10), (10, 11)),   # both cut: the odd token differs
    (30, 12, 21, (11, 10), (11, 10)),
    (11, 11, 21, (11, 10), (10, 11)),   # equal: google cuts b, HF gives b the odd
    (5, 30, 21, (5, 16), (5, 16)),      # only the longer one is cut
    (30, 5, 21, (16, 5), (16, 5)),
    (30, 40, 20, (10, 10), (10, 10)),
    (3, 4, 21, (3, 4), (3, 4)),         # fits: nothing cut
])
def test_longest_first_rules_of_google_research_and_hugging_face(
    len_a, len_b, budget, google, huggingface):
  for rule, want in (("google", google), ("huggingface", huggingface)):
    got = tokenization.truncated_lengths(np.array([len_a]), np.array([len_b]),
                                         budget, rule)
    assert (int(got[0][0]), int(got[1][0])) == want, rule
    in_graph = tokenization.truncated_lengths(
        tf.constant([len_a], tf.int64), tf.constant([len_b], tf.int64),
        tf.constant(budget, tf.int64), rule, ops=tf)
    assert (int(in_graph[0][0]), int(in_graph[1][0])) == want, rule


@pytest.mark.parametrize("config,files,message", [
    ({"model_type": "roberta"}, {"vocab.json": b"{}"}, "no merges.txt"),
    ({"model_type": "roberta"}, {"merges.txt": b"a b"}, "no vocab.json"),
    ({"model_type": "gpt2"}, {}, "unknown model_type 'gpt2'"),
    ({"model_type": "albert"}, {}, "no spiece.model"),
    (None, {}, "no config.json"),
    ({"model_type": "xlm-roberta"}, {"sentencepiece.bpe.model": b"not a model"},
     "not a SentencePiece model"),
    ({"model_type": "deberta-v2"},
     {"spm.model": os.path.join(GOLDEN, "deberta-v2", "spm.model"),
      "tokenizer_config.json": b'{"split_by_punct": true}'},
     "split_by_punct is not supported"),
])
def test_tokenizer_folders_bertexp_cannot_read_are_one_line_errors(
    tmp_path, config, files, message):
  if config is not None:
    (tmp_path / "config.json").write_text(json.dumps(config))
  for name, data in files.items():   # bytes, or a file to copy
    if isinstance(data, str):
      data = open(data, "rb").read()
    (tmp_path / name).write_bytes(data)
  with pytest.raises(ValueError, match=message) as error:
    tokenizers.load(**tokenizers.folder_settings(str(tmp_path)))
  assert "\n" not in str(error.value)


def test_albert_casing_and_accents_follow_its_tokenizer_config(tmp_path):
  folder = os.path.join(GOLDEN, "albert")
  settings = tokenizers.folder_settings(folder)
  assert settings["do_lower_case"] and not settings["keep_accents"]
  lower = tokenizers.load(**settings)
  cased = tokenizers.load(**dict(settings, do_lower_case=False,
                                   keep_accents=True))
  text = ["Café ``Déjà''"]
  assert lower.tokenize(text)[0].tolist() == lower.tokenize(
      ["cafe \"deja\""])[0].tolist()
  assert cased.tokenize(text)[0].tolist() != lower.tokenize(text)[0].tolist()


def test_deberta_lower_cases_only_when_its_tokenizer_config_says_so(tmp_path):
  """DeBERTa-v3's tokenizer keeps case by default; do_lower_case: true in
  tokenizer_config.json lower-cases before the model's own normaliser."""
  folder = os.path.join(GOLDEN, "deberta-v2")
  cased = tokenizers.load(**tokenizers.folder_settings(folder))
  for name in ("config.json", "spm.model"):
    shutil.copy(os.path.join(folder, name), tmp_path / name)
  (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": true}')
  lower = tokenizers.load(**tokenizers.folder_settings(str(tmp_path)))
  text = ["UPPER Case Words"]
  assert lower.tokenize(text)[0].tolist() == cased.tokenize(
      ["upper case words"])[0].tolist()
  assert cased.tokenize(text)[0].tolist() != lower.tokenize(text)[0].tolist()
  assert (cased.cls_id, cased.sep_id, cased.pad_id) == (1, 2, 0)
