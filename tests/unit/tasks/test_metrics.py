"""GLUE metrics against hand-computed values."""
import pytest

from bertexp.tasks.classification import metrics as glue_metrics

LABELS = [1, 1, 1, 0, 0, 0, 1, 0]
PREDS = [1, 1, 0, 0, 0, 1, 1, 1]
# tp=3 fn=1 fp=2 tn=2


def test_accuracy_and_f1():
  assert glue_metrics.accuracy(LABELS, PREDS) == pytest.approx(5 / 8)
  assert glue_metrics.f1(LABELS, PREDS) == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))
  assert glue_metrics.f1([0, 0], [0, 0]) == 0.0


def test_matthews():
  # (3*2 - 2*1) / sqrt(5 * 4 * 4 * 3) = 4 / sqrt(240)
  assert glue_metrics.matthews_corrcoef(LABELS, PREDS) == pytest.approx(4 / 240 ** 0.5)
  assert glue_metrics.matthews_corrcoef([1, 0, 1], [1, 1, 1]) == 0.0
  assert glue_metrics.matthews_corrcoef([1, 0], [1, 0]) == pytest.approx(1.0)


def test_pearson_and_spearman_with_ties():
  x, y = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 5.0, 9.0]
  # mean x 2.5, mean y 5; dx = -1.5,-.5,.5,1.5; dy = -3,-1,0,4
  cov = 4.5 + 0.5 + 0 + 6.0
  expected = cov / ((5.0 * 26.0) ** 0.5)
  assert glue_metrics.pearson(x, y) == pytest.approx(expected)
  assert glue_metrics.spearman(x, y) == pytest.approx(1.0)
  # ties: ranks of [1, 2, 2, 3] are [1, 2.5, 2.5, 4]
  assert glue_metrics._average_ranks([1, 2, 2, 3]).tolist() == [1, 2.5, 2.5, 4]
  assert glue_metrics.spearman([1, 2, 2, 3], [4, 3, 2, 1]) == pytest.approx(
      glue_metrics.pearson([1, 2.5, 2.5, 4], [4, 3, 2, 1]))


def test_task_metric_selection():
  import numpy as np
  logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
  result = glue_metrics.classification_metrics(("f1", "accuracy"), [1, 1, 1], logits)
  assert result == {"f1": pytest.approx(0.8), "accuracy": pytest.approx(2 / 3)}
