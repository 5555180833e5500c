"""`bertexp prepare <kind>`: the subcommands a task declares for its data.

A task's folder `bertexp/tasks/<task>/` holds a module `prepare.py` that
defines `COMMANDS`, a tuple of PrepareCommand; the command line finds those
modules by their place (nothing registers itself on import) and adds one
`prepare` subcommand per command. These modules import nothing heavy at the top, so
`bertexp --help` stays fast: a command's `run` imports what it needs.

    COMMANDS = (PrepareCommand(
        name="my_task", help="my files -> TFRecords + meta data",
        add_arguments=_arguments, run=_run),)
"""
import argparse
import dataclasses
from typing import Any, Callable, Dict, Optional

PREPARE_MODULE = "prepare"


@dataclasses.dataclass(frozen=True)
class PrepareCommand:
  """One `bertexp prepare` subcommand.

  Attributes:
    name: the subcommand (`bertexp prepare <name>`).
    help: one line for `bertexp prepare --help`.
    add_arguments: adds the command's own flags to its parser.
    run: runs the command on the parsed flags (prints what it wrote).
    text_flags_default_length: None for a command with flags of its own
      only; else the command also takes the flags of every text-to-records
      command (--vocab_file or --tokenizer, --output_dir, --max_seq_length
      with this default, --no_lower_case, --bert_config_file), read back by
      `text_options(args)`.
  """
  name: str
  help: str
  add_arguments: Callable[[argparse.ArgumentParser], None]
  run: Callable[[argparse.Namespace], None]
  text_flags_default_length: Optional[int] = 128


def add_tokenizer_flags(parser):
  """--vocab_file or --tokenizer (one of them required) and
  --no_lower_case, read back by `tokenizer_options(args)`."""
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("--vocab_file", help="a WordPiece vocab.txt")
  source.add_argument(
      "--tokenizer", metavar="FOLDER",
      help="a Hugging Face (or converted) model folder: its config.json "
           "model_type picks the tokenizer (WordPiece vocab.txt; ALBERT's "
           "spiece.model, XLM-RoBERTa's sentencepiece.bpe.model, DeBERTa's "
           "spm.model; RoBERTa's vocab.json + merges.txt) and "
           "tokenizer_config.json its casing")
  parser.add_argument("--no_lower_case", action="store_true",
                      help="cased vocabularies")


def tokenizer_options(args) -> Dict[str, Any]:
  """vocab_file and do_lower_case of `add_tokenizer_flags`' flags; with a
  --tokenizer of another family than WordPiece also tokenizer_family and
  keep_accents (bertexp.data.tokenization.load's arguments).

  Raises:
    ValueError: --tokenizer names a folder the command cannot read (one
      line naming it).
  """
  options = dict(vocab_file=args.vocab_file,
                 do_lower_case=not args.no_lower_case)
  if getattr(args, "tokenizer", None):
    from bertexp.model.encoders import tokenizers
    settings = tokenizers.folder_settings(args.tokenizer)
    options.update(vocab_file=settings["vocab_file"],
                   do_lower_case=settings["do_lower_case"] and not
                   args.no_lower_case)
    if settings["family"] is not None:
      options.update(tokenizer_family=settings["family"],
                     keep_accents=settings["keep_accents"])
  return options


def add_text_flags(parser, default_length):
  """The flags every text-to-records command shares."""
  add_tokenizer_flags(parser)
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--max_seq_length", type=int, default=default_length,
                      help="tokens per example; longer text is cut")
  parser.add_argument("--bert_config_file",
                      help="checks max_seq_length against the model")


def text_options(args) -> Dict[str, Any]:
  """The shared flags as keyword arguments of the data/ prepare functions:
  vocab_file, output_dir, max_seq_length, do_lower_case and
  max_position_embeddings (from --bert_config_file, or None); with a
  SentencePiece --tokenizer also tokenizer_family and keep_accents.

  Args:
    args: the parsed flags.
  Raises:
    ValueError: --tokenizer names a folder the command cannot read (one
      line naming it).
  """
  positions = None
  if args.bert_config_file:
    from bertexp.model import encoders
    positions = encoders.read_config(
        args.bert_config_file).max_position_embeddings
  return dict(tokenizer_options(args), output_dir=args.output_dir,
              max_seq_length=args.max_seq_length,
              max_position_embeddings=positions)


def run_staged(command, args):
  """Runs `command` on `args`; a command with --output_dir writes into a
  folder aside, whose files move into --output_dir only when the command
  succeeds: a failure leaves --output_dir as it was (no new folder, no mix
  of old and new files).

  Args:
    command: a PrepareCommand.
    args: its parsed flags.
  """
  output_dir = getattr(args, "output_dir", None)
  if output_dir is None:
    return command.run(args)
  from bertexp.util import fileio
  with fileio.atomic_folder(output_dir) as staging:
    return command.run(argparse.Namespace(**dict(vars(args),
                                                 output_dir=staging)))


def discover():
  """Every PrepareCommand of the modules bertexp/tasks/<task>/prepare.py, in
  task-folder order.

  Raises:
    ValueError: two commands share a name.
  """
  from bertexp.tasks import catalog
  found = {}
  for folder, module in catalog.modules_named(PREPARE_MODULE):
    for command in module.COMMANDS:
      if command.name in found:
        raise ValueError(f"prepare {command.name}: declared by "
                         f"{found[command.name][0]} and {folder}")
      found[command.name] = (folder, command)
  return [command for _, command in found.values()]
