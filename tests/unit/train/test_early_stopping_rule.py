"""Early stopping's rule (bertexp.train.loop.EarlyStopping) on its own: the
best value, its step and the count of evaluations without improvement, in
both directions, and its record across a resume. The runs that stop early
are in tests/e2e/test_early_stopping.py."""
import json

import pytest

from bertexp.train import loop

# (step, accuracy, expected best, best step, evaluations without
# improvement) with patience 2 and min_delta 0.01: a gain counts only when
# it is above 0.01 over the best so far, and an improvement resets the count.
ACCURACY_COURSE = [(10, 0.50, 0.50, 10, 0), (20, 0.60, 0.60, 20, 0),
                   (30, 0.605, 0.60, 20, 1), (40, 0.62, 0.62, 40, 0),
                   (50, 0.625, 0.62, 40, 1), (60, 0.629, 0.62, 40, 2)]


@pytest.mark.parametrize("mode", ["max", "min"])
def test_patience_follows_the_best_value_in_both_directions(tmp_path, mode):
  """On an improving-then-flat course (accuracy, or its mirror image as a
  loss for mode "min"), the best value, its step and the counter follow
  each evaluation; patience runs out at step 60, and a replayed evaluation
  (a resume) is not counted twice."""
  sign = 1 if mode == "max" else -1
  stopper = loop.EarlyStopping(str(tmp_path), "metric", mode, patience=2,
                               min_delta=0.01)
  for step, value, best, best_step, without in ACCURACY_COURSE:
    if step == 60:
      with pytest.raises(loop.StopEarly, match="stopped early at step 60"):
        stopper.update(step, {"metric": sign * value})
    else:
      stopper.update(step, {"metric": sign * value})
    record = stopper.record
    assert record["best"] == pytest.approx(sign * best), step
    assert (record["best_step"], record["evaluations_without_improvement"]
            ) == (best_step, without), step
  assert record["stopped_early_at_step"] == 60
  saved = json.load(open(tmp_path / "early_stopping.json"))
  assert saved == record
  resumed = loop.EarlyStopping(str(tmp_path), "metric", mode, patience=2,
                               min_delta=0.01)
  resumed.update(50, {"metric": sign * 0.0})       # replayed: not counted
  assert resumed.record == saved
