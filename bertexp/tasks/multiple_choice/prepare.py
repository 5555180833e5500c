"""`bertexp prepare multiple_choice`: a context and N candidate endings with
one correct (SWAG, RACE, COPA layouts) -> TFRecords + meta data.

Files are JSONL (`{"context": "...", "choices": ["...", ...], "label": 2}`)
or CSV/TSV with one column per choice (`--choice_columns=ending0,ending1,...`,
SWAG's layout; JSONL files of the same command read `--choices_column`). With `--question_column` each choice is read as
"question choice" (RACE: the passage is the context). The label is the
correct choice's index (0-based), its text (as in the file, without the
question) or its letter (A, B, ...: RACE).

Each example becomes N packed sequences `[CLS] context [SEP] choice [SEP]`
(the tokenizer's pair layout and longest-first truncation, as `prepare
classification` packs pairs),
stored flattened: int features of N * max_seq_length.
"""
import csv
import io
import os

from bertexp.tasks import prepare_command

TEXT_FEATURES = ("input_word_ids", "input_mask", "input_type_ids")


def read_examples(path, *, context_column, choices_column, choice_columns,
                  question_column, label_column, id_column):
  """[(id, context, [choice texts], label index or None)] of a file.

  Raises:
    ValueError: a malformed file, a missing field, choices of another count
      than the first example's, or a label that is no choice (naming
      path:line).
  """
  from bertexp.data import readers
  from bertexp.util import fileio
  jsonl = path.lower().endswith((".jsonl", ".json"))
  if jsonl:
    rows = [(number, record) for number, record in readers.json_lines(path)]
    for number, record in rows:
      if not isinstance(record, dict):
        raise ValueError(f"{path}:{number}: expected a JSON object")
  else:
    if not choice_columns:
      raise ValueError(f"{path}: a CSV/TSV file needs --choice_columns")
    delimiter = "\t" if path.lower().endswith(".tsv") else ","
    text = fileio.read_text(path).lstrip("\ufeff")
    reader = csv.DictReader(io.StringIO(text, newline=""),
                            delimiter=delimiter)
    rows = [(reader.line_num, record) for record in reader]
  examples, count = [], None
  for number, record in rows:
    where = f"{path}:{number}"
    choices = _choices(record, choices_column,
                       None if jsonl else choice_columns, where)
    if count is None:
      count = len(choices)
    if len(choices) != count or count < 2:
      raise ValueError(f"{where}: {len(choices)} choices; every example "
                       f"needs the same number (at least 2; the first has "
                       f"{count})")
    label = None      # a label given as text names the choice as written
    if label_column and record.get(label_column) not in (None, ""):
      label = _label(record[label_column], choices, where)
    question = _field(record, question_column, where) if question_column else ""
    choices = [f"{question} {c}".strip() if question else c for c in choices]
    example_id = str(record.get(id_column, len(examples)))
    examples.append((example_id, _field(record, context_column, where),
                     choices, label))
  if not examples:
    raise ValueError(f"{path}: no examples")
  return examples


def _field(record, name, where):
  if name not in record or not isinstance(record[name], str):
    raise ValueError(f"{where}: expected a text field {name!r}")
  return record[name]


def _choices(record, choices_column, choice_columns, where):
  if choice_columns:
    return [_field(record, name, where) for name in choice_columns]
  choices = record.get(choices_column)
  if not isinstance(choices, list) or not all(
      isinstance(c, str) for c in choices):
    raise ValueError(f"{where}: expected {choices_column!r} to be a list of "
                     "texts")
  return choices


def _label(value, choices, where):
  """The correct choice's index from an index (int or digits), its text, or
  its letter (A for the first choice: RACE's answers)."""
  if isinstance(value, str) and value.strip().lstrip("-").isdigit():
    value = int(value)
  if isinstance(value, int) and not isinstance(value, bool):
    if 0 <= value < len(choices):
      return value
  elif isinstance(value, str) and value in choices:
    return choices.index(value)
  elif isinstance(value, str) and value.strip() in _letters(len(choices)):
    return _letters(len(choices)).index(value.strip())
  raise ValueError(f"{where}: label {value!r} is neither a choice index "
                   f"0-{len(choices) - 1}, a letter "
                   f"A-{_letters(len(choices))[-1]} nor one of the choices")


def _letters(count):
  """The choices' letters: A, B, ... (RACE's answer column)."""
  return [chr(ord("A") + i) for i in range(min(count, 26))]


def encode(tokenizer, examples, max_seq_length):
  """({feature: [n, N * S] int32}, truncated sequences) of the examples."""
  import numpy as np
  from bertexp.data import tokenization
  count = len(examples[0][2])
  contexts = [c for _, context, choices, _ in examples
              for c in [context] * count]
  endings = [c for _, _, choices, _ in examples for c in choices]
  packed, truncated = tokenization.pack(
      tokenizer, tokenizer.tokenize(contexts), tokenizer.tokenize(endings),
      max_seq_length)
  return {name: np.asarray(packed[name]).reshape(len(examples), -1)
          for name in TEXT_FEATURES}, truncated


