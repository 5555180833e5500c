"""What a run prints: one progress line per loop (bertexp's own), not Orbit's
echo of it.

Orbit's Controller prints every loop's metrics as a multi-line dict of numpy
scalars (`train | step: 50 | steps/sec: 1.0 | output:` + `{'accuracy':
np.float32(0.52), ...}`) and its checkpoint chatter, with `print`, which it
offers no switch for. `without_orbit_echo()` filters those lines out of
stdout while the controller runs; everything else passes through unchanged.
"""
import contextlib
import io
import sys

# Lines Orbit's controller prints on its own (orbit/controller.py `_log`).
_ORBIT_PREFIXES = ("train | step:", " eval | step:", "restoring or initializing model",
                   "restored model from", "restoring model from",
                   "saved checkpoint to", "restored from checkpoint:")


class OrbitEchoFilter(io.TextIOBase):
  """A text stream that drops Orbit's lines and forwards the rest to `out`."""

  def __init__(self, out):
    super().__init__()
    self.out = out
    self._pending = ""
    self._in_output_dict = False

  def writable(self):
    return True

  def write(self, text):
    self._pending += text
    *lines, self._pending = self._pending.split("\n")
    for line in lines:
      if not self._drop(line):
        self.out.write(line + "\n")
    return len(text)

  def flush(self):
    self.out.flush()

  def finish(self):
    """Writes out a last line that has no newline yet."""
    if self._pending and not self._drop(self._pending):
      self.out.write(self._pending)
    self._pending = ""
    self.out.flush()

  def _drop(self, line):
    if self._in_output_dict:
      self._in_output_dict = not line.rstrip().endswith("}")
      return True
    if line.startswith(_ORBIT_PREFIXES):
      # "... | output: " is followed by the pretty-printed dict.
      self._in_output_dict = line.rstrip().endswith("output:")
      return True
    return False


@contextlib.contextmanager
def without_orbit_echo():
  """Runs the body with Orbit's own progress lines removed from stdout."""
  stream = OrbitEchoFilter(sys.stdout)
  with contextlib.redirect_stdout(stream):
    try:
      yield
    finally:
      stream.finish()
