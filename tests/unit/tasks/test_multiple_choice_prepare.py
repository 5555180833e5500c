"""`prepare multiple_choice`'s labels: an index, the choice's text as the
file writes it (also with --question_column, which prefixes each choice
with the question), or RACE's letters; a label that is none of them is a
one-line error naming the line."""
import json

import pytest

from bertexp.tasks.multiple_choice import prepare as mcp

RACE = {"article": "the plot is great .", "question": "the plot is",
        "options": ["dull", "bad", "great", "not good"]}


def _read(tmp_path, rows, question_column="question"):
  path = tmp_path / "race.jsonl"
  path.write_text("".join(json.dumps(row) + "\n" for row in rows))
  return mcp.read_examples(str(path), context_column="article",
                           choices_column="options", choice_columns=None,
                           question_column=question_column,
                           label_column="answer", id_column="id")


@pytest.mark.parametrize("answer", [2, "2", "great", "C"])
def test_index_text_and_letter_name_the_same_choice_with_a_question(
    tmp_path, answer):
  [(_, context, choices, label)] = _read(tmp_path, [dict(RACE, answer=answer)])
  assert label == 2
  assert choices[label] == "the plot is great"      # question + choice
  assert context == RACE["article"]


def test_a_choice_that_is_itself_a_letter_wins_over_the_letter(tmp_path):
  row = dict(RACE, options=["B", "A"], answer="A")
  [(_, _, _, label)] = _read(tmp_path, [row], question_column=None)
  assert label == 1


@pytest.mark.parametrize("answer, shown", [
    ("E", "'E'"), ("the plot is great", "'the plot is great'"), ("-1", "-1"),
    (4, "4")])
def test_a_label_that_names_no_choice_is_a_one_line_error(tmp_path, answer,
                                                         shown):
  with pytest.raises(ValueError) as error:
    _read(tmp_path, [dict(RACE, answer=0), dict(RACE, answer=answer)])
  assert str(error.value) == (
      f"{tmp_path}/race.jsonl:2: label {shown} is neither a choice index "
      "0-3, a letter A-D nor one of the choices")
