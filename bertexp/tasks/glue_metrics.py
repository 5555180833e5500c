"""GLUE metrics over a whole eval set, in numpy (host side, after gathering)."""
import numpy as np


def accuracy(labels, predictions):
  """The fraction of predictions equal to the labels."""
  return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1(labels, predictions, positive=1):
  """F1 of the `positive` class (MRPC, QQP)."""
  labels, predictions = np.asarray(labels), np.asarray(predictions)
  tp = np.sum((predictions == positive) & (labels == positive))
  fp = np.sum((predictions == positive) & (labels != positive))
  fn = np.sum((predictions != positive) & (labels == positive))
  if tp == 0:
    return 0.0
  return float(2 * tp / (2 * tp + fp + fn))


def matthews_corrcoef(labels, predictions):
  """Binary MCC; 0 when a row or column of the confusion matrix is empty."""
  y, p = np.asarray(labels) == 1, np.asarray(predictions) == 1
  tp, tn = float(np.sum(y & p)), float(np.sum(~y & ~p))
  fp, fn = float(np.sum(~y & p)), float(np.sum(y & ~p))
  denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(x, y):
  """Pearson's correlation of x and y (0.0 when either is constant)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  x, y = x - x.mean(), y - y.mean()
  denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
  return float(np.sum(x * y) / denominator) if denominator else 0.0


def _average_ranks(values):
  """Ranks 1..n; tied values share the mean of their ranks (as scipy does)."""
  values = np.asarray(values, np.float64)
  order = np.argsort(values, kind="mergesort")
  ranks = np.empty(len(values), np.float64)
  sorted_values = values[order]
  start = 0
  while start < len(values):
    end = start
    while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
      end += 1
    ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
    start = end + 1
  return ranks


def spearman(x, y):
  """Spearman's correlation: Pearson's of the average ranks (ties share one)."""
  return pearson(_average_ranks(x), _average_ranks(y))


# Which GLUE metrics each task reports (the first is its selection metric).
TASK_METRICS = {
    "cola": ("matthews_corrcoef", "accuracy"),
    "mrpc": ("f1", "accuracy"),
    "qqp": ("f1", "accuracy"),
    "stsb": ("spearman", "pearson"),
}


def classification_metrics(names, labels, logits):
  """labels [N] int, logits [N, L] -> {metric: value}."""
  predictions = np.argmax(logits, axis=-1)
  funcs = {"accuracy": accuracy, "f1": f1,
           "matthews_corrcoef": matthews_corrcoef}
  return {name: funcs[name](labels, predictions) for name in names}


def regression_metrics(names, labels, values):
  """{name: value} of the regression metrics `names` (pearson, spearman, mse)."""
  funcs = {"pearson": pearson, "spearman": spearman,
           "mse": lambda y, p: float(np.mean((np.asarray(y) - p) ** 2))}
  return {name: funcs[name](labels, values) for name in names}
