"""`bertexp prepare pretraining`: raw text -> masked-LM / next-sentence
records (see bertexp.tasks.pretraining.data)."""
from bertexp.tasks import prepare_command
from bertexp.util import beam_io


def _arguments(parser):
  parser.add_argument("--input_file", required=True,
                      help="glob(s), comma separated: one sentence per line, "
                           "blank line between documents")
  parser.add_argument("--output_file", required=True)
  prepare_command.add_tokenizer_flags(parser)
  parser.add_argument("--max_seq_length", type=int, default=128,
                      help="tokens per example, [CLS] and [SEP]s included")
  parser.add_argument("--max_predictions_per_seq", type=int, default=20,
                      help="masked positions kept per example")
  parser.add_argument("--masked_lm_prob", type=float, default=0.15,
                      help="share of tokens (or whole words) masked")
  parser.add_argument("--short_seq_prob", type=float, default=0.1,
                      help="share of examples given a shorter random length")
  parser.add_argument("--dupe_factor", type=int, default=10,
                      help="passes over the text, each with other masks")
  parser.add_argument("--random_seed", type=int, default=12345,
                      help="seed of the masks, pairs and short lengths")
  parser.add_argument("--do_whole_word_mask", action="store_true")
  parser.add_argument("--chinese_word_segmenter", choices=["jieba"])
  parser.add_argument("--num_workers", type=int,
                      help="--runner=direct: processes (default: up to 2, one "
                           "per core)")
  parser.add_argument("--chunk_bytes", type=int, default=1 << 20,
                      help="text per chunk (random next sentences come from "
                           "the same chunk); the records depend on it")
  beam_io.add_runner_flags(parser)
  parser.add_argument("--num_shards", type=int, default=0,
                      help="--runner=beam: output shards OUTPUT-00000-of-N "
                           "(default: one per ~256 MB of records)")


def _run(args):
  from bertexp.tasks.pretraining import data as pretraining
  options = pretraining.Options(
      **prepare_command.tokenizer_options(args),
      max_seq_length=args.max_seq_length,
      max_predictions_per_seq=args.max_predictions_per_seq,
      masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob,
      dupe_factor=args.dupe_factor, random_seed=args.random_seed,
      do_whole_word_mask=args.do_whole_word_mask,
      chinese_word_segmenter=args.chinese_word_segmenter)
  if args.runner == "beam":
    from bertexp.tasks.pretraining import beam_pipeline
    meta = beam_pipeline.prepare_pretraining_beam(
        input_files=args.input_file, output_file=args.output_file,
        options=options, beam_options=args.beam_options,
        num_shards=args.num_shards, chunk_bytes=args.chunk_bytes)
    written = meta["train_data_pattern"]
  else:
    meta = pretraining.prepare_pretraining(
        input_files=args.input_file, output_file=args.output_file,
        options=options, num_workers=args.num_workers,
        chunk_bytes=args.chunk_bytes)
    written = args.output_file
  print(f"prepared pretraining: {meta['train_data_size']} instances from "
        f"{meta['documents']} documents, masked fraction "
        f"{meta['masked_fraction']:.4f}, {meta['unknown_tokens']} [UNK] of "
        f"{meta['tokens']} tokens -> {written}", flush=True)


COMMANDS = (prepare_command.PrepareCommand(
    name="pretraining", help="raw text -> MLM/NSP records",
    add_arguments=_arguments, run=_run, text_flags_default_length=None),)
