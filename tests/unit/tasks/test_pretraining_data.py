"""`bertexp prepare pretraining` and `build-vocab`: masking statistics,
whole-word masking (English pieces, jieba words), NSP balance, determinism
and clear errors, on generated corpora."""
import io
import json
import random
import re

import numpy as np
import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.data import vocab as vocab_lib
from bertexp.model.encoders import tokenizers
from bertexp.tasks.pretraining import data as pretraining
import family_fixtures

WORDS = ["the", "movie", "film", "plot", "actor", "story", "music", "scene",
         "good", "bad", "great", "dull", "fun", "long", "short", "runs",
         "running", "played", "playing", "unbelievable", "wonderful"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _english_vocab(path):
  pieces = ["un", "##believ", "##able", "wonder", "##ful", "run", "##s",
            "##ning", "play", "##ed", "##ing", "."]
  tokens = SPECIAL + [w for w in WORDS if w not in (
      "unbelievable", "wonderful", "runs", "running", "played", "playing")] + pieces
  path.write_text("\n".join(tokens) + "\n")
  return str(path), tokens


def _english_corpus(path, documents=60, seed=0):
  # Long documents: a document's last lone segment always gets a random B
  # (as in google-research/bert), which short documents would over-count.
  rng = random.Random(seed)
  with open(path, "w") as f:
    for _ in range(documents):
      for _ in range(rng.randint(20, 40)):
        f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 18)))
                + " .\n")
      f.write("\n")
  return str(path)


