"""`bertexp` subcommands: train, prepare, build-vocab, convert-checkpoint,
sweep, results, launch, evaluate-squad, export-tflite, export-onnx, serve,
benchmark-serving.

    bertexp train --gin_file=experiments/glue/mrpc_gpu.gin \
        --gin_param='MODEL_DIR="runs/mrpc"' --mode=train_and_eval
"""
import argparse
import functools
import logging
import os
import sys
import traceback

import bertexp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TF loads)

from bertexp import modes
from bertexp.gin_setup import parse_gin
from bertexp.train import stop_signals
from bertexp.util import beam_io
from bertexp.util import extras
from bertexp.util import forked
from bertexp.util import gin_text
from bertexp.util import stderr_capture


# TensorFlow's INFO lines that say nothing to a user: a checkpoint's
# sharding time (every save), the input names a SavedModel renames (every
# export), where the export's assets went (bertexp prints the export).
_TENSORFLOW_NOISE = ("Sharding callback duration", "contains input name(s)",
                     "Assets written to")


class _QuietLog(logging.Filter):
  """Drops Orbit's log copy of the progress lines it also prints (bertexp
  prints its own) and TensorFlow's _TENSORFLOW_NOISE."""

  def filter(self, record):
    if record.pathname.endswith(os.path.join("orbit", "controller.py")):
      return False
    message = record.getMessage() if record.levelno <= logging.INFO else ""
    return not any(noise in message for noise in _TENSORFLOW_NOISE)


def cmd_train(args):
  """`bertexp train` and `export-tflite`: parse the gin files, run the experiment."""
  config_text = parse_gin(args.gin_file, args.gin_param)
  from bertexp import experiment
  experiment.experiment(mode=args.mode, config_text=config_text)


def cmd_build_vocab(args):
  """`bertexp build-vocab`: a WordPiece vocabulary learned from raw text."""
  from bertexp.data import vocab
  if args.runner == "beam":
    from bertexp.data import vocab_beam
    tokens = vocab_beam.build_vocab_beam(
        args.input_file, args.vocab_size, args.output,
        do_lower_case=not args.no_lower_case, chinese=args.chinese,
        beam_options=args.beam_options)
  else:
    tokens = vocab.build_vocab(args.input_file, args.vocab_size, args.output,
                               do_lower_case=not args.no_lower_case,
                               chinese=args.chinese)
  print(f"wrote {len(tokens)} tokens to {args.output}", flush=True)


def cmd_convert(args):
  """`bertexp convert-checkpoint`: into bertexp's format, or out to Hugging Face."""
  if args.target == "huggingface":
    from bertexp.checkpoints import to_huggingface
    from bertexp.tasks import catalog
    to_huggingface.export_huggingface(
        args.input, args.output, bert_config_file=args.bert_config_file,
        vocab_file=args.vocab_file, heads=catalog.huggingface_heads(),
        extra_files=catalog.huggingface_files())
    return
  from bertexp.checkpoints import converters
  convert = {"huggingface": converters.convert_huggingface,
             "tf1": converters.convert_tf1,
             "model_garden": converters.convert_model_garden}[args.source]
  convert(args.input, args.output, tolerance=args.tolerance)


def cmd_evaluate_squad(args):
  """`bertexp evaluate-squad`: the official SQuAD rules on a predictions file."""
  import json
  from bertexp.tasks.squad import squad_json
  from bertexp.tasks.squad import scoring as squad_scoring
  from bertexp.util import fileio
  pred_file = args.pred_file
  if args.best_threshold_output:
    if not (args.nbest_file and args.na_prob_file):
      raise ValueError("--best_threshold_output needs --nbest_file and "
                       "--na_prob_file")
    threshold, predictions = squad_scoring.rethreshold(
        squad_json.load_json(args.data_file, "dataset"),
        squad_json.load_json(args.nbest_file, "n-best"),
        squad_json.load_json(args.na_prob_file, "null odds"),
        nbest_file=args.nbest_file, na_prob_file=args.na_prob_file)
    fileio.write_json(args.best_threshold_output, predictions)
    print(f"best-F1 null threshold {threshold:.4f}: wrote "
          f"{args.best_threshold_output}", flush=True)
    pred_file = args.best_threshold_output
  result = squad_scoring.evaluate_files(args.data_file, pred_file,
                                        args.na_prob_file, args.na_prob_thresh)
  if args.out_file:
    fileio.write_json(args.out_file, result)
  else:
    print(json.dumps(result, indent=2))


