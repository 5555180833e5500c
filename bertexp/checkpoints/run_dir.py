"""Which checkpoint a path means, for every caller: one resolver.

    prefix = resolve("runs/mnli")                  # newest intact ckpt-N
    prefix = resolve("runs/mnli/best_checkpoint")  # the best evaluation's
    prefix = resolve("models/minilm")              # encoder folder: bert_model.ckpt
    prefix = resolve("runs/mnli/ckpt-300")         # a prefix as given

INIT_CHECKPOINT, eval / predict / export (`PREDICT_CHECKPOINT_PATH`),
`convert-checkpoint --to=huggingface`, `bertexp.load_encoder` and the run
provenance all read paths through `resolve`, so a damaged newest checkpoint
is skipped (with a warning naming it) wherever a MODEL_DIR is given, and a
damaged checkpoint named explicitly is an error, never a silent load.
"""
import logging
import re

import tensorflow as tf

from bertexp.checkpoints import run_files
from bertexp.checkpoints import verified
from bertexp.model import encoders
from bertexp.util import fileio

ENCODER_PREFIX = "bert_model.ckpt"
BEST_INFO = run_files.BEST_INFO
EARLY_STOPPING_INFO = run_files.EARLY_STOPPING_INFO


# The config file of an encoder folder (beside bert_model.ckpt).
ENCODER_CONFIG = "bert_config.json"

def stopped_early_at(model_dir):
  """The step a run stopped early at (its early_stopping.json), or None."""
  path = run_files.early_stopping(model_dir)
  if not tf.io.gfile.exists(path):
    return None
  return fileio.read_json(path).get("stopped_early_at_step")


def best_checkpoint_prefix(folder):
  """The prefix a best_checkpoint/ folder's JSON names.

  Args:
    folder: a folder that may hold best_checkpoint.json.
  Returns:
    The checkpoint prefix (relative names are joined to `folder`), or None
    when the folder has no best_checkpoint.json.
  Raises:
    ValueError: the JSON is unreadable or names no checkpoint.
  """
  info_path = run_files.best_info(folder)
  if not tf.io.gfile.exists(info_path):
    return None
  info = fileio.read_json(info_path)
  checkpoint = info.get("checkpoint") if isinstance(info, dict) else None
  if not isinstance(checkpoint, str) or not checkpoint:
    raise ValueError(f"{info_path}: field 'checkpoint' must name a checkpoint "
                     "prefix such as \"ckpt-300\"")
  if checkpoint.startswith("/") or "://" in checkpoint:   # older runs
    return checkpoint
  return fileio.join(folder, checkpoint)


def _checked(prefix, intact, where):
  """`prefix` if it is intact (or the check is off); CheckpointError else."""
  if intact:
    why = verified.problem(prefix)
    if why:
      raise verified.CheckpointError(f"{where}: damaged checkpoint: {why}")
  return prefix


def resolve(path, *, intact=True):
  """The checkpoint prefix that `path` means.

  Tried in this order:
    1. a checkpoint prefix (`path.index` exists): `path` itself;
    2. a best_checkpoint/ folder (best_checkpoint.json): the prefix it names;
    3. an encoder folder (`bert_model.ckpt.index`, as `convert-checkpoint`
       and pretraining's MODEL_DIR/encoder write it);
    4. a MODEL_DIR: its newest ckpt-N; with `intact`, the newest intact one
       (each damaged newer one is logged and skipped);
    5. any folder with a TensorFlow `checkpoint` state file: the prefix it
       names.

  Args:
    path: a prefix or a folder, local or on a TensorFlow file system.
    intact: check what is returned (manifest sizes and CRC-32s, or every
      tensor's own checksum when there is no manifest).
  Returns:
    The checkpoint prefix, e.g. "runs/mnli/ckpt-300".
  Raises:
    FileNotFoundError: `path` holds no checkpoint.
    CheckpointError: the checkpoint named (or every ckpt-N) is damaged.
  """
  path = str(path).rstrip("/") or "/"
  if tf.io.gfile.exists(path + ".index"):
    return _checked(path, intact, path)
  if not tf.io.gfile.isdir(path):
    raise FileNotFoundError(f"{path}: no checkpoint (neither {path}.index nor "
                            "a folder)")
  best = best_checkpoint_prefix(path)
  if best:
    return _checked(best, intact, run_files.best_info(path))
  encoder = fileio.join(path, ENCODER_PREFIX)
  if tf.io.gfile.exists(encoder + ".index"):
    return _checked(encoder, intact, path)
  if intact:
    latest = verified.latest_intact_checkpoint(path)
  else:
    latest = next(iter(verified.numbered_checkpoints(path)), None)
  if latest:
    return latest
  named = tf.train.latest_checkpoint(path)
  if named:
    return _checked(named, intact, run_files.checkpoint_state(path))
  raise FileNotFoundError(
      f"{path}: folder holds no checkpoint (expected a MODEL_DIR with ckpt-N, "
      f"a best_checkpoint/ folder or an encoder folder with {ENCODER_PREFIX})")


