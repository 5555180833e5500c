"""The tests' `python` processes, forked with TensorFlow imported.

The suite starts many `bertexp` processes (servers, XLA runs, sweeps, killed
and resumed runs); `popen` and `run` start each as bertexp.util.forked's
ForkedProcess, forked from a process that imported the training modules
once, ~4 CPU-seconds less each than a new interpreter. A test of what a new
interpreter decides from its environment at import time (oneDNN, Keras)
starts `sys.executable` itself.
"""
from bertexp.util import forked


def popen(argv, **kwargs):
  """`python ARGV` started (keyword arguments: env, cwd, stdin, stdout,
  stderr, text, as subprocess.Popen's)."""
  return forked.ForkedProcess(argv, preload=forked.TRAINING_MODULES, **kwargs)


def run(argv, *, timeout=None, **kwargs):
  """`python ARGV` to its end: subprocess.CompletedProcess."""
  return forked.run(argv, preload=forked.TRAINING_MODULES, timeout=timeout,
                    **kwargs)


def zygote():
  """This test process's forking process."""
  return forked.zygote(forked.TRAINING_MODULES)


children_cpu_seconds = forked.children_cpu_seconds
