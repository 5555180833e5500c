"""bertexp -> Hugging Face: `bertexp convert-checkpoint --to=huggingface`.

Writes what transformers' `from_pretrained` reads: config.json,
model.safetensors (PyTorch layout: Linear weights [out, in]) and the
tokenizer's files (WordPiece: vocab.txt, tokenizer_config.json and
special_tokens_map.json; SentencePiece: the model file and
tokenizer_config.json). Every encoder family goes out through its own
Hugging Face mapping (the one its conversion reads). The model class follows
the checkpoint's head, as the task that trains that head declares it (a
HeadMapping in its task module, gathered by the command line): e.g. the
classification task's `classifier` [H, L] -> BertForSequenceClassification
(L == 1: problem_type "regression"; ELECTRA's and RoBERTa's heads are
renamed to their `classifier.dense` + `classifier.out_proj`), SQuAD's
`span_head` -> BertForQuestionAnswering's `qa_outputs`; a checkpoint with no
declared head -> BertModel (ElectraModel, DebertaV2Model...).

The input is a training run's MODEL_DIR (its newest intact checkpoint), a
checkpoint prefix, or a bertexp encoder folder. bert_config.json, the
vocabulary and the label names come from the run's config.gin
(BERT_CONFIG_FILE, INPUT_META_DATA_PATH) or from files beside the
checkpoint, unless given.
"""
import dataclasses
import json
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from bertexp.checkpoints import run_dir
from bertexp.checkpoints import run_files
from bertexp.model.encoders import tokenizers
from bertexp.model import encoders
from bertexp.util import fileio
from bertexp.util import gin_text

_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def _checkpoint_prefix(path):
  """(checkpoint prefix, run folder or None) of a MODEL_DIR, a prefix, a
  best_checkpoint/ folder or an encoder folder (see run_dir.resolve)."""
  prefix = run_dir.resolve(path)
  if run_dir.is_model_dir(path):
    return prefix, path
  parent = path.rstrip("/").rsplit("/", 1)[0]
  if run_dir.best_checkpoint_prefix(path) and run_dir.is_model_dir(parent):
    return prefix, parent                      # MODEL_DIR/best_checkpoint
  return prefix, None


def _macro(run_folder, name):
  """A string macro's path in the run's config.gin (a relative one joined
  to the folder the run was started from), else None."""
  config = run_files.config(run_folder)
  if not tf.io.gfile.exists(config):
    return None
  return gin_text.recorded_macro(fileio.read_text(config), name)


def encoder_tensors(checkpoint, object_path, config, source):
  """{Hugging Face name (without the model prefix): float32 array} of the
  encoder at `object_path` ("model/encoder/" or "encoder/") in
  `checkpoint`, restored into `config`'s family and read through its
  Hugging Face mapping.

  Raises:
    ValueError: the checkpoint's encoder does not fit `config` (naming
      `source`, the config file).
  """
  family = encoders.family_of(config)
  encoder = family.build(config, False).build_variables()
  root = tf.train.Checkpoint(encoder=encoder)
  if object_path.startswith("model/"):
    root = tf.train.Checkpoint(model=root)
  keys = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
  extra_block = f"{object_path}blocks/{len(encoder.blocks)}/"
  try:
    if any(key.startswith(extra_block) for key in keys):
      raise AssertionError("more blocks than num_hidden_layers")
    root.read(checkpoint).expect_partial().assert_existing_objects_matched()
  except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as e:
    reason = str(e).strip().splitlines()[0][:200]
    raise ValueError(f"{checkpoint}: its encoder does not match {source} "
                     f"({reason})") from None
  return {name: np.asarray(how(variable.numpy()) if how else variable.numpy(),
                           np.float32)
          for variable, name, how in family.hf_assignments(encoder, {})}