def _read(path, seq, predictions):
  spec = {"input_ids": tf.io.FixedLenFeature([seq], tf.int64),
          "input_mask": tf.io.FixedLenFeature([seq], tf.int64),
          "segment_ids": tf.io.FixedLenFeature([seq], tf.int64),
          "masked_lm_positions": tf.io.FixedLenFeature([predictions], tf.int64),
          "masked_lm_ids": tf.io.FixedLenFeature([predictions], tf.int64),
          "masked_lm_weights": tf.io.FixedLenFeature([predictions], tf.float32),
          "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
  batches = [tf.io.parse_example(b, spec) for b in
             tf.data.TFRecordDataset(path).batch(4096)]
  return {k: np.concatenate([b[k].numpy() for b in batches]) for k in spec}


@pytest.fixture
def english(tmp_path):
  vocab_file, tokens = _english_vocab(tmp_path / "vocab.txt")
  return vocab_file, tokens, _english_corpus(tmp_path / "corpus.txt")


def _prepare(corpus, vocab_file, out, **options):
  settings = dict(vocab_file=vocab_file, max_seq_length=64,
                  max_predictions_per_seq=30, dupe_factor=3, random_seed=5)
  settings.update(options)
  num_workers = settings.pop("num_workers", 1)
  return pretraining.prepare_pretraining(
      input_files=corpus, output_file=str(out),
      options=pretraining.Options(**settings), num_workers=num_workers,
      progress=False)


def test_masking_statistics(english, tmp_path):
  vocab_file, tokens, corpus = english
  meta = _prepare(corpus, vocab_file, tmp_path / "out" / "pre.tfrecord")
  data = _read(str(tmp_path / "out" / "pre.tfrecord"), 64, 30)
  n = len(data["input_ids"])
  assert n == meta["train_data_size"] > 500
  lengths = data["input_mask"].sum(1)
  weights = data["masked_lm_weights"]
  masked = weights.sum(1)
  # 15 % of every instance's tokens (rounded), never above the cap.
  assert abs(masked.sum() / lengths.sum() - 0.15) < 0.01
  assert masked.max() <= 30
  np.testing.assert_array_equal(masked, np.maximum(1, np.round(lengths * 0.15)))
  # The positions hold [MASK] 80 %, the original 10 %, a random token 10 %.
  rows, cols = np.nonzero(weights)
  positions = data["masked_lm_positions"][rows, cols]
  shown = data["input_ids"][rows, positions]
  original = data["masked_lm_ids"][rows, cols]
  as_mask = np.mean(shown == tokens.index("[MASK]"))
  kept = np.mean(shown == original)
  assert abs(as_mask - 0.8) < 0.03 and abs(kept - 0.1 - 0.1 / len(tokens)) < 0.03
  # [CLS] / [SEP] are never chosen; layout [CLS] A [SEP] B [SEP].
  ids = data["input_ids"]
  assert not np.isin(original, [tokens.index("[CLS]"), tokens.index("[SEP]")]).any()
  assert (ids[:, 0] == tokens.index("[CLS]")).all()
  assert (ids[np.arange(n), lengths - 1] == tokens.index("[SEP]")).all()
  assert ((data["segment_ids"] == 1).sum(1) >= 2).all()   # B + its [SEP]
  # NSP: about half random (label 1 = random B); a bit more, since a
  # document's lone last segment always gets a random B (as the original).
  assert 0.45 < data["next_sentence_labels"].mean() < 0.6
  assert meta["random_next"] == data["next_sentence_labels"].sum()
  assert meta["masked_fraction"] == pytest.approx(masked.sum() / lengths.sum())


def test_whole_word_masking_never_splits_a_word(english, tmp_path):
  vocab_file, tokens, corpus = english
  _prepare(corpus, vocab_file, tmp_path / "pre.tfrecord", do_whole_word_mask=True)
  data = _read(str(tmp_path / "pre.tfrecord"), 64, 30)
  continuation = np.array([t.startswith("##") for t in tokens])
  split_words, words_with_pieces = 0, 0
  for i in range(len(data["input_ids"])):
    chosen = set(data["masked_lm_positions"][i][data["masked_lm_weights"][i] > 0])
    original = data["input_ids"][i].copy()
    for j, p in enumerate(data["masked_lm_positions"][i]):
      if data["masked_lm_weights"][i][j]:
        original[p] = data["masked_lm_ids"][i][j]
    length = data["input_mask"][i].sum()
    special = {tokens.index("[CLS]"), tokens.index("[SEP]")}
    # A word: a non-## token and the ## pieces after it, within a segment.
    bounds = [p for p in range(1, length) if original[p] in special or
              not continuation[original[p]] or original[p - 1] in special]
    for s, e in zip(bounds, bounds[1:]):
      if original[s] in special:
        continue
      word = set(range(s, e))
      if len(word) > 1:
        words_with_pieces += 1
        if 0 < len(word & chosen) < len(word):
          split_words += 1
  assert words_with_pieces > 100 and split_words == 0


def test_same_seed_same_bytes_whatever_the_workers(english, tmp_path):
  vocab_file, _, corpus = english
  paths = [tmp_path / f"{k}.tfrecord" for k in ("a", "b", "c")]
  _prepare(corpus, vocab_file, paths[0], num_workers=1)
  _prepare(corpus, vocab_file, paths[1], num_workers=2)
  _prepare(corpus, vocab_file, paths[2], random_seed=6)
  assert paths[0].read_bytes() == paths[1].read_bytes()
  assert paths[0].read_bytes() != paths[2].read_bytes()


def test_chinese_whole_word_masking_follows_jieba(tmp_path):
  import jieba
  sentences = ["我们今天去北京大学参观", "中华人民共和国成立了", "这本书的内容非常精彩",
               "经济发展速度很快", "他喜欢在图书馆看书"]
  rng = random.Random(1)
  corpus = tmp_path / "zh.txt"
  corpus.write_text("\n\n".join("\n".join(rng.choice(sentences) for _ in range(6))
                                for _ in range(150)) + "\n")
  chars = sorted({c for s in sentences for c in s})
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(SPECIAL + chars) + "\n")
  _prepare(str(corpus), str(vocab_file), tmp_path / "zh.tfrecord",
           do_whole_word_mask=True, chinese_word_segmenter="jieba",
           max_seq_length=48, max_predictions_per_seq=20)
  data = _read(str(tmp_path / "zh.tfrecord"), 48, 20)
  vocab = SPECIAL + chars
  jieba_words = {w for s in sentences for w in jieba.lcut(s) if len(w) > 1}
  masked_multi = 0
  for i in range(len(data["input_ids"])):
    original = data["input_ids"][i].copy()
    positions = data["masked_lm_positions"][i][data["masked_lm_weights"][i] > 0]
    original[positions] = data["masked_lm_ids"][i][:len(positions)]
    # One character per token ([CLS]/[SEP] -> "|"): text index = position.
    text = "".join(vocab[t] if len(vocab[t]) == 1 else "|"
                   for t in original[:data["input_mask"][i].sum()])
    chosen = set(positions.tolist())
    # Every jieba word (as it sits in the text) is all masked or not at all.
    for word in jieba_words:
      start = text.find(word)
      while start >= 0:
        span = set(range(start, start + len(word)))
        hit = len(span & chosen)
        assert hit in (0, len(word)), (text, word)
        masked_multi += hit == len(word)
        start = text.find(word, start + 1)
  assert masked_multi > 50


