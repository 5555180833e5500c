"""The teacher of a distillation: its run's model, frozen, and the layers a
student starts from."""
import logging

import tensorflow as tf
import tf_keras

from bertexp.checkpoints import run_dir
from bertexp.checkpoints import run_files


def build_teacher(student_task, config_file, run):
  """The teacher model with its run's weights, frozen.

  Args:
    student_task: the student's RecordTask (the teacher is its model on
      `config_file`).
    config_file: the teacher's encoder config.
    run: the teacher run (MODEL_DIR, best_checkpoint/ or a ckpt-N prefix).
  Returns:
    (the teacher model, the checkpoint prefix restored).
  Raises:
    ValueError: the run's checkpoint does not fit that model.
  """
  teacher = student_task.with_encoder_config(config_file).build_model()
  best = run_files.best_checkpoint(run)
  source = best if tf.io.gfile.isdir(best) else run
  try:
    prefix = run_dir.restore_model(teacher, None, checkpoint_path=source)
  except AssertionError as e:
    raise ValueError(
        f"teacher {source}: its checkpoint does not fit a "
        f"{type(student_task).__name__} model of "
        f"{config_file} ({str(e).splitlines()[0]})") from None
  teacher.trainable = False
  logging.info("teacher: %s (%d layers, width %d), frozen", prefix,
               teacher.encoder.config.num_hidden_layers,
               teacher.encoder.config.hidden_size)
  return teacher, prefix

def copy_teacher_layers(student, teacher, prefix, student_layers=None):
  """Copies the teacher's embeddings, pooler, head and the layers of
  `student_layers` into the student (None: every k-th from 0).

  Returns:
    What was copied, for the log and the Training Summary.
  Raises:
    ValueError: families, widths or layer indices that do not fit.
  """
  s_config, t_config = student.encoder.config, teacher.encoder.config
  if s_config.family != t_config.family:
    raise ValueError(
        f"student_init 'teacher_layers' copies the teacher's layers: the "
        f"student is a {s_config.family} encoder, the teacher a "
        f"{t_config.family} one (use student_init 'checkpoint' or 'random')")
  for field in ("hidden_size", "intermediate_size", "num_attention_heads"):
    if getattr(s_config, field) != getattr(t_config, field):
      raise ValueError(
          f"student_init 'teacher_layers' needs the teacher's {field}: the "
          f"student has {getattr(s_config, field)}, the teacher "
          f"{getattr(t_config, field)} (use student_init 'checkpoint' or "
          "'random')")
  depth, teacher_depth = s_config.num_hidden_layers, t_config.num_hidden_layers
  chosen = student_layers
  if chosen is None:
    step = max(teacher_depth // depth, 1)
    chosen = [i * step for i in range(depth)]
  if len(chosen) != depth or not all(
      isinstance(t, int) and 0 <= t < teacher_depth for t in chosen):
    raise ValueError(f"student_layers {list(chosen)}: expected {depth} "
                     f"teacher layers in 0..{teacher_depth - 1}")
  pairs = [(student.encoder.embeddings, teacher.encoder.embeddings),
           (student.encoder.pooler, teacher.encoder.pooler)]
  pairs += [(student.encoder.blocks[i], teacher.encoder.blocks[t])
            for i, t in enumerate(chosen)]
  # The task head (same task, same labels): the classifier or span head.
  heads = [name for name, layer in vars(student).items()
           if name != "encoder" and layer is not None and getattr(
               layer, "weights", None) and isinstance(
                   getattr(teacher, name, None), tf_keras.layers.Layer)]
  pairs += [(getattr(student, name), getattr(teacher, name)) for name in heads]
  for ours, theirs in pairs:
    for variable, value in zip(ours.weights, theirs.weights):
      variable.assign(value)
  return (f"embeddings, pooler, head ({', '.join(heads)}) and teacher layers "
          f"{list(chosen)} -> student layers {list(range(depth))} (of the "
          f"teacher's {teacher_depth}) from {prefix}")