def is_model_dir(path):
  """True when `path` is a run folder (it holds ckpt-N checkpoints)."""
  return bool(tf.io.gfile.isdir(path) and verified.numbered_checkpoints(path))


def _is_training_checkpoint(prefix):
  """True when `prefix` was written by training (names under model/)."""
  # A reader on the prefix itself: tf.train.list_variables takes a prefix on
  # ram:// (where a prefix of files reads as a folder) for a directory.
  names = tf.compat.v1.train.NewCheckpointReader(
      prefix).get_variable_to_shape_map()
  return any(name.startswith("model/") for name in names)


def restore_encoder(encoder, checkpoint):
  """Restores encoder weights only (what INIT_CHECKPOINT means).

  Args:
    encoder: a built encoder (of any family).
    checkpoint: anything `resolve` takes: an encoder checkpoint, or a
      training checkpoint (whose heads are left out).
  Returns:
    The prefix read.
  Raises:
    AssertionError: an encoder variable is missing from the checkpoint.
  """
  prefix = resolve(checkpoint)
  if _is_training_checkpoint(prefix):
    root = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=encoder))
    status = root.read(prefix).expect_partial()
  else:
    status = tf.train.Checkpoint(encoder=encoder).read(prefix)
  status.assert_existing_objects_matched()
  return prefix


def load_encoder(config_or_folder, checkpoint=None):
  """An encoder built from its config, with a checkpoint's weights.

  Args:
    config_or_folder: a config file (bert_config.json), or an encoder folder
      (what `convert-checkpoint` and pretraining write: bert_config.json
      beside bert_model.ckpt), whose weights are then loaded unless
      `checkpoint` says otherwise.
    checkpoint: anything `resolve` takes; None: the folder's own weights
      for a folder, random weights for a config file.
  Returns:
    A built encoder of the config's family.
  Raises:
    FileNotFoundError: a folder without bert_config.json; see `resolve`.
    CheckpointError: see `resolve`.
  """
  config_file = config_or_folder
  if tf.io.gfile.isdir(config_or_folder):
    config_file = fileio.join(config_or_folder, ENCODER_CONFIG)
    if not tf.io.gfile.exists(config_file):
      raise FileNotFoundError(f"{config_or_folder}: no {ENCODER_CONFIG} (an "
                              "encoder folder from convert-checkpoint, or "
                              "pass the config file and the checkpoint)")
    checkpoint = checkpoint or config_or_folder
  config = encoders.read_config(config_file)
  encoder = encoders.family_of(config).build(config, False).build_variables()
  if checkpoint:
    restore_encoder(encoder, checkpoint)
  return encoder


def restore_model(model, model_dir, checkpoint_path=None):
  """Weights for eval / predict / export.

  Args:
    model: the task's built model.
    model_dir: the run folder (its newest intact ckpt-N is used; its
      best_checkpoint/ when training stopped early).
    checkpoint_path: PREDICT_CHECKPOINT_PATH, anything `resolve` takes; it
      wins over `model_dir`. An encoder folder (a converted model as
      shipped) is enough for a model whose only weights are its encoder's
      (sentence embeddings).
  Returns:
    The prefix read.
  Raises:
    FileNotFoundError: nothing to restore (train first).
    CheckpointError: the checkpoint named is damaged.
    ValueError: an encoder checkpoint for a model with weights of its own
      beyond the encoder (a task head it does not hold).
  """
  best = model_dir and run_files.best_checkpoint(model_dir)
  if model_dir and not checkpoint_path and stopped_early_at(
      model_dir) is not None and best_checkpoint_prefix(best):
    checkpoint_path = best        # what early stopping kept
  try:
    path = resolve(checkpoint_path or model_dir)
  except FileNotFoundError:
    if checkpoint_path:
      raise
    raise FileNotFoundError(f"{model_dir}: no checkpoint to evaluate, predict "
                            "or export (train first or bind "
                            "PREDICT_CHECKPOINT_PATH)") from None
  if not _is_training_checkpoint(path):
    encoder = _check_encoder_is_the_whole_model(model, path)
    restore_encoder(encoder, path)
  else:
    tf.train.Checkpoint(model=model).read(path).expect_partial() \
        .assert_existing_objects_matched()
  logging.info("restored model weights from %s", path)
  return path


