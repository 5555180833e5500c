"""Orbit, with a clear message when it is missing.

Orbit ships only inside tf-models-official, whose pins would downgrade
TensorFlow, hence the --no-deps install.
"""
from bertexp.util import extras

orbit = extras.require(
    "orbit", "pip install --no-deps tf-models-official==2.20.0",
    "bertexp (its training loop)")
