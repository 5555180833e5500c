"""bertexp.util.beam_io: inputs matched through Beam's file systems as the
in-process path lists them (relative and absolute globs, comma-separated
patterns, folders left out), and what Beam would skip in silence named."""
import os

import pytest

from bertexp.tasks.pretraining import data
from bertexp.util import beam_io


@pytest.fixture
def corpus(tmp_path, monkeypatch):
  folder = tmp_path / "corpus"
  (folder / "sub.txt").mkdir(parents=True)         # a folder the glob matches
  for name in ("b.txt", "a.txt", "c.md"):
    (folder / name).write_text("one line.\n")
  monkeypatch.chdir(tmp_path)
  return folder


@pytest.mark.parametrize("pattern", ["corpus/*.txt", "corpus/*.txt,corpus/*.md",
                                     "ABSOLUTE"])
def test_beam_matches_the_files_the_in_process_path_lists(corpus, pattern):
  if pattern == "ABSOLUTE":
    pattern = f"{corpus}/*.txt"
  matched = beam_io.match_files(pattern)
  listed = data.text_files(pattern)
  assert [os.path.abspath(p) for p in matched] == [
      os.path.abspath(p) for p in listed]
  assert [os.path.basename(p) for p in matched][:2] == ["a.txt", "b.txt"]


def test_a_dangling_link_and_no_match_are_named(corpus):
  (corpus / "d.txt").symlink_to(corpus / "gone.txt")
  with pytest.raises(ValueError, match="d.txt: cannot be read"):
    beam_io.match_files("corpus/*.txt")
  with pytest.raises(FileNotFoundError, match="no input file matches 'nothing/\\*'"):
    beam_io.match_files("nothing/*")


@pytest.mark.parametrize("flags, runner", [
    ("", beam_io.LOCAL_RUNNER),
    ("--runner=DirectRunner --direct_num_workers=2", beam_io.LOCAL_RUNNER),
    ("--runner=DataflowRunner --project=p --region=r", "DataflowRunner"),
    ("--runner=PrismRunner", "PrismRunner")])
def test_the_local_runner_is_the_fn_api_runner_unless_another_is_named(
    flags, runner):
  from apache_beam.options.pipeline_options import DirectOptions
  from apache_beam.options.pipeline_options import StandardOptions
  options = beam_io.pipeline_options(flags)
  assert options.view_as(StandardOptions).runner == runner
  if "direct_num_workers" in flags:
    assert options.view_as(DirectOptions).direct_num_workers == 2


@pytest.mark.parametrize("flags, message", [
    ("--direct_num_worker=2",
     "--direct_num_worker (did you mean --direct_num_workers?)"),
    ("--direct_num_workers=2 --no_such_beam_flag=1 --temp_location=/tmp",
     "--no_such_beam_flag")])
def test_an_option_beam_does_not_know_is_refused_not_dropped(flags, message):
  """Beam drops an unknown option with a log line (a typo ran one worker
  instead of two): naming it, with the nearest known name."""
  with pytest.raises(ValueError) as error:
    beam_io.pipeline_options(flags)
  assert str(error.value) == f"--beam_options: unknown Beam option(s) {message}"


def test_beam_is_imported_without_its_cloud_library_notices():
  """Beam's import logs that Google Cloud client libraries are missing
  ("apitools not found", "No module named google.cloud..."): require_beam
  keeps those out of a command's output (a fresh process: Beam is
  imported once)."""
  import subprocess
  import sys
  code = ("import logging; logging.basicConfig(level=logging.INFO); "
          "from bertexp.util import beam_io; beam_io.require_beam(); "
          "logging.info('after the import')")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, timeout=120)
  assert done.returncode == 0, done.stderr
  assert done.stderr == "INFO:root:after the import\n"
