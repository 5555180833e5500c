"""Tokenizer parity with google-research/bert's FullTokenizer rules."""
import numpy as np
import pytest

import reference_tokenizer
from conftest import MINILM_HF, requires_minilm
from bertexp.data import tokenization

ENGLISH = ["Hello, World! The unaffable movie wasn't worth $12.50...",
           "  multiple   spaces\tand\ttabs\nnewline ", "A-B c/d (e) [f] {g}",
           "e-mail: someone@example.com #hashtag 100%", ""]
ACCENTED = ["Café résumé naïve ÅNGSTRÖM", "Über straße façade", "İstanbul ΣΑΣ",
            "crème brûlée à la mode"]
CHINESE = ["我爱北京天安门，今天天气很好。", "混合 mixed 中文 text", "電影很好看！"]
ODD = ["a\x00b\u200bc\u3000d", "ＡＢＣ x² ﬁ", "emoji 😀 ok", "x\ufffdy",
       "soft\u00adhyphen", "\u0301abc", "x" * 250]
# Words of 101-200 bytes or characters: FullTokenizer's limit is 200
# characters (then one [UNK]); FastBertTokenizer's own default is 100 bytes.
LONG_WORDS = ["un" + "believable" * 12, "abc" * 66 + "de", "abc" * 67,
              "д" * 90, "ab" * 100 + " ok", "ab" * 100 + "a, fine", "é" * 120,
              "x" * 199 + "-" + "y" * 201 + " z", "天" * 300, "$" + "q" * 200]


@pytest.fixture(scope="module")
def minilm_tokenizer():
  requires_minilm()
  return tokenization.Tokenizer(f"{MINILM_HF}/vocab.txt", do_lower_case=True)


@pytest.mark.parametrize("text", ENGLISH + ACCENTED + CHINESE + ODD + LONG_WORDS)
def test_same_tokens_as_full_tokenizer_rules(minilm_tokenizer, text):
  ours = minilm_tokenizer.convert_ids_to_tokens(minilm_tokenizer.tokenize([text])[0])
  theirs = reference_tokenizer.full_tokenize(
      text, set(minilm_tokenizer.vocab), do_lower_case=True)
  assert ours == theirs


def test_pinned_ids(minilm_tokenizer):
  # ids of bert-base-uncased's vocabulary (MiniLM shares it).
  assert minilm_tokenizer.tokenize(["hello world"])[0].tolist() == [7592, 2088]
  tokens = minilm_tokenizer.convert_ids_to_tokens(
      minilm_tokenizer.tokenize(["Unaffable café 北京"])[0])
  assert tokens == ["una", "##ffa", "##ble", "cafe", "北", "京"]


def test_cased_keeps_case_and_accents(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "Café",
                              "cafe", "Hello", "hello"]))
  tok = tokenization.Tokenizer(str(vocab), do_lower_case=False)
  assert tok.convert_ids_to_tokens(tok.tokenize(["Hello Café"])[0]) == [
      "Hello", "Café"]
  assert reference_tokenizer.full_tokenize(
      "Hello Café", set(tok.vocab), do_lower_case=False) == ["Hello", "Café"]


def _reference_truncate(len_a, len_b, max_tokens):
  """google-research's _truncate_seq_pair loop, on lengths."""
  while len_a + len_b > max_tokens:
    if len_a > len_b:
      len_a -= 1
    else:
      len_b -= 1
  return len_a, len_b


def test_longest_first_truncation_matches_reference_loop():
  for len_a in range(0, 14):
    for len_b in range(0, 14):
      for max_tokens in range(0, 12):
        got = tokenization.truncated_lengths(np.array([len_a]),
                                             np.array([len_b]), max_tokens)
        assert (int(got[0][0]), int(got[1][0])) == _reference_truncate(
            len_a, len_b, max_tokens), (len_a, len_b, max_tokens)


def test_pack_pair_layout(tiny_vocab):
  tok = tokenization.Tokenizer(tiny_vocab)
  a, b = tok.tokenize(["the movie was good"]), tok.tokenize(["it is fun"])
  packed, truncated = tokenization.pack(tok, a, b, max_seq_length=12)
  ids = tok.convert_ids_to_tokens(packed["input_word_ids"][0])
  assert ids == ["[CLS]", "the", "movie", "was", "good", "[SEP]", "it", "is",
                 "fun", "[SEP]", "[PAD]", "[PAD]"]
  assert packed["input_type_ids"][0].tolist() == [0] * 6 + [1] * 4 + [0, 0]
  assert packed["input_mask"][0].tolist() == [1] * 10 + [0, 0]
  assert truncated == 0
  packed, truncated = tokenization.pack(tok, a, b, max_seq_length=7)
  ids = tok.convert_ids_to_tokens(packed["input_word_ids"][0])
  # 4 slots for 4 + 3 tokens: a is longer, shortened first (to 2, then b 2).
  assert ids == ["[CLS]", "the", "movie", "[SEP]", "it", "is", "[SEP]"]
  assert truncated == 1


def test_pack_single(tiny_vocab):
  tok = tokenization.Tokenizer(tiny_vocab)
  packed, truncated = tokenization.pack(
      tok, tok.tokenize(["the movie was very good"]), None, max_seq_length=5)
  assert tok.convert_ids_to_tokens(packed["input_word_ids"][0]) == [
      "[CLS]", "the", "movie", "was", "[SEP]"]
  assert packed["input_type_ids"].sum() == 0 and truncated == 1


def test_vocab_errors(tmp_path):
  bad = tmp_path / "vocab.txt"
  bad.write_text("[PAD]\n[UNK]\nhello\n")
  with pytest.raises(ValueError, match=r"missing reserved tokens \['\[CLS\]', '\[SEP\]'\]"):
    tokenization.load_vocab(str(bad))
  bad.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nhello\n")
  with pytest.raises(ValueError, match="vocab.txt:6: duplicate token 'hello'"):
    tokenization.load_vocab(str(bad))


@pytest.mark.parametrize("max_seq_length", [5, 7, 12, 32])
def test_in_graph_packing_equals_numpy_packing(tiny_vocab, max_seq_length):
  import tensorflow as tf
  tok = tokenization.Tokenizer(tiny_vocab)
  a = ["the movie was very good and fun", "bad", "", "a film !"]
  b = ["it is fun", "the plot is dull and very bad and not good", "good", ""]
  expected, _ = tokenization.pack(tok, tok.tokenize(a), tok.tokenize(b),
                                  max_seq_length)
  got = tokenization.pack_tf(tok, tf.constant(a), tf.constant(b), max_seq_length)
  for name in expected:
    np.testing.assert_array_equal(got[name].numpy(), expected[name], err_msg=name)
  single, _ = tokenization.pack(tok, tok.tokenize(a), None, max_seq_length)
  got = tokenization.pack_tf(tok, tf.constant(a), None, max_seq_length)
  for name in single:
    np.testing.assert_array_equal(got[name].numpy(), single[name], err_msg=name)