def cmd_sweep(args):
  """`bertexp sweep`: a grid x seeds, one process per trial, resumable."""
  from bertexp.sweeps import runner
  settings = runner.SweepSettings.from_flags(args)
  try:
    results = runner.run_sweep(settings)
  except KeyboardInterrupt:
    print("sweep interrupted: rerun the same command to resume (finished "
          "trials are skipped, the others restart from their checkpoints)",
          file=sys.stderr, flush=True)
    raise SystemExit(130) from None
  failed = [r for r in results if r["status"] == "failed"]
  if failed:
    print(f"{len(failed)} trial(s) failed: see their log.txt", flush=True)


def cmd_launch(args):
  """`bertexp launch`: the experiment on N workers of a platform."""
  from bertexp.launch import render
  profile = render.LaunchProfile(
      name=args.name, workers=args.workers, gin_files=tuple(args.gin_file),
      gin_params=tuple(args.gin_param), mode=args.mode, image=args.image,
      port=args.port, namespace=args.namespace,
      gpus_per_worker=args.gpus_per_worker, machine_type=args.machine_type,
      accelerator_type=args.accelerator_type, tpu_name=args.tpu_name,
      zone=args.zone)
  if args.platform == "local":
    from bertexp.launch import local
    code = local.run(profile)
    if code:
      raise SystemExit(code)
    return
  text = render.RENDERERS[args.platform](profile)
  if args.output:
    from bertexp.util import fileio
    fileio.write_text(args.output, text)
    print(f"wrote {args.output}", flush=True)
  else:
    sys.stdout.write(text)


def cmd_results(args):
  """`bertexp results`: a sweep's table and plot again, from its folder."""
  from bertexp.sweeps import results as sweep_results
  if not os.path.exists(os.path.join(args.output_dir, "sweep.json")):
    raise FileNotFoundError(f"{args.output_dir}: no sweep.json (not a sweep "
                            "output folder)")
  sweep_results.write(args.output_dir)


def normalise_flag_spelling(argv):
  """--na-prob-file and --na_prob_file are the same flag: the name part of
  every --flag is spelled with underscores (values are left alone)."""
  normalised = []
  for token in argv:
    if token.startswith("--") and len(token) > 2:
      name, sep, value = token.partition("=")
      token = "--" + name[2:].replace("-", "_") + sep + value
    normalised.append(token)
  return normalised


class _WholeFlagNames(argparse.ArgumentParser):
  """argparse with abbreviations off (and so every subcommand's parser):
  `--choice_column` is an unknown flag, not `--choice_columns`."""

  def __init__(self, *args, **kwargs):
    kwargs.setdefault("allow_abbrev", False)
    super().__init__(*args, **kwargs)


def build_parser():
  """The `bertexp` argument parser with every subcommand."""
  from bertexp import __version__
  common = _WholeFlagNames(add_help=False)
  common.add_argument("--debug", action="store_true",
                      help="print the full traceback of any error")
  common.add_argument("--verbose", action="store_true",
                      help="keep TensorFlow's start-up messages")
  parser = _WholeFlagNames(prog="bertexp", description=__doc__,
                           formatter_class=argparse.RawTextHelpFormatter)
  parser.add_argument("--version", action="version",
                      version=f"bertexp {__version__}")
  sub = parser.add_subparsers(dest="command", required=True)

  def add(parent, name, **kwargs):   # a command with --debug and --verbose
    return parent.add_parser(
        name, parents=[common],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter, **kwargs)

  _training_commands(sub, add)
  _prepare_commands(sub, add)
  _tool_commands(sub, add)
  _serving_commands(sub, add)
  return parser


