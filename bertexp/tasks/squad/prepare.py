"""`bertexp prepare squad`: a SQuAD v1.1 / v2.0 JSON file -> windows as
TFRecords + meta data (see bertexp.tasks.squad.data)."""
from bertexp.tasks import prepare_command


def _arguments(parser):
  parser.add_argument("--squad_file", required=True)
  parser.add_argument("--version_2_with_negative", action="store_true")
  parser.add_argument("--doc_stride", type=int, default=128,
                      help="tokens between the starts of a long context's "
                      "windows")
  parser.add_argument("--max_query_length", type=int, default=64,
                      help="question tokens kept (longer questions are cut)")
  parser.add_argument("--eval", action="store_true",
                      help="evaluation windows (no answer positions)")


def _run(args):
  from bertexp.tasks.squad import data as squad
  options = prepare_command.text_options(args)
  del options["max_position_embeddings"]   # not checked for SQuAD files
  meta = squad.prepare_squad(
      squad_file=args.squad_file,
      version_2_with_negative=args.version_2_with_negative,
      doc_stride=args.doc_stride, max_query_length=args.max_query_length,
      is_training=not args.eval, **options)
  print(f"prepared {meta['task']}: {meta['num_questions']} questions, "
        f"{meta.get('train_data_size', meta.get('eval_data_size'))} windows, "
        f"{meta['skipped_answer_not_found']} skipped (answer not found)",
        flush=True)


COMMANDS = (prepare_command.PrepareCommand(
    name="squad", help="a SQuAD v1.1 / v2.0 JSON file", add_arguments=_arguments,
    run=_run, text_flags_default_length=384),)
