"""What bertexp's Apache Beam pipelines share: Beam itself (the `[beam]`
extra, imported only when `--runner=beam` asks for it), its pipeline options
from one command-line string, inputs matched and opened through Beam's file
systems (local paths, gs://, and whatever the installed Beam registers), and
input errors raised on a worker reported as one line on the driver.

Outputs are written with TensorFlow's file system (tf.io.gfile): training
reads them with tf.data, so they must live where TensorFlow can read.
"""
import contextlib
import logging
import os
import re
import shlex

from bertexp.util import extras
from bertexp.util import stderr_capture

# Put before a worker's input error so the driver can find it again in the
# runner's exception (a multi-process or remote runner re-raises a worker's
# error as a RuntimeError carrying its traceback as text).
_INPUT_ERROR = "bertexp input error: "
_INPUT_ERROR_LINE = re.compile(
    r"(?:" + re.escape(_INPUT_ERROR) + r")+(.*?)(?: \[while running '[^']*'\])?$",
    re.MULTILINE)


def add_runner_flags(parser):
  """--runner and --beam_options on an argparse parser."""
  parser.add_argument(
      "--runner", choices=["direct", "beam"], default="direct",
      help="direct: in this process (and its local worker processes); beam: "
           "an Apache Beam pipeline (pip install 'bertexp[beam]'), run by "
           "the runner --beam_options names")
  parser.add_argument(
      "--beam_options", default="",
      help="Beam's pipeline flags in one string, e.g. '--direct_num_workers=2 "
           "--direct_running_mode=multi_processing' (the local runner, "
           "Beam's FnApiRunner) or Dataflow's, Flink's, Spark's")


def require_beam():
  """The apache_beam module, imported without its import-time notices
  (Google Cloud client libraries it did not find: "apitools not found",
  "No module named google.cloud.bigquery_storage_v1"), which name nothing
  a bertexp pipeline uses.

  Raises:
    extras.MissingDependency: Beam is not installed (names the extra).
  """
  loggers = [logging.getLogger(), logging.getLogger("apache_beam")]
  levels = [logger.level for logger in loggers]
  for logger in loggers:
    logger.setLevel(logging.ERROR)
  try:
    return extras.require("apache_beam", "pip install 'bertexp[beam]'",
                          "--runner=beam")
  finally:
    for logger, level in zip(loggers, levels):
      logger.setLevel(level)


# The local runner: Beam's DirectRunner would first fetch its Prism runner
# from GitHub at run time (offline it fails and falls back; online it runs
# another engine, which ignores --direct_num_workers). Its batch engine, the
# FnApiRunner, runs these pipelines in this process or in
# --direct_num_workers local worker processes.
LOCAL_RUNNER = "FnApiRunner"
_LOCAL_RUNNERS = (None, "DirectRunner", "direct", LOCAL_RUNNER,
                  "SwitchingDirectRunner", "BundleBasedDirectRunner",
                  "PrismRunner")


def pipeline_options(text):
  """Beam's PipelineOptions from one string of flags, as a shell splits it
  (e.g. "--direct_num_workers=2 --direct_running_mode=multi_processing").
  No --runner, or --runner=DirectRunner, runs LOCAL_RUNNER.

  Raises:
    ValueError: the string does not split (an unclosed quote), or names an
      option no installed Beam runner knows (a typo Beam would drop).
  """
  require_beam()
  from apache_beam.options import pipeline_options as options_lib
  try:
    flags = shlex.split(text or "")
  except ValueError as e:
    raise ValueError(f"--beam_options {text!r}: {e}") from None
  options = options_lib.PipelineOptions(flags)
  _check_known(options)
  standard = options.view_as(options_lib.StandardOptions)
  if standard.runner in (None, "DirectRunner", "direct"):
    standard.runner = LOCAL_RUNNER
  return options