def model_tensors(family, encoder, head, head_tensors):
  """The model file's tensors: the encoder's under the family's module
  prefix when there is a head (`head`, a HeadMapping), head-side layers
  (hf_optional_sources, hf_head_renames) beside it."""
  if head is None:
    return dict(encoder)
  renames = family.hf_head_renames.get(head.architecture, {})
  outside = {name.rsplit(".", 1)[0] for name in family.hf_optional_sources}
  tensors = {}
  for name, value in list(encoder.items()) + list(head_tensors.items()):
    module, leaf = name.rsplit(".", 1)
    is_head = name in head_tensors
    if module in renames:
      name = f"{renames[module]}.{leaf}"
    elif not is_head and module not in outside:
      name = f"{family.hf_prefix}.{name}"
    tensors[name] = value
  return tensors


@dataclasses.dataclass(frozen=True)
class HeadMapping:
  """How a task's fine-tuning head goes to transformers: one dense layer.

  Attributes:
    task: the gin name of the task that trains it
      ("bertexp.ClassificationTask"): a run's checkpoint is read for the
      heads of the tasks its config.gin refers to.
    layer: the head layer's attribute on the task's model, which names its
      variables in a training checkpoint (`model/<layer>/kernel`).
    hf_module: transformers' module for it ("classifier", "qa_outputs").
    architecture: the transformers class after the family's prefix
      ("ForSequenceClassification" -> BertForSequenceClassification).
    labels: what config.json says of the layer's outputs: "none", "names"
      (num_labels and id2label from the run's label names) or
      "names_or_regression" (as "names"; one output is problem_type
      "regression").
  """
  task: str
  layer: str
  hf_module: str
  architecture: str
  labels: str = "none"


@dataclasses.dataclass(frozen=True)
class ExtraFiles:
  """Files of a task's own that go into its runs' Hugging Face folders.

  Attributes:
    task: the gin name of the task ("bertexp.EmbeddingTask"): only runs of
      it (or whose config.gin refers to it) get the files.
    files: (checkpoint reader, encoder config) -> {path in the folder:
      text}; {} for a checkpoint without what it writes.
  """
  task: str
  files: Callable[..., dict]


def _of_run_tasks(run_folder, declared):
  """What tasks declare (HeadMappings, ExtraFiles) for the tasks a run's
  config.gin refers to (its task; a distillation's student task), so that
  another task's layer of the same name (a plugin's `scorer`) is never
  taken for a shipped task's. All of it for a checkpoint without its run's
  config.gin (a bare prefix) or one that binds no task."""
  config = run_folder and run_files.config(run_folder)
  text = fileio.read_text(config) if config and tf.io.gfile.exists(
      config) else ""
  if not gin_text.binds(text, "experiment.task"):
    return tuple(declared)
  referenced = gin_text.references(text)
  return tuple(d for d in declared if gin_text.refers_to(referenced, d.task))


def _layers_left_out(shapes, prefix, head):
  """The model's top-level layers in the checkpoint besides the encoder
  and the exported head (a plugin's head, pretraining's MLM and NSP)."""
  if prefix != "model/encoder/":
    return []
  layers = {name.split("/")[1] for name in shapes
            if name.startswith("model/") and name.endswith(_SUFFIX)}
  return sorted(layers - {"encoder", head and head.layer})


def _head(reader, heads):
  """(the HeadMapping found or None, {HF name: array}) of a training
  checkpoint's fine-tuning head.

  Raises:
    ValueError: the checkpoint holds more than one declared head.
  """
  shapes = reader.get_variable_to_shape_map()
  found = [h for h in heads if f"model/{h.layer}/kernel{_SUFFIX}" in shapes]
  if len(found) > 1:
    raise ValueError(f"checkpoint holds the heads of {len(found)} tasks "
                     f"({', '.join(h.layer for h in found)}): expected one")
  if not found:
    return None, {}
  head = found[0]
  kernel = reader.get_tensor(f"model/{head.layer}/kernel{_SUFFIX}")
  bias = reader.get_tensor(f"model/{head.layer}/bias{_SUFFIX}")
  return head, {f"{head.hf_module}.weight": kernel.T.astype(np.float32),
                f"{head.hf_module}.bias": bias.astype(np.float32)}