def _training_commands(sub, add):
  """train, export-tflite, sweep and results; `add(parent, name, ...)`
  makes a command with --debug and --verbose."""
  train = add(sub, "train", help="train / eval / predict / export")
  train.add_argument("--gin_file", action="append", required=True,
                     help="experiment .gin (repeatable)")
  train.add_argument("--gin_param", action="append", default=[],
                     help="one binding, e.g. LEARNING_RATE=3e-5 (repeatable)")
  train.add_argument("--mode", default="train_and_eval",
                     choices=[*modes.MODES, *modes.ALIASES],
                     help=modes.help_text())
  train.set_defaults(func=cmd_train)

  for name, mode, text in (
      ("export-tflite", "export_tflite",
       "classifier or multiple choice -> TFLite float + int8, with "
       "agreement"),
      ("export-onnx", "export_onnx",
       "classification, regression or QA -> ONNX Runtime float32 + int8 "
       "(MODEL_DIR/onnx/), with agreement")):
    export = add(sub, name, help=text)
    export.add_argument("--gin_file", action="append", required=True)
    export.add_argument("--gin_param", action="append", default=[],
                        help="one binding (repeatable)")
    export.set_defaults(func=cmd_train, mode=mode)

  _sweep_command(sub, add)

  res = add(sub, "results", help="a sweep's table and plot, from disk")
  res.add_argument("output_dir")
  res.set_defaults(func=cmd_results, tensorflow=False)
  _launch_command(sub, add)


def _sweep_command(sub, add):
  """`bertexp sweep`: a grid or a search over one Optuna study."""
  sw = add(sub, "sweep", help="a hyperparameter grid x seeds, one "
                      "trial.gin per trial, resumable, with a results table")
  sw.add_argument("--gin_file", action="append", required=True)
  sw.add_argument("--gin_param", action="append", default=[],
                  help="applies to every trial (repeatable)")
  sw.add_argument("--grid",
                  help="paper_table1, paper_a3, small_bert or a .py file "
                       "defining grid()")
  sw.add_argument("--seeds", type=int, default=1, help="seeds per configuration")
  sw.add_argument("--first_seed", type=int, default=1,
                  help="seeds are first_seed, first_seed + 1, ...")
  sw.add_argument("--folds", type=int,
                  help="k-fold cross-validation: one trial per fold of data "
                  "prepared with `prepare classification --folds` (FOLD)")
  sw.add_argument("--output_dir", required=True)
  sw.add_argument("--parallel", type=int, default=1,
                  help="trial processes at once (CPU threads are split)")
  sw.add_argument("--max_trials", type=int,
                  help="run at most this many unfinished trials, then stop")
  sw.add_argument("--dry_run", action="store_true",
                  help="print the trials with their steps and warmup")
  sw.add_argument("--storage",
                  help="the Optuna study's database URL, shared by every "
                  "machine of the sweep (default: sqlite:///OUTPUT_DIR/study.db)")
  sw.add_argument("--study_name",
                  help="the study's name in --storage (default: the "
                  "output folder's name)")
  sw.add_argument("--search", choices=("grid", "tpe"), default="grid",
                  help="grid: every trial of --grid; tpe: --n_trials trials "
                  "that Optuna's TPE sampler picks over --search_space")
  sw.add_argument("--search_space",
                  help="--search=tpe: a JSON file of each macro's range")
  sw.add_argument("--n_trials", type=int,
                  help="trials of the search, over all machines")
  sw.add_argument("--prune", choices=("median", "hyperband"),
                  help="stop trials whose evaluations trail the others'")
  sw.add_argument("--heartbeat_seconds", type=int, default=30,
                  help="a trial silent for 4x this long is taken as lost "
                  "and run again")
  sw.set_defaults(func=cmd_sweep)


def _launch_command(sub, add):
  """launch: one experiment on N workers of a platform."""
  launch = add(sub, "launch", help="an experiment on N workers: a Kubernetes "
               "or Vertex AI job, the TPU VM command, or N local processes")
  launch.add_argument("--platform", required=True,
                      choices=("kubernetes", "vertex", "tpu-vm", "local"))
  launch.add_argument("--workers", type=int, default=1)
  launch.add_argument("--gin_file", action="append", required=True)
  launch.add_argument("--gin_param", action="append", default=[],
                      help="one binding (repeatable)")
  launch.add_argument("--mode", default="train_and_eval",
                      choices=[*modes.MODES, *modes.ALIASES])
  launch.add_argument("--name", default="bertexp",
                      help="the job's name (a DNS label)")
  launch.add_argument("--image", default="bertexp:latest",
                      help="a container image with bertexp (deploy/Dockerfile)")
  launch.add_argument("--output", help="write the manifest here (default: "
                      "print it)")
  launch.add_argument("--port", type=int, default=2222)
  launch.add_argument("--namespace", default="default")
  launch.add_argument("--gpus_per_worker", type=int, default=0)
  launch.add_argument("--machine_type", default="n1-standard-8",
                      help="vertex: each worker's machine")
  launch.add_argument("--accelerator_type", help="vertex: e.g. NVIDIA_L4")
  launch.add_argument("--tpu_name", help="tpu-vm: the TPU VM's name")
  launch.add_argument("--zone", help="tpu-vm: its zone")
  launch.set_defaults(func=cmd_launch, tensorflow=False)