def _check_known(options):
  """Beam keeps an option it does not know and drops it with a log line:
  `--direct_num_worker=2` would run one worker without a word.

  Raises:
    ValueError: naming each unknown option, with the nearest known name.
  """
  import difflib
  notices = logging.getLogger("apache_beam.options.pipeline_options")
  level = notices.level
  notices.setLevel(logging.ERROR)    # "Discarding unparseable args": ours
  try:
    known = options.get_all_options()
    given = options.get_all_options(retain_unknown_options=True)
  finally:
    notices.setLevel(level)
  unknown = sorted(set(given) - set(known))
  if unknown:
    hints = []
    for name in unknown:
      near = difflib.get_close_matches(name, list(known), n=1)
      hints.append(f"--{name}" + (f" (did you mean --{near[0]}?)" if near
                                  else ""))
    raise ValueError(f"--beam_options: unknown Beam option(s) "
                     f"{', '.join(hints)}")


def match_files(patterns):
  """The files of a comma-separated list of globs (or a list of them),
  each pattern's matches sorted, through Beam's file systems.

  Raises:
    FileNotFoundError: a pattern matches no file.
  """
  from apache_beam.io.filesystems import FileSystems
  if isinstance(patterns, str):
    patterns = [p.strip() for p in patterns.split(",") if p.strip()]
  files = []
  for pattern in patterns:
    try:
      matched = FileSystems.match([pattern])[0].metadata_list
    except Exception as e:      # Beam raises BeamIOError for an unknown path
      raise FileNotFoundError(f"no input file matches {pattern!r} ({e})") from None
    paths = sorted(m.path for m in matched)
    _check_local_matches(pattern, paths)
    if not paths:
      raise FileNotFoundError(f"no input file matches {pattern!r}")
    files.extend(paths)
  return files


def _check_local_matches(pattern, paths):
  """Beam's local file system leaves out what it cannot stat (a dangling
  link, a file gone): a corpus shard would be skipped in silence.

  Raises:
    ValueError: a local match that is not a folder is missing from `paths`.
  """
  if "://" in pattern:
    return
  import glob
  listed = {os.path.abspath(p) for p in paths}
  for path in glob.glob(pattern):
    if not os.path.isdir(path) and os.path.abspath(path) not in listed:
      raise ValueError(f"{path}: cannot be read (a dangling link?)")


def file_sizes(paths):
  """Bytes of each path, through Beam's file systems."""
  from apache_beam.io.filesystems import FileSystems
  return [FileSystems.match([p])[0].metadata_list[0].size_in_bytes for p in paths]


def open_input(path):
  """`path` opened for reading bytes (no decompression).

  Raises:
    InputError: it cannot be opened.
  """
  from apache_beam.io.filesystems import FileSystems
  from apache_beam.io.filesystem import CompressionTypes
  try:
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
  except Exception as e:
    raise InputError(f"{path}: cannot be read ({e})") from e


class InputError(ValueError):
  """Bad input met on a worker; its message names the file (and line)."""

  def __init__(self, message):
    super().__init__(_INPUT_ERROR + message)


def as_input_error(error):
  """An InputError carrying a ValueError's message (raised on a worker)."""
  if isinstance(error, InputError):
    return error
  return InputError(str(error))


def _runs_here(pipeline):
  """True for a local runner: its workers are this process or its
  children, whose logs would fill the terminal."""
  from apache_beam.options.pipeline_options import StandardOptions
  return pipeline.options.view_as(StandardOptions).runner in _LOCAL_RUNNERS


def run(pipeline):
  """Runs a built pipeline to its end. On a local runner, Beam's and
  its worker processes' logs are kept out of the terminal unless the run
  fails with an unexpected error (remote runners keep theirs: the job's
  address and state).

  Raises:
    ValueError: a worker met bad input (the one-line message, without the
      runner's traceback); any other failure is re-raised as it came.
  """
  local = _runs_here(pipeline)
  quiet = (stderr_capture.captured_stderr(replay_unless=InputError)
           if local else contextlib.nullcontext())
  beam_logs = logging.getLogger("apache_beam")
  level = beam_logs.level
  try:
    with quiet:
      if local:
        beam_logs.setLevel(logging.CRITICAL)
      try:
        result = pipeline.run()
        result.wait_until_finish()
      except Exception as e:
        found = _INPUT_ERROR_LINE.search(str(e))
        if found:
          raise InputError(found.group(1).strip()) from e
        raise
  except InputError as e:
    raise ValueError(str(e)[len(_INPUT_ERROR):]) from e
  finally:
    beam_logs.setLevel(level)
  logging.info("beam pipeline finished: %s", result.state)
  return result