def prepare_multiple_choice(*, task_name, files, vocab_file, output_dir,
                            max_seq_length, do_lower_case=True,
                            max_position_embeddings=None,
                            tokenizer_family=None, keep_accents=False,
                            **columns):
  """Writes <task>_<split>.tf_record per (split, path) of `files` and
  <task>_meta_data; returns the meta data. tokenizer_family, keep_accents:
  a SentencePiece tokenizer's (see tokenization.load); its pair layout packs
  each (context, choice).

  Raises:
    ValueError: see read_examples; a training or evaluation file without
      labels; max_seq_length above max_position_embeddings.
  """
  import numpy as np
  from bertexp.data import records
  from bertexp.data import tokenization
  from bertexp.model.encoders import tokenizers
  from bertexp.data import windows
  from bertexp.util import fileio
  windows.check_lengths(max_seq_length, max_position_embeddings, None)
  tokenizer = tokenizers.load(vocab_file, do_lower_case, tokenizer_family,
                                keep_accents)
  meta = {"task": task_name, "max_seq_length": max_seq_length,
          "label_type": "int", "vocab_file": os.path.abspath(vocab_file),
          "do_lower_case": do_lower_case, "vocab_size": len(tokenizer.vocab),
          "split_sizes": {}, "truncated_sequences": {},
          **tokenization.meta_fields(tokenizer_family, keep_accents)}
  splits = []           # every file read and checked before any is written
  for split, path in files:
    examples = read_examples(path, **columns)
    count = len(examples[0][2])
    if meta.setdefault("num_choices", count) != count:
      raise ValueError(f"{path}: {count} choices per example, the "
                       f"{files[0][0]} file has {meta['num_choices']}")
    labels = [label for _, _, _, label in examples]
    if split != "test" and None in labels:
      raise ValueError(f"{path}: the {split} file needs a label for every "
                       f"example ({columns['label_column']!r})")
    splits.append((split, examples, labels))
  fileio.makedirs(output_dir)
  for split, examples, labels in splits:
    features, truncated = encode(tokenizer, examples, max_seq_length)
    features["label_ids"] = np.array([-1 if l is None else l for l in labels])
    features["example_id"] = np.arange(len(examples))
    writer = records.RecordWriter(fileio.join(
        output_dir, f"{task_name}_{split}.tf_record"))
    writer.write_batch(features)
    writer.commit()
    fileio.write_text(fileio.join(output_dir, f"{task_name}_{split}_ids.txt"),
                      "".join(f"{i}\n" for i, _, _, _ in examples))
    meta["split_sizes"][split] = len(examples)
    meta["truncated_sequences"][split] = truncated
  fileio.write_json(fileio.join(output_dir, f"{task_name}_meta_data"), meta)
  return meta


def _arguments(parser):
  parser.add_argument("--train_file", required=True)
  parser.add_argument("--eval_file", required=True)
  parser.add_argument("--test_file")
  parser.add_argument("--task_name", required=True)
  parser.add_argument("--context_column", default="context")
  parser.add_argument("--choices_column", default="choices",
                      help="JSONL: the list of candidate texts")
  parser.add_argument("--choice_columns",
                      help="CSV/TSV: the choices' columns, comma separated "
                      "(SWAG: ending0,ending1,ending2,ending3)")
  parser.add_argument("--question_column",
                      help="each choice is read as 'question choice' (RACE)")
  parser.add_argument("--label_column", default="label",
                      help="the correct choice's index (0-based), text or "
                      "letter (A, B, ...)")
  parser.add_argument("--id_column")


def _run(args):
  files = [("train", args.train_file), ("eval", args.eval_file)] + (
      [("test", args.test_file)] if args.test_file else [])
  meta = prepare_multiple_choice(
      task_name=args.task_name, files=files,
      context_column=args.context_column, choices_column=args.choices_column,
      choice_columns=([c.strip() for c in args.choice_columns.split(",")]
                      if args.choice_columns else None),
      question_column=args.question_column, label_column=args.label_column,
      id_column=args.id_column,
      **prepare_command.text_options(args))
  print(f"prepared {meta['task']}: {meta['split_sizes']} examples of "
        f"{meta['num_choices']} choices, truncated sequences "
        f"{meta['truncated_sequences']}", flush=True)


COMMANDS = (prepare_command.PrepareCommand(
    name="multiple_choice", help="a context and N candidate endings, one "
    "correct (SWAG, RACE): JSONL, CSV, TSV", add_arguments=_arguments,
    run=_run),)
