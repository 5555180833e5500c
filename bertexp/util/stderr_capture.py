"""File descriptor 2 pointed at a temporary file for a while: what C++
libraries and child processes write there (TensorFlow's start-up lines, a
local Beam runner's worker logs) is kept out of the user's terminal, and
shown only when the block fails with an unexpected error."""
import contextlib
import os
import sys
import tempfile


@contextlib.contextmanager
def captured_stderr(replay_unless=()):
  """Runs the block with fd 2 (and so every child process's stderr) in a
  temporary file.

  Args:
    replay_unless: exception types after which the captured text is not
      replayed (errors whose own message says everything).

  Raises:
    Whatever the block raises, after replaying the captured text to the
    real stderr (unless it is one of `replay_unless`).
  """
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as capture:
    os.dup2(capture.fileno(), 2)
    try:
      yield
    except BaseException as e:
      sys.stderr.flush()
      os.dup2(saved, 2)
      if not isinstance(e, replay_unless):
        capture.seek(0)
        sys.stderr.buffer.write(capture.read())
        sys.stderr.flush()
      raise
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