# model_type: (separators between A and B, B has type ids 1, the mark a
# word's first token starts with in its vocabulary).
FAMILY_LAYOUTS = {"xlm-roberta": (2, False, "\u2581"),
                  "albert": (1, True, "\u2581"),
                  "deberta-v2": (1, True, "\u2581"),
                  "roberta": (2, False, "\u0120")}


def _untruncated_lines(family):
  """({ids: text} of the fixture's one-line texts whose fast-tokenizer ids
  (special tokens left out) fit its length (no Unigram tie: "9,000"),
  (cls, sep, pad) ids as the fast tokenizer writes them)."""
  golden = family_fixtures.golden_ids(family)
  found = {}
  for text, ids in zip(golden["texts"], golden["ids"]["single"]):
    n = sum(ids["attention_mask"])
    if (n < golden["seq"] and text.strip() == text and text and
        "\t" not in text and "\n" not in text and
        ("9,000" not in text or family == "roberta")):
      found[tuple(ids["input_ids"][1:n - 1])] = text
  first = golden["ids"]["single"][0]          # padded: cls ... sep pad ...
  n = sum(first["attention_mask"])
  assert n < golden["seq"]
  return found, (first["input_ids"][0], first["input_ids"][n - 1],
                 first["input_ids"][n])


def _split_pair(original, cls, sep, separators, lines):
  """(A, B) of `cls A sep*k B sep` where A and B are lines' ids, else None."""
  if original[0] != cls or original[-1] != sep:
    return None
  for a in lines:
    middle = 1 + len(a)
    if (tuple(original[1:middle]) == a and
        list(original[middle:middle + separators]) == [sep] * separators and
        tuple(original[middle + separators:-1]) in lines):
      return a, tuple(original[middle + separators:-1])
  return None


@pytest.mark.parametrize("family", sorted(FAMILY_LAYOUTS))
def test_a_family_tokenizers_records_hold_its_fast_tokenizers_ids(
    family, tmp_path):
  """`prepare pretraining --tokenizer=FOLDER`: every instance is the
  family's `cls A sep (sep) B sep` of two corpus lines in the Hugging Face
  fast tokenizer's ids, padded with its pad id, B's type ids as the family
  has them; masked positions show the family's mask token and whole-word
  masking keeps each word (a first token with the word-start mark, and the
  tokens after it) whole."""
  separators, typed, mark = FAMILY_LAYOUTS[family]
  lines, (cls, sep, pad) = _untruncated_lines(family)
  assert len(lines) >= 4
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n\n".join(lines.values()) + "\n", encoding="utf-8")
  out = tmp_path / "pre.tfrecord"
  assert cli.main(["prepare", "pretraining", f"--input_file={corpus}",
                   f"--output_file={out}",
                   f"--tokenizer={family_fixtures.tokenizer_folder(family)}",
                   "--max_seq_length=56", "--max_predictions_per_seq=12",
                   "--dupe_factor=40", "--do_whole_word_mask",
                   "--num_workers=1"]) == 0
  meta = json.loads(open(pretraining.meta_path(str(out))).read())
  tokenizer = tokenizers.from_meta(meta, meta["vocab_file"])
  assert meta["tokenizer_family"] == family
  assert meta["vocab_size"] == len(tokenizer.vocab)
  mask = tokenizer.token_to_id[tokenizer.mask_token]
  starts_word = np.array([t.startswith(mark) for t in tokenizer.vocab])
  data = _read(str(out), 56, 12)
  shown = []
  words_with_pieces = 0
  for i in range(len(data["input_ids"])):
    n = data["input_mask"][i].sum()
    real = data["masked_lm_weights"][i] > 0
    positions = data["masked_lm_positions"][i][real]
    original = data["input_ids"][i].copy()
    original[positions] = data["masked_lm_ids"][i][real]
    pair = _split_pair(original[:n], cls, sep, separators, lines)
    assert pair, (family, original[:n].tolist())
    assert (data["input_ids"][i][n:] == pad).all()
    b_start = n - 1 - len(pair[1])
    types = np.zeros(56, np.int64)
    if typed:
      types[b_start:n] = 1
    np.testing.assert_array_equal(data["segment_ids"][i], types)
    assert not np.isin(positions, [0, n - 1]).any()
    shown.extend(data["input_ids"][i][positions] == mask)
    # Words: a token with the mark (or a text's first) starts one.
    a_start = 1
    chosen = set(positions.tolist())
    for text_start, ids in ((a_start, pair[0]), (b_start, pair[1])):
      bounds = [text_start + j for j, t in enumerate(ids)
                if j == 0 or starts_word[t]] + [text_start + len(ids)]
      for s_, e in zip(bounds, bounds[1:]):
        hit = len(chosen & set(range(s_, e)))
        assert hit in (0, e - s_), (family, ids, s_, e, sorted(chosen))
        words_with_pieces += e - s_ > 1 and hit > 0
  assert 0.7 < np.mean(shown) < 0.9 and words_with_pieces > 20


