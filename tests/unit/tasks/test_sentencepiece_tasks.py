"""SQuAD and tagging windows with the SentencePiece families' tokenizers
(XLM-RoBERTa, ALBERT, DeBERTa-v3) and RoBERTa's byte-level BPE
against the Hugging Face fast tokenizer's
own reading (tests/golden/tokenizers/<family>/ids.json, "task_ids", made by
tools/make_tokenizer_fixtures.py): run_ner's words (is_split_into_words) and
run_qa's question + whole context with offsets. Checked: ids, token types,
which piece starts each word, the answer's piece span, and the answer text
that --mode=predict and the exported serve_text recover from it."""
import json
import os

import pytest
import tensorflow as tf

from bertexp.model.encoders import tokenizers
from bertexp.tasks.squad import answers as squad_answers
from bertexp.tasks.squad import data as squad_data
from bertexp.tasks.squad import serving as squad_serving
from bertexp.tasks.tagging import data as tagging_data
from bertexp.tasks.tagging import formats as tagging_formats
from bertexp.tasks.tagging import serving as tagging_serving
from conftest import REPO

GOLDEN = os.path.join(REPO, "tests", "golden", "tokenizers")
FAMILIES = ("xlm-roberta", "albert", "deberta-v2")
# With RoBERTa's byte-level BPE: a tagged word read with a space before it
# (run_ner's add_prefix_space), a context word with the whitespace before it.
ALL_FAMILIES = FAMILIES + ("roberta",)
SEQ = 64
SPAN_SPEC = {"max_seq_length": SEQ, "max_query_length": 32, "n_best_size": 20,
             "max_answer_length": 30, "version_2_with_negative": False,
             "null_score_diff_threshold": 0.0}


def _golden(family):
  folder = os.path.join(GOLDEN, family)
  with open(os.path.join(folder, "ids.json"), encoding="utf-8") as f:
    golden = json.load(f)
  return tokenizers.load(**tokenizers.folder_settings(folder)), golden


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_tagging_windows_hold_the_fast_tokenizers_pieces_of_each_word(family):
  tokenizer, golden = _golden(family)
  encoder = tagging_data.SentenceEncoder(tokenizer, ["O"], "NONE", SEQ, 31)
  sentences = [tagging_formats.Sentence(words, None, [1] * len(words), "x")
               for words in golden["word_sentences"]]
  for sentence, words, want in zip(sentences, encoder.word_pieces(sentences),
                                   golden["task_ids"]["words"]):
    [window] = encoder.encode(0, words, None)
    n = len(want["input_ids"])
    assert window["input_word_ids"][:n] == want["input_ids"], sentence.tokens
    assert sum(window["input_mask"]) == n
    # Each word's label sits on its first piece, as run_ner labels it.
    first_pieces = [i for i, w in enumerate(want["word_ids"])
                    if w is not None and want["word_ids"][i - 1] != w]
    labelled = [i for i, w in enumerate(window["word_index"]) if w]
    assert labelled == first_pieces
    assert [window["word_index"][i] - 1 for i in labelled] == list(
        range(len(sentence.tokens)))


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_tagging_serve_text_cuts_words_into_prepare_s_pieces(family):
  """serve_text's words (split at spaces and punctuation) get the pieces
  prepare gave the same words."""
  tokenizer, golden = _golden(family)
  sentences = golden["word_sentences"][:2]       # words as serving splits them
  encoder = tagging_data.SentenceEncoder(tokenizer, ["O"], "NONE", SEQ, 31)
  prepared = encoder.word_pieces([tagging_formats.Sentence(
      words, None, [1] * len(words), "x") for words in sentences])
  serving = tagging_serving.TaggingServing(
      None, vocab_file=tokenizer.vocab_file,
      do_lower_case=tokenizer.do_lower_case, max_seq_length=SEQ,
      doc_stride=31, label_names=["O"], scheme="NONE",
      tokenizer_family=family,
      keep_accents=getattr(tokenizer, "keep_accents", False))
  words, _, _, pieces = serving._word_pieces(  # pylint: disable=protected-access
      tf.constant([" ".join(words) for words in sentences]))
  assert [[w.decode() for w in row] for row in words.to_list()] == sentences
  assert pieces.to_list() == [[ids.tolist() for ids in row]
                              for row in prepared]


