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


def per_class(labels, predictions, num_labels, label_names=None):
  """{precision_<label>, recall_<label>, f1_<label>} of every label (0 when
  a label is never predicted / never present)."""
  labels, predictions = np.asarray(labels), np.asarray(predictions)
  names = list(label_names or [str(i) for i in range(num_labels)])
  result = {}
  for k, name in enumerate(names):
    tp = float(np.sum((predictions == k) & (labels == k)))
    predicted, present = float(np.sum(predictions == k)), float(np.sum(labels == k))
    result[f"precision_{name}"] = tp / predicted if predicted else 0.0
    result[f"recall_{name}"] = tp / present if present else 0.0
    result[f"f1_{name}"] = 2 * tp / (predicted + present) if tp else 0.0
  return result


def macro_f1(labels, predictions, num_labels):
  """The unweighted mean of every label's F1."""
  scores = per_class(labels, predictions, num_labels)
  return float(np.mean([scores[f"f1_{k}"] for k in range(num_labels)]))


METRICS = ("accuracy", "f1", "matthews_corrcoef", "macro_f1", "per_class")


def classification_metrics(names, labels, logits, label_names=None):
  """labels [N] int, logits [N, L] -> {metric: value}; "per_class" adds
  precision_/recall_/f1_<label> of every label."""
  predictions = np.argmax(logits, axis=-1)
  num_labels = logits.shape[-1]
  funcs = {"accuracy": accuracy, "f1": f1,
           "matthews_corrcoef": matthews_corrcoef,
           "macro_f1": lambda y, p: macro_f1(y, p, num_labels)}
  result = {}
  for name in names:
    if name == "per_class":
      result.update(per_class(labels, predictions, num_labels, label_names))
    elif name in funcs:
      result[name] = funcs[name](labels, predictions)
    else:
      raise ValueError(f"unknown classification metric {name!r}; expected "
                       f"one of {list(METRICS)}")
  return result


def regression_metrics(names, labels, values):
  """{name: value} of the regression metrics `names` (pearson, spearman, mse)."""
  funcs = {"pearson": pearson, "spearman": spearman,
           "mse": lambda y, p: float(np.mean((np.asarray(y) - p) ** 2))}
  return {name: funcs[name](labels, values) for name in names}
