"""Entity tag schemes (bertexp.tasks.tagging.schemes) without a run: the
spans each scheme reads, the tags written back, the sequences each scheme
refuses (naming the file and line), and the tags of a word's later pieces.
The files that carry them (CoNLL, People's Daily...) are in
tests/e2e/test_tagging.py."""
import random

import pytest

from bertexp.tasks.tagging import schemes
from bertexp.tasks.tagging.schemes import Span


def _where(i):
  return f"train.txt:{10 + i}"


def _read(tags, scheme):
  return schemes.read_spans(tags.split(), scheme, _where)


@pytest.mark.parametrize("scheme,tags", [
    ("IOB1", "I-PER I-PER O I-LOC B-LOC O I-ORG"),
    ("BIO", "B-PER I-PER O B-LOC B-LOC O B-ORG"),
    ("BIOES", "B-PER E-PER O S-LOC S-LOC O S-ORG"),
])
def test_each_scheme_reads_the_same_entities(scheme, tags):
  """Two adjacent one-word LOC entities stay two in every scheme: IOB1 by
  B-LOC after I-LOC, BIO by a second B-LOC, BIOES by two S-LOC."""
  assert _read(tags, scheme) == [Span("PER", 0, 2), Span("LOC", 3, 4),
                                 Span("LOC", 4, 5), Span("ORG", 6, 7)]


def test_iob1_starts_an_entity_where_the_type_changes():
  assert _read("I-PER I-LOC I-LOC O", "IOB1") == [Span("PER", 0, 1),
                                                  Span("LOC", 1, 3)]


@pytest.mark.parametrize("scheme,tags,position,message", [
    ("BIO", "O I-PER", 1, "I-PER does not continue an entity of type PER"),
    ("BIO", "B-PER I-LOC", 1, "I-LOC does not continue an entity of type LOC"),
    ("BIO", "B-PER S-PER", 1, "'S-PER' is not O or B/I-TYPE"),
    ("BIO", "B-PER PER", 1, "'PER' is not O or B/I-TYPE"),
    ("IOB1", "I-PER E-PER", 1, "'E-PER' is not O or B/I-TYPE"),
    ("BIOES", "B-PER O", 1, "O after an entity that was not ended with E-PER"),
    ("BIOES", "B-PER B-LOC E-LOC", 1,
     "B-LOC inside an entity that was not ended with E-PER"),
    ("BIOES", "O B-PER I-PER", 2,
     "the sentence ends inside an entity not ended with E-PER"),
    ("BIOES", "S-PER E-PER", 1, "E-PER does not continue an entity"),
])
def test_a_sequence_the_scheme_forbids_names_the_file_and_line(
    scheme, tags, position, message):
  with pytest.raises(ValueError) as error:
    _read(tags, scheme)
  assert str(error.value).startswith(f"train.txt:{10 + position}: ")
  assert message in str(error.value)


def _random_spans(rng, length):
  """Non-overlapping spans of random types over `length` tokens, often
  adjacent and of the same type (what IOB1 and BIO must keep apart)."""
  spans, position = [], rng.randrange(3)
  while position < length:
    size = min(rng.randint(1, 3), length - position)
    spans.append(Span(rng.choice(["PER", "LOC"]), position,
                      position + size))
    position += size + rng.choice([0, 0, 1, 2])
  return spans


@pytest.mark.parametrize("scheme", schemes.TRAIN_SCHEMES)
def test_written_tags_read_back_as_the_same_spans(scheme):
  """Seeded (seed 7): 300 sentences of random spans."""
  rng = random.Random(7)
  for _ in range(300):
    length = rng.randint(1, 12)
    spans = _random_spans(rng, length)
    tags = schemes.write_tags(spans, length, scheme)
    assert len(tags) == length
    assert schemes.read_spans(tags, scheme, _where) == spans, (tags, spans)


def test_written_tags_follow_each_schemes_prefixes():
  spans = [Span("PER", 0, 3), Span("LOC", 3, 4), Span("LOC", 5, 7)]
  assert schemes.write_tags(spans, 8, "BIO") == [
      "B-PER", "I-PER", "I-PER", "B-LOC", "O", "B-LOC", "I-LOC", "O"]
  assert schemes.write_tags(spans, 8, "BIOES") == [
      "B-PER", "I-PER", "E-PER", "S-LOC", "O", "B-LOC", "E-LOC", "O"]


def test_scheme_names_and_label_order():
  assert schemes.check_scheme("iob2") == "BIO"
  assert schemes.check_scheme("IOBES") == "BIOES"
  assert schemes.check_scheme("iob1") == "IOB1"
  with pytest.raises(ValueError, match=r"unknown tag scheme 'IOB1'; expected "
                     r"one of \['BIO', 'BIOES'\]"):
    schemes.check_scheme("IOB1", schemes.TRAIN_SCHEMES)
  assert schemes.label_names(["PER", "LOC"], "BIO") == [
      "O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
  assert schemes.label_names(["PER"], "BIOES") == [
      "O", "B-PER", "I-PER", "E-PER", "S-PER"]


@pytest.mark.parametrize("scheme,tag,pieces,want", [
    # A word of three pieces: (first, middle, last).
    ("BIO", "B-PER", 3, ("B-PER", "I-PER", "I-PER")),
    ("BIO", "I-PER", 3, ("I-PER", "I-PER", "I-PER")),
    ("BIOES", "S-PER", 3, ("B-PER", "I-PER", "E-PER")),
    ("BIOES", "E-PER", 3, ("I-PER", "I-PER", "E-PER")),
    ("BIOES", "B-PER", 3, ("B-PER", "I-PER", "I-PER")),
    ("BIOES", "O", 3, ("O", "O", "O")),
    ("BIOES", "S-PER", 1, ("S-PER",)),
])
def test_a_words_pieces_continue_its_entity(scheme, tag, pieces, want):
  """Every piece labelled: the word's pieces, read as one sequence, are one
  entity that starts and ends where the word's own tag says."""
  tags = [schemes.first_piece_tag(tag, scheme, pieces == 1)] + [
      schemes.continuation_tag(tag, scheme, k == pieces - 1)
      for k in range(1, pieces)]
  assert tuple(tags) == want