def _prepare_commands(sub, add):
  """prepare <kind>: the subcommands the tasks declare
  (bertexp/tasks/<task>/prepare.py, see bertexp.tasks.prepare_command)."""
  from bertexp.tasks import prepare_command
  prep = sub.add_parser("prepare", help="text -> TFRecords + meta data")
  prep_sub = prep.add_subparsers(dest="kind", required=True)
  for command in prepare_command.discover():
    parser = add(prep_sub, command.name, help=command.help)
    command.add_arguments(parser)
    if command.text_flags_default_length is not None:
      prepare_command.add_text_flags(parser,
                                     command.text_flags_default_length)
    parser.set_defaults(
        func=functools.partial(prepare_command.run_staged, command))


def _tool_commands(sub, add):
  """build-vocab, convert-checkpoint and evaluate-squad."""
  voc = add(sub, "build-vocab", help="raw text -> WordPiece vocab.txt")
  voc.add_argument("--input_file", required=True, help="glob(s), comma separated")
  voc.add_argument("--vocab_size", type=int, required=True)
  voc.add_argument("--output", required=True)
  voc.add_argument("--chinese", action="store_true",
                   help="a large CJK alphabet; no ##<CJK> pieces")
  voc.add_argument("--no_lower_case", action="store_true")
  beam_io.add_runner_flags(voc)
  voc.set_defaults(func=cmd_build_vocab)

  conv = add(sub, "convert-checkpoint",
             help="foreign checkpoint -> bertexp checkpoint folder, or "
                  "bertexp -> Hugging Face (--to=huggingface)")
  direction = conv.add_mutually_exclusive_group(required=True)
  direction.add_argument("--from", dest="source",
                         choices=["huggingface", "tf1", "model_garden"])
  direction.add_argument("--to", dest="target", choices=["huggingface"],
                         help="a MODEL_DIR, checkpoint or encoder folder -> "
                              "a transformers model folder")
  conv.add_argument("--input", required=True)
  conv.add_argument("--output", required=True)
  conv.add_argument("--tolerance", type=float, default=1e-5,
                    help="--from: parity tolerance")
  conv.add_argument("--bert_config_file",
                    help="--to: default the run's BERT_CONFIG_FILE")
  conv.add_argument("--vocab_file",
                    help="--to: default the vocabulary beside it")
  conv.set_defaults(func=cmd_convert)

  squad = add(sub, "evaluate-squad",
      help="official SQuAD v1.1 / v2.0 scores of a predictions.json")
  squad.add_argument("data_file", help="dev-v1.1.json or dev-v2.0.json")
  squad.add_argument("pred_file", help="{question id: answer text}")
  squad.add_argument("--out_file", "-o", help="write the JSON here")
  squad.add_argument("--na_prob_file", "-n", help="null odds JSON (v2.0)")
  squad.add_argument("--na_prob_thresh", "-t", type=float, default=1.0,
                     help="predict no answer above these null odds")
  squad.add_argument("--nbest_file", help="nbest_predictions.json (v2.0)")
  squad.add_argument("--best_threshold_output",
                     help="write predictions re-thresholded at the best-F1 "
                          "null threshold here, then score them (v2.0)")
  squad.set_defaults(func=cmd_evaluate_squad)


