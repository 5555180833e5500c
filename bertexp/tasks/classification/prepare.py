"""`bertexp prepare glue` and `bertexp prepare classification`: labelled
text (a GLUE folder, or any TSV/CSV/JSONL) -> TFRecords + meta data (see
bertexp.tasks.classification.data)."""
from bertexp.tasks import prepare_command


def _glue_arguments(parser):
  parser.add_argument("--task", required=True)
  parser.add_argument("--input_dir", required=True)


def _run_glue(args):
  from bertexp.tasks.classification import data as prepare
  _report(prepare.prepare_glue(args.task, input_dir=args.input_dir,
                               **prepare_command.text_options(args)))


def _classification_arguments(parser):
  parser.add_argument("--train_file", required=True)
  parser.add_argument("--eval_file", help="required with --label_column")
  parser.add_argument("--test_file")
  parser.add_argument("--text_columns", required=True,
                      help="one or two column names, comma separated")
  parser.add_argument("--label_column",
                      help="omit for unlabelled text (a distillation teacher "
                      "labels it; --labels names the teacher's labels)")
  parser.add_argument("--id_column")
  parser.add_argument("--folds", type=int,
                      help="also k-fold splits of the training file "
                      "(stratified by label) for `bertexp sweep --folds`")
  parser.add_argument("--fold_seed", type=int, default=12345,
                      help="the seed of the fold assignment")
  parser.add_argument("--doc_stride", type=int,
                      help="long texts become windows this many pieces apart "
                      "(single texts); eval and predict pool each document's "
                      "windows (bertexp.ClassificationTask.window_pooling)")
  labels = parser.add_mutually_exclusive_group()
  labels.add_argument("--labels", help="label names in id order")
  labels.add_argument("--regression", action="store_true")
  parser.add_argument("--task_name", required=True)


def _run_classification(args):
  from bertexp.tasks.classification import data as prepare
  _report(prepare.prepare_classification(
      task_name=args.task_name, train_file=args.train_file,
      eval_file=args.eval_file, test_file=args.test_file,
      text_columns=[c.strip() for c in args.text_columns.split(",")],
      label_column=args.label_column,
      labels=args.labels.split(",") if args.labels else None,
      regression=args.regression, id_column=args.id_column,
      doc_stride=args.doc_stride, folds=args.folds, fold_seed=args.fold_seed,
      **prepare_command.text_options(args)))


def _report(meta):
  skipped = meta.get("skipped_malformed_rows")
  print(f"prepared {meta['task']}: {meta['split_sizes']} examples, "
        f"truncated {meta['truncated_examples']}" +
        (f", skipped malformed rows {skipped}" if skipped else ""), flush=True)


COMMANDS = (
    prepare_command.PrepareCommand(
        name="glue", help="a GLUE task folder", add_arguments=_glue_arguments,
        run=_run_glue),
    prepare_command.PrepareCommand(
        name="classification", help="any TSV/CSV/JSONL",
        add_arguments=_classification_arguments, run=_run_classification),
)
