"""`bertexp prepare mean_pooled_sst2`: the plugin task's data command, as a
package declaring its tasks through the "bertexp.tasks" entry point ships
it (this file is its `prepare.py`): an SST-2 folder -> the records of
`bertexp prepare classification`, which MeanPooledClassificationTask reads."""
from bertexp.tasks import prepare_command


def _arguments(parser):
  parser.add_argument("--input_dir", required=True,
                      help="a GLUE SST-2 folder (train.tsv, dev.tsv, test.tsv)")


def _run(args):
  from bertexp.tasks.classification import data
  meta = data.prepare_glue("SST-2", input_dir=args.input_dir,
                           **prepare_command.text_options(args))
  print(f"mean_pooled_sst2: {meta['train_data_size']} training sentences "
        f"-> {args.output_dir}", flush=True)


COMMANDS = (prepare_command.PrepareCommand(
    name="mean_pooled_sst2", help="SST-2 -> records of the mean-pooled task",
    add_arguments=_arguments, run=_run, text_flags_default_length=16),)