def _serving_commands(sub, add):
  """serve and benchmark-serving."""
  srv = add(sub, "serve", help="an export behind TF Serving's REST and gRPC "
                               "APIs, with request batching")
  srv.add_argument("model_base_path", nargs="?",
                   help="a MODEL_DIR (its export/) or a folder of numeric "
                        "version folders; the newest version is served")
  srv.add_argument("--model_config_file",
                   help="TF Serving's model config (ModelServerConfig text "
                        "format): several models, each name and base_path; "
                        "instead of model_base_path")
  srv.add_argument("--model_name",
                   help="the name in request paths (default: the run "
                        "folder's name)")
  srv.add_argument("--rest_port", type=int, default=8501,
                   help="0 picks a free port; -1 turns REST off")
  srv.add_argument("--grpc_port", type=int, default=8500,
                   help="0 picks a free port; -1 turns gRPC off")
  srv.add_argument("--host", default="0.0.0.0",
                   help="the address to listen on: every interface by "
                   "default, as TF Serving; 127.0.0.1 for this machine only")
  srv.add_argument("--ssl_config_file",
                   help="TF Serving's SSLConfig (text proto with the PEM "
                        "server_key, server_cert, optional custom_ca and "
                        "client_verify): gRPC and REST speak TLS only")
  srv.add_argument("--enable_batching", action="store_true",
                   help="merge concurrent requests into one model call")
  srv.add_argument("--batching_parameters_file",
                   help="TF Serving's batching parameters (text proto); "
                        "implies --enable_batching")
  srv.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0,
                   help="how often new versions are looked for (0: never)")
  srv.add_argument("--max_text_bytes", type=int, default=65536,
                   help="the longest text a request's string input may hold")
  srv.add_argument("--max_request_bytes", type=int, default=64 << 20,
                   help="the largest request body: REST answers 413 from "
                   "its Content-Length before reading it; gRPC's message "
                   "limit")
  srv.add_argument("--tensorflow_intra_op_parallelism", type=int, default=0,
                   help="threads one model call may use (TensorFlow and "
                        "ONNX Runtime); 0: one per core. Under concurrent "
                        "load 1 serves more requests per second")
  srv.add_argument("--tensorflow_inter_op_parallelism", type=int, default=0,
                   help="TensorFlow ops run side by side in one call; 0: "
                        "TensorFlow's default")
  srv.set_defaults(func=cmd_serve)
  _benchmark_serving_command(sub, add)


def _benchmark_serving_command(sub, add):
  """`bertexp benchmark-serving`."""
  bench = add(sub, "benchmark-serving",
              help="latency percentiles and throughput of an export: in "
                   "process, through bertexp serve (gRPC, REST), TFLite, "
                   "ONNX Runtime")
  bench.add_argument("target", help="a MODEL_DIR, export or SavedModel "
                                    "folder, an ONNX versions folder, or a "
                                    ".tflite or .onnx file")
  bench.add_argument("--lengths", default="16,128",
                     help="token counts of the latency rows")
  bench.add_argument("--clients", default="1,4,16",
                     help="concurrent clients of the throughput rows")
  bench.add_argument("--calls", type=int, default=200,
                     help="latency calls measured per row")
  bench.add_argument("--warmup", type=int, default=20)
  bench.add_argument("--seconds", type=float, default=3.0,
                     help="duration of each throughput row")
  bench.add_argument("--throughput_tokens", type=int, default=16)
  bench.add_argument("--no_server", action="store_true",
                     help="skip the gRPC and REST rows")
  bench.add_argument("--output_json", help="also write the report here")
  bench.set_defaults(func=cmd_benchmark_serving)


def cmd_benchmark_serving(args):
  """Prints (and writes) the serving benchmark of args.target."""
  from bertexp.serving.benchmarks import benchmark
  report = benchmark.run(
      args.target, lengths=_integer_list(args.lengths, "--lengths"),
      clients=_integer_list(args.clients, "--clients"), calls=args.calls,
      warmup=args.warmup, seconds=args.seconds,
      throughput_tokens=args.throughput_tokens, server=not args.no_server)
  print(benchmark.table(report), flush=True)
  if args.output_json:
    from bertexp.util import fileio
    fileio.write_json(args.output_json, report)


def _integer_list(text, flag):
  try:
    values = [int(v) for v in text.split(",") if v.strip()]
  except ValueError:
    values = []
  if not values or min(values) < 1:
    raise ValueError(f"{flag} {text!r}: expected positive integers separated "
                     "by commas")
  return values