def _run_qa_span(want, answer_start, answer_end):
  """The answer's first and last pieces as run_qa (transformers' question
  answering example) finds them from the offsets: from the context's
  first piece, on while a piece starts at or before the answer; from its
  last, back while a piece ends at or after the answer's end."""
  offsets, ids = want["offsets"], want["input_ids"]
  first = ids.index(ids[-1]) + 1                 # after the question's </s>
  while ids[first] == ids[-1]:                   # RoBERTa's </s></s>
    first += 1
  start = first
  while start < len(ids) - 1 and offsets[start][0] <= answer_start:
    start += 1
  end = len(ids) - 2
  while end >= first and offsets[end][1] >= answer_end:
    end -= 1
  return start - 1, end + 1


def _whole_characters(offsets, start, end):
  """The span widened over the pieces that share its first and last
  characters' offsets (the other bytes of a character)."""
  while offsets[start - 1] == offsets[start]:
    start -= 1
  while offsets[end + 1] == offsets[end]:
    end += 1
  return start, end


def _squad_feature(tmp_path, tokenizer, question, context, answer,
                   answer_start):
  """The one training window of a SQuAD file holding this question."""
  path = str(tmp_path / "squad.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump({"data": [{"paragraphs": [{"context": context, "qas": [{
        "id": "q", "question": question, "answers": [
            {"text": answer, "answer_start": answer_start}]}]}]}]}, f)
  [example], _ = squad_data.read_examples(path, is_training=True,
                                          version_2_with_negative=False)
  [feature] = squad_data.convert_examples(
      [example], tokenizer, max_seq_length=SEQ, doc_stride=32,
      max_query_length=32, is_training=True)
  return example, feature


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_squad_windows_equal_the_fast_tokenizers_question_and_context(
    family, tmp_path):
  tokenizer, golden = _golden(family)
  for (question, context, answer, answer_start), want in zip(
      golden["qa"], golden["task_ids"]["qa"]):
    example, feature = _squad_feature(tmp_path, tokenizer, question, context,
                                      answer, answer_start)
    n = len(want["input_ids"])
    assert feature.input_word_ids[:n] == want["input_ids"], question
    assert feature.input_type_ids[:n] == want["token_type_ids"], question
    assert sum(feature.input_mask) == n
    # The labelled span is run_qa's (byte-level BPE: widened to whole
    # characters, where run_qa cuts a CJK character's bytes).
    span = _run_qa_span(want, answer_start, answer_start + len(answer))
    if family == "roberta":
      span = _whole_characters(want["offsets"], *span)
    assert (feature.start_position, feature.end_position) == span
    # --mode=predict's text for that span is the answer.
    pieces = [tokenizer.vocab[i] for i in feature.input_word_ids[
        feature.start_position:feature.end_position + 1]]
    words = example.doc_tokens[feature.token_to_word[feature.start_position]:
                               feature.token_to_word[feature.end_position] + 1]
    assert squad_answers.final_text(
        tokenizer.pieces_text(pieces), " ".join(words),
        tokenizer.do_lower_case, tokenizer.splits_punctuation) == answer


class _PeakAtPositions:
  """Span logits [1, S, 2] peaking at fixed sequence positions (a stand-in
  for a trained span head)."""

  def __init__(self, start, end):
    self.start, self.end = start, end

  def __call__(self, inputs, training=False):
    del training
    seq = tf.shape(inputs["input_word_ids"])[1]
    peak = lambda p: 10.0 * tf.one_hot([p], seq)                       # [1, S]
    return tf.stack([peak(self.start), peak(self.end)], axis=-1)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_serve_text_cuts_the_answer_from_the_context_in_the_graph(
    family, tmp_path):
  tokenizer, golden = _golden(family)
  for question, context, answer, answer_start in golden["qa"]:
    _, feature = _squad_feature(tmp_path, tokenizer, question, context,
                                answer, answer_start)
    model = _PeakAtPositions(feature.start_position, feature.end_position)
    out = squad_serving.answer(tokenizer, model, SPAN_SPEC,
                               tf.constant([question]), tf.constant([context]))
    assert out["answer"].numpy()[0].decode() == answer, (family, question)
    assert out["score"].numpy()[0] == pytest.approx(20.0)
