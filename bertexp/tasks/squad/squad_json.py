"""SQuAD's JSON files read with their structure checked: the dataset (as the
official evaluation scripts read it), predictions ({question id: answer
text}) and null odds ({question id: number}). A file that is not what it
should be is a ValueError naming the file and the field.
"""
from bertexp.util import fileio


def json_objects(value, where):
  """`value` if it is a list of JSON objects, else a clear error."""
  if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
    raise ValueError(f"{where}: expected a list of JSON objects")
  return value


def _check_dataset(path, value):
  """The structure the official script reads, or a clear error."""
  if not isinstance(value, dict) or not isinstance(value.get("data"), list):
    raise ValueError(f"{path}: not a SQuAD dataset (no top-level 'data' list)")
  for a, article in enumerate(json_objects(value["data"], f"{path}: data")):
    where = f"{path}: data[{a}].paragraphs"
    for p, paragraph in enumerate(json_objects(article.get("paragraphs", []),
                                           where)):
      for q, qa in enumerate(json_objects(paragraph.get("qas", []),
                                      f"{where}[{p}].qas")):
        at = f"{where}[{p}].qas[{q}]"
        if not isinstance(qa.get("id"), str):
          raise ValueError(f"{at}: needs an 'id' string")
        if "answers" not in qa:
          raise ValueError(f"{at} has no 'answers'")
        answers = json_objects(qa["answers"], f"{at}.answers")
        if not all(isinstance(answer.get("text"), str) for answer in answers):
          raise ValueError(f"{at}.answers: each needs a 'text' string")


def load_json(path, what):
  """A SQuAD JSON file, checked.

  Args:
    path: the file.
    what: "dataset", "predictions", "null odds" or "n-best"
      ({question id: [{"text": answer, ...}, ...]}, as predict writes it).
  Returns:
    The parsed JSON value.
  Raises:
    ValueError: the file does not hold what `what` says, with the field.
  """
  value = fileio.read_json(path)
  if what == "dataset":
    _check_dataset(path, value)
  elif what == "n-best":
    _check_nbest(path, value)
  elif not isinstance(value, dict) or not all(
      isinstance(v, str if what == "predictions" else (float, int)) and
      not isinstance(v, bool) for v in value.values()):
    raise ValueError(f"{path}: expected a JSON object of question id -> "
                     f"{'answer text' if what == 'predictions' else 'number'}")
  return value


def _check_nbest(path, value):
  """{question id: [{"text": str, ...}, ...]}, or a clear error."""
  if not isinstance(value, dict):
    raise ValueError(f"{path}: expected a JSON object of question id -> list "
                     "of candidate answers")
  for qid, candidates in value.items():
    for candidate in json_objects(candidates, f"{path}: {qid!r}"):
      if not isinstance(candidate.get("text"), str):
        raise ValueError(f"{path}: {qid!r}: each candidate needs a 'text' "
                         "string")