def cmd_serve(args):
  """Serves an export until SIGTERM (see bertexp.serving.server.serve)."""
  for module in ("grpc", "werkzeug", "tensorflow_serving.apis"):
    extras.require(module, "pip install 'bertexp[serve]'", "bertexp serve")
  from bertexp.serving.server import batching as batching_lib
  from bertexp.serving.server import serve as serve_lib
  batching = None
  if args.batching_parameters_file:
    batching = batching_lib.BatchingParameters.from_file(
        args.batching_parameters_file)
  elif args.enable_batching:
    batching = batching_lib.BatchingParameters()
  if bool(args.model_base_path) == bool(args.model_config_file):
    raise ValueError("bertexp serve: give a model_base_path or "
                     "--model_config_file (one of them)")
  if args.model_config_file:
    from bertexp.serving.server import model_server
    models = model_server.read_model_config(args.model_config_file)
  else:
    models = [(args.model_name or os.path.basename(os.path.normpath(
        args.model_base_path.rstrip("/"))), args.model_base_path)]
  tls = None
  if args.ssl_config_file:
    from bertexp.serving.server import tls as tls_lib
    tls = tls_lib.read_ssl_config(args.ssl_config_file)
  port = lambda p: None if p < 0 else p
  serve_lib.set_threads(args.tensorflow_intra_op_parallelism,
                        args.tensorflow_inter_op_parallelism)
  serve_lib.serve(models, rest_port=port(args.rest_port),
                  grpc_port=port(args.grpc_port), host=args.host,
                  batching=batching,
                  poll_seconds=args.file_system_poll_wait_seconds,
                  max_text_bytes=args.max_text_bytes,
                  max_request_bytes=args.max_request_bytes, tls=tls)


def load_tensorflow_quietly():
  """Imports TensorFlow and probes its devices with file descriptor 2
  pointed at a temporary file: its C++ start-up lines (oneDNN notice, CUDA
  probing on a machine without GPUs) are written there before any log
  setting applies. They are replayed if the import fails. Listing physical
  devices does not initialise the runtime (multi-worker setup still can)."""
  with stderr_capture.captured_stderr():
    import tensorflow as tf
    tf.config.list_physical_devices()


def main(argv=None):
  """Runs one `bertexp` command.

  Returns:
    The exit status: 0 done, 2 a user error (one line), 3 a lost
    multi-worker peer, 42 stopped by a signal with a checkpoint written.
  """
  args = build_parser().parse_args(normalise_flag_spelling(
      sys.argv[1:] if argv is None else argv))
  logging.basicConfig(level=logging.INFO,
                      format="%(asctime)s %(levelname)s %(message)s")
  for handler in logging.getLogger().handlers:
    handler.addFilter(_QuietLog())
  if not args.verbose:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # launch starts other processes and results reads and writes small
    # files: they load TensorFlow (~3 CPU-seconds) only if a path needs it.
    if getattr(args, "tensorflow", True):
      load_tensorflow_quietly()
  try:
    args.func(args)
  except stop_signals.RunStopped as e:
    print(f"bertexp: stopped: {e}", file=sys.stderr, flush=True)
    return stop_signals.EXIT_STATUS
  except stop_signals.WorkerLost as e:
    print(f"bertexp: error: {e}", file=sys.stderr, flush=True)
    return stop_signals.WORKER_LOST_STATUS
  except (ValueError, FileNotFoundError, SyntaxError,
          extras.MissingDependency) as e:
    # User errors, one line (--debug: with the traceback). SyntaxError: a
    # malformed .gin file (gin names the spot). Anything else is a bug and
    # keeps its traceback.
    if args.debug:
      traceback.print_exc()
    print(f"bertexp: error: {gin_text.user_message(e)}", file=sys.stderr)
    return 2
  return 0


def console_main():
  """The `bertexp` command: main(), then exit without TensorFlow's teardown.

  Every output is written and closed by then (checkpoints, JSON files via
  rename, summaries flushed by orbit after each write). Destroying a
  training input iterator can block for up to a minute in tf.data's
  autotuning thread (seen with 8 simulated replicas), so the process ends
  with os._exit once Python's own streams are flushed.
  """
  code = main()
  forked.shutdown()              # the zygote of sweep trials or workers
  logging.shutdown()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)


if __name__ == "__main__":
  console_main()
