"""RoBERTa's byte-level BPE (bertexp.data.byte_bpe) against Hugging Face's
RobertaTokenizerFast on a BPE that `tokenizers` trained on the demo's text
(tests/golden/tokenizers/roberta, made by tools/make_tokenizer_fixtures.py
--roberta_only): GPT-2's pre-tokenizer (contractions, runs of spaces, tabs
and newlines, Unicode spaces), the byte map, merges, the pair layout and
truncation; 300 held-out tweets and Chinese reviews untruncated; the same
ids in the graph and from a SavedModel."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bertexp.data import byte_bpe
from bertexp.data import tokenization
from bertexp.model.encoders import tokenizers
from bertexp.tasks import text_serving
from conftest import REPO

FOLDER = os.path.join(REPO, "tests", "golden", "tokenizers", "roberta")
NAMES = {"input_ids": "input_word_ids", "attention_mask": "input_mask",
         "token_type_ids": "input_type_ids"}


@pytest.fixture(scope="module")
def golden():
  with open(os.path.join(FOLDER, "ids.json"), encoding="utf-8") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def tokenizer():
  return tokenizers.load(**tokenizers.folder_settings(FOLDER))


def test_prepare_ids_equal_the_fast_tokenizer_singles_and_pairs(
    tokenizer, golden):
  seq, texts, pairs = golden["seq"], golden["texts"], golden["pairs"]
  single, _ = tokenization.pack(tokenizer, tokenizer.tokenize(texts), None, seq)
  pair, truncated = tokenization.pack(
      tokenizer, tokenizer.tokenize([a for a, _ in pairs]),
      tokenizer.tokenize([b for _, b in pairs]), seq)
  for packed, wanted in ((single, golden["ids"]["single"]),
                         (pair, golden["ids"]["pair"])):
    for key, name in NAMES.items():
      assert packed[name].tolist() == [w[key] for w in wanted], name
  assert truncated >= 3
  # <s> A </s></s> B </s>, no token types.
  assert pair["input_word_ids"][0].tolist().count(tokenizer.sep_id) == 3
  assert not pair["input_type_ids"].any()


def test_held_out_lines_equal_the_fast_tokenizer_untruncated(
    tokenizer, golden):
  got = tokenizer.tokenize(golden["held_out"])
  assert len(got) == len(golden["held_out_ids"]) >= 250
  for text, ids, want in zip(golden["held_out"], got, golden["held_out_ids"]):
    assert [tokenizer.cls_id, *ids.tolist(), tokenizer.sep_id] == want, text


def test_pre_tokenizer_leaves_a_space_run_s_last_character_to_the_next_word():
  """The words of `tokenizers`' ByteLevel(add_prefix_space=False)
  .pre_tokenize_str (its byte symbols mapped back): Unicode spaces are
  spaces, and only " " joins the word after it."""
  words = byte_bpe.pre_tokenize(tf.constant([
      "a  b", "x \n y", "it's  's", "end  ", "\u3000word", "a \u3000b",
      "x\u3000\u3000y", "n\u00a0 b\u2028c"])).to_list()
  assert [[w.decode() for w in row] for row in words] == [
      ["a", " ", " b"], ["x", " \n", " y"], ["it", "'s", " ", " '", "s"],
      ["end", "  "], ["\u3000", "word"], ["a", " ", "\u3000", "b"],
      ["x", "\u3000", "\u3000", "y"], ["n", "\u00a0", " b", "\u2028", "c"]]


def test_serve_text_from_a_savedmodel_packs_prepare_s_ids(
    tokenizer, golden, tmp_path):
  """The tables are saved with the export: a reloaded TextPacker gives
  prepare's ids for pairs."""
  seq, pairs = golden["seq"], golden["pairs"]
  packer = text_serving.TextPacker(
      vocab_file=tokenizer.vocab_file, do_lower_case=False,
      max_seq_length=seq, num_text_features=2, tokenizer_family="roberta")
  tf.saved_model.save(packer, str(tmp_path / "packer"),
                      signatures={"serve_text": packer.signature()})
  loaded = tf.saved_model.load(str(tmp_path / "packer"))
  got = loaded.signatures["serve_text"](
      text_a=tf.constant([a for a, _ in pairs]),
      text_b=tf.constant([b for _, b in pairs]))
  want = [w["input_ids"] for w in golden["ids"]["pair"]]
  assert got["input_word_ids"].numpy().tolist() == want


def test_a_bad_merges_line_names_the_file_and_line(tmp_path):
  (tmp_path / "vocab.json").write_text(
      open(os.path.join(FOLDER, "vocab.json")).read())
  (tmp_path / "merges.txt").write_text("#version: 0.2\na b\nc d e\n")
  with pytest.raises(ValueError, match=r"merges.txt:3: expected two symbols"):
    byte_bpe.ByteBpeTokenizer(str(tmp_path / "vocab.json"))
