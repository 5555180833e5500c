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