def hf_config(config, model_type, head=None, num_labels=None,
              label_names=None):
  """config.json of `config`'s family as transformers' `model_type` (one
  of the family's hf_model_types), with `head` (a HeadMapping; None: the
  encoder alone). bertexp's config fields carry transformers' names."""
  family = encoders.family_of(config)
  values = {k: v for k, v in dataclasses.asdict(config).items()
            if k != "family"}
  values["hidden_act"] = {"gelu_tanh": "gelu_new", "swish": "silu"}.get(
      config.hidden_act, config.hidden_act)
  values.setdefault("pad_token_id", 0)
  values["model_type"] = model_type
  values["architectures"] = [family.hf_class(model_type) + (
      head.architecture if head else "Model")]
  if head and head.labels != "none":
    values["num_labels"] = num_labels
    if num_labels == 1 and head.labels == "names_or_regression":
      values["problem_type"] = "regression"
    else:
      names = list(label_names or [str(i) for i in range(num_labels)])
      values["id2label"] = {str(i): n for i, n in enumerate(names)}
      values["label2id"] = {n: i for i, n in enumerate(names)}
  return values


def _tokenizer_files(do_lower_case):
  config = {"tokenizer_class": "BertTokenizer", "do_lower_case": do_lower_case,
            "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
            "cls_token": "[CLS]", "mask_token": "[MASK]",
            "tokenize_chinese_chars": True, "strip_accents": None}
  special = {k: config[k] for k in ("unk_token", "sep_token", "pad_token",
                                    "cls_token", "mask_token")}
  return {"tokenizer_config.json": config, "special_tokens_map.json": special}


def _sources(run_folder, checkpoint, bert_config_file, vocab_file):
  """(bert_config.json, the tokenizer's file: WordPiece vocab.txt or a
  SentencePiece model, meta data or None) for the export."""
  beside = checkpoint.rsplit("/", 1)[0]
  bert_config_file = (bert_config_file or
                      (run_folder and _macro(run_folder, "BERT_CONFIG_FILE")) or
                      fileio.join(beside, "bert_config.json"))
  if not tf.io.gfile.exists(bert_config_file):
    raise FileNotFoundError(f"{bert_config_file}: no bert_config.json (pass "
                            "--bert_config_file)")
  meta_path = run_folder and _macro(run_folder, "INPUT_META_DATA_PATH")
  meta = (fileio.read_json(meta_path)
          if meta_path and tf.io.gfile.exists(meta_path) else None)
  names = list(dict.fromkeys(spec.files[0]
                             for spec in tokenizers.specs().values()))
  candidates = [vocab_file, meta and meta.get("vocab_file")] + [
      fileio.join(folder, name) for folder in (
          bert_config_file.rsplit("/", 1)[0], beside) for name in names]
  vocab = next((v for v in candidates if v and tf.io.gfile.exists(v)), None)
  if vocab is None:
    raise FileNotFoundError(f"{checkpoint}: no tokenizer file ({', '.join(names)})"
                            f" found beside {bert_config_file} or the "
                            "checkpoint (pass --vocab_file)")
  return bert_config_file, vocab, meta


