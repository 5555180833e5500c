"""`make demo-sweep`: two learning rates for the movie-sentiment demo (crossed
with --seeds by `bertexp sweep`). A grid file defines grid() -> binding sets."""
from bertexp.sweeps.grids import product


def grid():
  return product(LEARNING_RATE=[1e-4, 3e-5])