def test_a_jieba_segmenter_with_a_sentencepiece_tokenizer_is_refused(
    tmp_path):
  corpus = tmp_path / "zh.txt"
  corpus.write_text("我们今天去北京大学参观\n", encoding="utf-8")
  settings = tokenizers.folder_settings(
      family_fixtures.tokenizer_folder("albert"))
  options = pretraining.Options(vocab_file=settings["vocab_file"],
                                tokenizer_family="albert",
                                chinese_word_segmenter="jieba")
  with pytest.raises(ValueError, match="needs a WordPiece vocabulary; the "
                     "albert tokenizer"):
    pretraining.prepare_pretraining(
        input_files=str(corpus), output_file=str(tmp_path / "zh.tfrecord"),
        options=options, progress=False)
  assert not list(tmp_path.glob("zh.tfrecord*"))


@pytest.mark.parametrize("case,message", [
    ("empty", "empty.txt: no text"),
    ("no_mask", "no \\[MASK\\] token"),
    ("short", "max_seq_length 4 leaves no room"),
])
def test_bad_input_is_a_clear_error(english, tmp_path, case, message):
  vocab_file, tokens, corpus = english
  out = tmp_path / "bad.tfrecord"
  if case == "empty":
    corpus = str(tmp_path / "empty.txt")
    open(corpus, "w").write("\n\n   \n")
  if case == "no_mask":
    vocab_file = str(tmp_path / "nomask.txt")
    open(vocab_file, "w").write("\n".join(t for t in tokens if t != "[MASK]"))
  options = {"max_seq_length": 4} if case == "short" else {}
  with pytest.raises(ValueError, match=message):
    _prepare(corpus, vocab_file, out, **options)
  assert not list(tmp_path.glob("bad*"))           # nothing half-written


def test_build_vocab_reserved_first_deterministic_cjk(tmp_path):
  corpus = tmp_path / "c.txt"
  corpus.write_text(("The running movies were wonderful. 我们去北京。\n" * 50) +
                    "Unbelievable plots!\n" * 20)
  a = vocab_lib.build_vocab(str(corpus), 200, str(tmp_path / "a.txt"), chinese=True)
  b = vocab_lib.build_vocab(str(corpus), 200, str(tmp_path / "b.txt"), chinese=True)
  assert a == b and (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
  assert a[:5] == SPECIAL
  for ch in "我们去北京":
    assert ch in a and "##" + ch not in a
  assert "the" in a and len(a) == len(set(a))
  # The CLI: an empty corpus is an error naming it.
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n")
  assert cli.main(["build-vocab", f"--input_file={empty}", "--vocab_size=100",
                   f"--output={tmp_path}/v.txt"]) == 2
  assert not (tmp_path / "v.txt").exists()


class _Terminal(io.StringIO):
  def isatty(self):
    return True


@pytest.mark.parametrize("stream, expected", [
    (io.StringIO(), "prepare pretraining: 1.0/2.0 MB, 5 instances, {r}\n"
                    "prepare pretraining: 2.0/2.0 MB, 1,200 instances, {r}\n"),
    (_Terminal(), "\rprepare pretraining: 1.0/2.0 MB, 5 instances, {r}"
                  "\rprepare pretraining: 2.0/2.0 MB, 1,200 instances, {r}\n")])
def test_progress_lines_are_whole_lines_unless_on_a_terminal(stream,
                                                             expected):
  """In a log file or a pipe each update is a line of its own (carriage
  returns ran them into one line); a terminal keeps one line rewritten."""
  progress = pretraining.Progress(2e6, stream=stream, log_seconds=0)
  progress.update(1e6, 5)
  progress.update(2e6, 1200, final=True)
  written = re.sub(r"\d+\.\d\d MB/s", "{r}", stream.getvalue())
  assert written == expected
