"""Teacher outputs computed once, into TFRecords (`--mode=distill_targets`).

On a CPU the teacher's forward pass is most of a distillation step. Written
once, its outputs ride along with each training record: a target file is
its source file (the student's training records, then the unlabelled
text's) with one more feature, `teacher_logits` (float [L], the teacher's
outputs flattened), in the same record order, so a run that reads them sees
the same examples in the same order as a run that calls the teacher.

Folder layout (DistillationTask.teacher_targets):
  000-<source file name>, 001-...      one target file per source file
  teacher_targets.json                 {"teacher": the checkpoint prefix,
                                        "outputs_per_example": L,
                                        "sources": [...], "examples": N}
"""
import os

import numpy as np
import tensorflow as tf

from bertexp.data import pipeline
from bertexp.util import fileio

INFO = "teacher_targets.json"
FEATURE = "teacher_logits"


def write(folder, *, sources, decode, teacher_outputs, teacher,
          batch_size=64):
  """Runs the teacher over every source record and writes the targets.

  Args:
    folder: the output folder.
    sources: the training files, in the order training lists them.
    decode: serialized [B] -> (features, labels), the student's decoder.
    teacher_outputs: {model input: [B, S]} -> the teacher's outputs [B, ...].
    teacher: the teacher's checkpoint prefix (recorded, checked on read).
    batch_size: records per teacher call.
  Returns:
    The info written to teacher_targets.json.
  """
  fileio.makedirs(folder)
  call = tf.function(teacher_outputs, autograph=False)
  written, width = [], None
  total = 0
  for index, source in enumerate(sources):
    target = fileio.join(folder, f"{index:03d}-{os.path.basename(source)}")
    with fileio.atomic_path(target) as tmp, tf.io.TFRecordWriter(tmp) as out:
      for raw in tf.data.TFRecordDataset(source).batch(batch_size):
        features, _ = decode(raw)
        logits = call({k: features[k] for k in pipeline.MODEL_INPUTS})
        logits = np.asarray(logits, np.float32).reshape(len(raw), -1)  # [B, L]
        width = logits.shape[1]
        for record, row in zip(raw.numpy(), logits):
          example = tf.train.Example.FromString(record)
          example.features.feature[FEATURE].float_list.value.extend(row)
          out.write(example.SerializeToString())
        total += len(raw)
    written.append(target)
  info = {"teacher": teacher, "outputs_per_example": width,
          "sources": list(sources), "targets": written, "examples": total}
  fileio.write_json(fileio.join(folder, INFO), info)
  print(f"Teacher targets: {total} examples of {len(sources)} files -> "
        f"{folder}", flush=True)
  return info


def read_info(folder, *, teacher, sources):
  """The folder's info, checked against the run that reads it.

  Raises:
    FileNotFoundError: no targets written there yet.
    ValueError: targets of another teacher or other training files.
  """
  path = fileio.join(folder, INFO)
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(
        f"{path}: no teacher targets (run --mode=distill_targets with the "
        "same configuration first)")
  info = fileio.read_json(path)
  if info.get("teacher") != teacher:
    raise ValueError(f"{path}: written from teacher {info.get('teacher')}, "
                     f"not {teacher}: run --mode=distill_targets again")
  if info.get("sources") != list(sources):
    raise ValueError(f"{path}: written from {info.get('sources')}, not the "
                     f"training files {list(sources)}: run "
                     "--mode=distill_targets again")
  return info