def export_huggingface(input_path, output_dir, bert_config_file=None,
                       vocab_file=None, heads: Sequence[HeadMapping] = (),
                       extra_files: Sequence[ExtraFiles] = ()):
  """Writes a Hugging Face model folder.

  Args:
    input_path: a MODEL_DIR, a checkpoint prefix or an encoder folder.
    output_dir: the folder to write (whole or not at all).
    bert_config_file, vocab_file: override what the run's config.gin says
      (vocab_file: WordPiece vocab.txt or the family's SentencePiece model).
    heads: the HeadMappings the tasks declare; the checkpoint's head is
      the one whose layer it holds, among those of the run's tasks.
    extra_files: the ExtraFiles the tasks declare (e.g. an embedding
      model's sentence-transformers files); those of the run's tasks are
      written.
  Returns:
    (the transformers architecture, {HF name: array}).
  Raises:
    FileNotFoundError: no config, tokenizer file or checkpoint.
    ValueError: no encoder in the checkpoint, or one that does not fit the
      config (layer count, shapes).
  """
  from safetensors.numpy import save as save_safetensors
  checkpoint, run_folder = _checkpoint_prefix(input_path)
  bert_config_file, vocab, meta = _sources(run_folder, checkpoint,
                                           bert_config_file, vocab_file)
  config = encoders.read_config(bert_config_file)
  family = encoders.family_of(config)
  if not family.hf_exports:
    raise ValueError(f"{bert_config_file}: the {family.name!r} encoder family "
                     "does not go back to Hugging Face yet")
  reader = tf.train.load_checkpoint(checkpoint)
  shapes = reader.get_variable_to_shape_map()
  prefix = ("model/encoder/" if any(k.startswith("model/encoder/") for k in shapes)
            else "encoder/")
  if not any(k.startswith(prefix) for k in shapes):
    raise ValueError(f"{checkpoint}: holds no bertexp encoder")
  head_mapping, head = _head(reader, _of_run_tasks(run_folder, heads))
  tensors = model_tensors(
      family, encoder_tensors(checkpoint, prefix, config, bert_config_file),
      head_mapping, head)
  num_labels = (head[f"{head_mapping.hf_module}.bias"].shape[0]
                if head_mapping else None)
  file_family = tokenizers.model_type_of_file(vocab)
  model_type = (file_family if file_family in family.hf_model_types
                else family.hf_model_types[0])
  values = hf_config(config, model_type, head_mapping, num_labels,
                     meta and meta.get("label_names"))
  lower = True if meta is None else bool(meta.get("do_lower_case", True))
  with fileio.atomic_folder(output_dir) as tmp:
    fileio.write_text(fileio.join(tmp, "config.json"),
                      json.dumps(values, indent=2, sort_keys=True) + "\n")
    with tf.io.gfile.GFile(fileio.join(tmp, "model.safetensors"), "wb") as f:
      f.write(save_safetensors({k: np.ascontiguousarray(v)
                                for k, v in tensors.items()},
                               metadata={"format": "pt"}))
    _write_tokenizer(tmp, vocab, file_family, lower)
    for extra in _of_run_tasks(run_folder, extra_files):
      for name, text in extra.files(reader, config).items():
        fileio.makedirs(fileio.join(tmp, *name.split("/")[:-1]))
        fileio.write_text(fileio.join(tmp, name), text)
  architecture = values["architectures"][0]
  left_out = _layers_left_out(shapes, prefix, head_mapping)
  print(f"wrote {architecture} ({len(tensors)} tensors) from {checkpoint} to "
        f"{output_dir}" + (f"; not exported (no task of the run declares "
                           f"them for transformers): {', '.join(left_out)}"
                           if left_out else ""), flush=True)
  return architecture, tensors


def _write_tokenizer(folder, vocab, file_family, do_lower_case):
  """WordPiece: vocab.txt, tokenizer_config.json, special_tokens_map.json.
  Another family's tokenizer (its spec, by the model_type `file_family` of
  the file): its files, and tokenizer_config.json (the one beside it, else
  the family's tokenizer class and casing)."""
  if file_family is None:
    tf.io.gfile.copy(vocab, fileio.join(folder, "vocab.txt"), overwrite=True)
    for name, content in _tokenizer_files(do_lower_case).items():
      fileio.write_text(fileio.join(folder, name),
                        json.dumps(content, indent=2) + "\n")
    return
  spec = tokenizers.spec_for(file_family)
  for name in spec.files:
    tf.io.gfile.copy(fileio.join(vocab.rsplit("/", 1)[0], name),
                     fileio.join(folder, name), overwrite=True)
  beside = fileio.join(vocab.rsplit("/", 1)[0], "tokenizer_config.json")
  settings = (fileio.read_json(beside) if tf.io.gfile.exists(beside) else
              {"do_lower_case": do_lower_case} if spec.kind == "sentencepiece"
              else {})
  settings.setdefault("tokenizer_class", spec.hf_tokenizer_class)
  fileio.write_text(fileio.join(folder, "tokenizer_config.json"),
                    json.dumps(settings, indent=2) + "\n")
