"""k-fold partitions (`prepare classification --folds=K`): the seeded,
stratified assignment, each fold's record files holding exactly the rows they
claim, and a fold task streaming exactly the other folds' rows. The sweep
over folds is in tests/e2e/test_kfold.py."""
import collections
import json

import pytest
import tensorflow as tf

from bertexp import cli
from bertexp.data import folds
from bertexp.tasks.classification import task as classification
from conftest import TINY_VOCAB


def test_folds_partition_the_rows_stratified_and_repeat_with_the_seed():
  labels = [0] * 30 + [1] * 10 + [2] * 7
  assignment = folds.assign(labels, len(labels), 5, seed=3)
  assert sorted(collections.Counter(assignment).values()) == [9, 9, 9, 10, 10]
  for label in (0, 1, 2):                      # each label spread evenly
    per_fold = collections.Counter(
        f for f, l in zip(assignment, labels) if l == label)
    assert max(per_fold.values()) - min(per_fold.get(k, 0) for k in range(5)) <= 1
  assert folds.assign(labels, len(labels), 5, seed=3) == assignment
  assert folds.assign(labels, len(labels), 5, seed=4) != assignment
  with pytest.raises(ValueError, match="at least 2 folds"):
    folds.assign(labels, 3, 5, seed=3)


def _records(path):
  """{example_id: input_word_ids tuple} of a record file."""
  found = {}
  for raw in tf.data.TFRecordDataset(path):
    example = tf.train.Example.FromString(raw.numpy())
    feature = example.features.feature
    found[int(feature["example_id"].int64_list.value[0])] = tuple(
        feature["input_word_ids"].int64_list.value)
  return found


@pytest.fixture(scope="module")
def three_folds(tmp_path_factory):
  """23 distinct labelled sentences (an odd count: folds of 8, 8 and 7)
  prepared with --folds=3."""
  root = tmp_path_factory.mktemp("three_folds")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(TINY_VOCAB) + "\n")
  words = [(a, n, p) for a in ("good", "bad", "great", "dull", "fun")
           for n in ("movie", "film", "plot") for p in ("!", ".")]
  with open(root / "train.tsv", "w") as f:
    f.write("sentence\tlabel\n")
    for i, (a, n, p) in enumerate(words[:23]):
      f.write(f"the {n} was {a} {p}\t{int(a in ('good', 'great', 'fun'))}\n")
  (root / "dev.tsv").write_text("sentence\tlabel\nthe movie was fun !\t1\n")
  assert cli.main(["prepare", "classification", "--task_name=odd",
                   f"--train_file={root}/train.tsv",
                   f"--eval_file={root}/dev.tsv", "--text_columns=sentence",
                   "--label_column=label", f"--vocab_file={vocab}",
                   f"--output_dir={root}/data", "--max_seq_length=12",
                   "--folds=3", "--fold_seed=5"]) == 0
  return root, json.load(open(root / "data" / "odd_meta_data"))


def test_three_folds_of_an_odd_count_hold_out_disjoint_rows_covering_all(
    three_folds):
  """Fold k's held-out records are the rows assigned to k; its training
  records are every other row, token for token as in the full training
  file; the held-out parts are disjoint and cover all 23 rows."""
  root, meta = three_folds
  assignment = meta["folds"]["assignment"]
  assert len(assignment) == 23
  assert sorted(assignment.count(k) for k in range(3)) == [7, 8, 8]
  full = _records(f"{root}/data/odd_train.tf_record")
  assert sorted(full) == list(range(23))
  held_out = []
  for k in range(3):
    train = _records(f"{root}/data/odd_fold{k}_train.tf_record")
    held = _records(f"{root}/data/odd_fold{k}_eval.tf_record")
    assert sorted(held) == [i for i in range(23) if assignment[i] == k]
    assert sorted(train) == [i for i in range(23) if assignment[i] != k]
    assert not set(train) & set(held)
    for i, ids in {**train, **held}.items():
      assert ids == full[i], i                 # the row it claims to be
    held_out += list(held)
  assert sorted(held_out) == list(range(23))


def test_a_fold_task_trains_on_its_folds_training_records_only(
    three_folds, tiny_config):
  """ClassificationTask(fold=k) streams exactly the other folds' rows in
  training (one epoch, file order) and evaluates on fold k's."""
  root, meta = three_folds
  assignment = meta["folds"]["assignment"]
  full = _records(f"{root}/data/odd_train.tf_record")
  for k in range(3):
    task = classification.ClassificationTask(
        bert_config_file=tiny_config,
        meta_data_path=f"{root}/data/odd_meta_data", fold=k,
        shuffle_buffer_size=0)
    size = task.num_train_examples()
    assert size == 23 - assignment.count(k)
    features, _ = next(iter(task.build_inputs("train", batch_size=size)))
    seen = sorted(tuple(row) for row in features["input_word_ids"].numpy())
    assert seen == sorted(ids for i, ids in full.items() if assignment[i] != k)
    assert task.eval_splits() == {"eval": assignment.count(k)}
