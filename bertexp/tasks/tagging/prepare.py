"""`bertexp prepare tagging`: tagged tokens (NER, POS) in CoNLL, CoNLL-U,
JSONL or People's Daily -> word-piece windows as TFRecords + meta data (see
bertexp.tasks.tagging.data)."""
from bertexp.tasks import prepare_command


def _arguments(parser):
  parser.add_argument("--format", required=True,
                      choices=["conll", "conllu", "jsonl", "peoples_daily"])
  parser.add_argument("--train_file", required=True)
  parser.add_argument("--eval_file")
  parser.add_argument("--test_file")
  parser.add_argument("--task_name", required=True)
  parser.add_argument("--scheme", default="BIO",
                      help="what the task trains in: BIO, BIOES, or NONE for "
                      "plain tags (POS)")
  parser.add_argument("--input_scheme",
                      help="the files' scheme when it differs (IOB1, BIO, "
                      "BIOES)")
  parser.add_argument("--labels", help="entity types (NONE: tags) in order; "
                      "default: the training file's, sorted")
  parser.add_argument("--token_column", type=int, default=0,
                      help="CoNLL: the token's column (0-based)")
  parser.add_argument("--tag_column", type=int, default=-1,
                      help="CoNLL: the tag's column (-1: the last)")
  parser.add_argument("--no_tags", action="store_true",
                      help="CoNLL: the files have no tag column (to predict)")
  parser.add_argument("--doc_stride", type=int,
                      help="pieces between the starts of a long sentence's "
                      "windows (default: half a window)")


def _run(args):
  from bertexp.tasks.tagging import data as tagging
  files = [("train", args.train_file)] + [
      (name, path) for name, path in (("eval", args.eval_file),
                                      ("test", args.test_file)) if path]
  meta = tagging.prepare_tagging(
      task_name=args.task_name, files=files, file_format=args.format,
      scheme=args.scheme, input_scheme=args.input_scheme,
      labels=args.labels.split(",") if args.labels else None,
      doc_stride=args.doc_stride, token_column=args.token_column,
      tag_column=None if args.no_tags else args.tag_column,
      **prepare_command.text_options(args))
  print(f"prepared {meta['task']}: {meta['sentence_counts']} sentences -> "
        f"{meta['split_sizes']} windows ({meta['sentences_split_into_windows']}"
        f" split); {meta['num_labels']} labels: "
        f"{','.join(meta['label_names'])}", flush=True)


COMMANDS = (prepare_command.PrepareCommand(
    name="tagging", help="tagged tokens (NER, POS): CoNLL, CoNLL-U, JSONL, "
    "People's Daily", add_arguments=_arguments, run=_run),)