def _check_encoder_is_the_whole_model(model, path):
  """`model`'s encoder (the model itself when it has no `encoder`); raises
  ValueError when `model` trains variables outside it, which the encoder
  checkpoint `path` cannot hold (records a model sets when it is built,
  such as its pooling, are not trained)."""
  encoder = getattr(model, "encoder", model)
  inside = {v.ref() for v in encoder.variables}
  others = sorted(v.name for v in model.trainable_variables
                  if v.ref() not in inside)
  if others:
    raise ValueError(
        f"{path} holds an encoder's weights only, and this task's model has "
        f"{len(others)} more ({others[0]}, ...): name a run's checkpoint "
        "(a MODEL_DIR or its ckpt-N) that trained them")
  return encoder


def layer_report(prefix, model_layers):
  """"" when the checkpoint at `prefix` has the model's depth; else which of
  its layers went where (and a warning in the log): a 6-layer checkpoint
  loads into a 3-layer model as its layers 0-2, the rest unused."""
  names = tf.compat.v1.train.NewCheckpointReader(
      prefix).get_variable_to_shape_map()      # (a prefix on ram:// too)
  blocks = {int(m.group(1)) for name in names
            for m in [re.search(r"encoder/blocks/(\d+)/", name)] if m}
  if not blocks or len(blocks) == model_layers:
    return ""
  used = min(model_layers, len(blocks))
  report = (f" (layers 0-{used - 1} of the checkpoint's {len(blocks)} -> "
            f"the model's layers 0-{used - 1} of {model_layers}")
  if len(blocks) > model_layers:
    report += f"; checkpoint layers {used}-{len(blocks) - 1} unused"
  report += ")"
  logging.warning("INIT_CHECKPOINT %s has %d layers, the model %d:%s", prefix,
                  len(blocks), model_layers, report)
  return report


def initialise_from_checkpoint(model, optimizer, init_checkpoint,
                               with_optimizer=False):
  """Starts a run from INIT_CHECKPOINT.

  An encoder checkpoint (`convert-checkpoint` output, a pretraining run's
  MODEL_DIR/encoder) initialises the encoder. A bertexp training checkpoint
  (MODEL_DIR/ckpt-N or MODEL_DIR itself: names under model/) initialises the
  encoder and every head it has (phase 2 of pretraining keeps phase 1's MLM
  and NSP heads); `with_optimizer` also takes its optimizer moments. The step
  restarts at 0 either way: the new run has its own schedule.

  Args:
    model: the task's built model (it has an `encoder`).
    optimizer: the built optimizer.
    init_checkpoint: anything `resolve` takes.
    with_optimizer: also restore the optimizer's slots.
  Returns:
    What was restored, for the log.
  Raises:
    ValueError: `with_optimizer` on an encoder-only checkpoint, or a NaN or
      Inf among the encoder's restored weights.
    AssertionError: an encoder variable is missing from the checkpoint.
  """
  prefix = restore_encoder(model.encoder, init_checkpoint)
  layers = layer_report(prefix, len(model.encoder.blocks))
  bad = verified.nonfinite_variables(model.encoder.variables)
  if bad:
    raise ValueError(f"INIT_CHECKPOINT {prefix} holds non-finite values (NaN "
                     f"or Inf) in {', '.join(bad[:3])}: it is damaged or "
                     "comes from a diverged run; start from an earlier one")
  if not _is_training_checkpoint(prefix):
    if with_optimizer:
      raise ValueError(f"INIT_CHECKPOINT {prefix} holds an encoder only: "
                       "it has no optimizer state to initialise from")
    return f"the encoder from {prefix}{layers}"
  # The encoder is restored; the heads the checkpoint has come too.
  objects = dict(model=model, optimizer=optimizer) if with_optimizer else dict(
      model=model)
  status = tf.train.Checkpoint(**objects).read(prefix).expect_partial()
  try:
    status.assert_existing_objects_matched()
    restored = "the whole model"
  except AssertionError:
    restored = "the encoder (the checkpoint has other heads)"
  if with_optimizer:
    optimizer.iterations.assign(0)
    restored += " and the optimizer state"
  return f"{restored} from {prefix}{layers}"
