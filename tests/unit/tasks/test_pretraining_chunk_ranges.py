"""The Beam pipeline's split of a corpus file: the byte ranges it finds,
each read back alone by another worker, give exactly the chunks the
in-process reader gives, on generated files with every kind of line end,
blank and whitespace-only lines, unicode whitespace, missing final newlines
and chunk sizes from tiny to larger than the file."""
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertexp.tasks.pretraining import beam_pipeline
from bertexp.tasks.pretraining import data

# Derandomized: every run draws the same files (FUZZ_RANDOM=1 draws new ones
# and prints the blob that replays a failure).
DRAWS = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 120)),
                 derandomize=not os.environ.get("FUZZ_RANDOM"), print_blob=True,
                 deadline=None, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])

LINE = st.one_of(
    st.text(alphabet=st.sampled_from("ab 中文é\u3000\t"), max_size=12),
    st.just(""), st.just("   "), st.just("\u3000"))
END = st.sampled_from(["\n", "\r\n", "\n\n", "\n \n", "\r\n\r\n"])


@DRAWS
@given(lines=st.lists(st.tuples(LINE, END), min_size=1, max_size=40),
       final_newline=st.booleans(), chunk_bytes=st.integers(1, 200))
def test_byte_ranges_read_back_give_the_in_process_chunks(
    tmp_path, lines, final_newline, chunk_bytes):
  text = "".join(line + end for line, end in lines)
  if not final_newline:
    text = text.rstrip("\r\n")
  path = tmp_path / "corpus.txt"
  path.write_bytes(text.encode("utf-8"))
  try:
    with open(path, "rb") as stream:
      expected = [chunk for chunk, _ in data.file_chunks(str(path), stream, chunk_bytes)]
  except ValueError as e:                   # no text at all: both refuse it
    assert "no text" in str(e)
    return
  ranges = list(beam_pipeline._find_chunks((0, str(path)), chunk_bytes))
  assert [(r[0], r[1]) for r in ranges] == [(0, i) for i in range(len(expected))]
  assert ranges[0][3] == 0 and all(a[4] == b[3] for a, b in zip(ranges, ranges[1:]))
  assert [beam_pipeline._read_chunk(str(path), start, end)
          for _, _, _, start, end in ranges] == expected
