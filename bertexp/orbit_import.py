"""Orbit, with a clear message when it is missing.

Orbit ships only inside tf-models-official, whose pins would downgrade
TensorFlow, hence the --no-deps install.
"""
try:
  import orbit  # pylint: disable=unused-import
except ImportError as e:
  raise ImportError(
      "bertexp needs Orbit, which ships in tf-models-official. Install it "
      "without its pins: pip install --no-deps tf-models-official==2.20.0 "
      f"(import failed: {e})") from e
