"""bertexp -> Hugging Face: `bertexp convert-checkpoint --to=huggingface`.

Writes what transformers' `from_pretrained` reads: config.json,
model.safetensors (PyTorch layout: Linear weights [out, in]), vocab.txt,
tokenizer_config.json and special_tokens_map.json. The model class follows
the checkpoint's head, as the task that trains that head declares it (a
HeadMapping in its task module, gathered by the command line): e.g. the
classification task's `classifier` [H, L] -> BertForSequenceClassification
(L == 1: problem_type "regression"), SQuAD's `span_head` ->
BertForQuestionAnswering's `qa_outputs`; a checkpoint with no declared head
-> BertModel.

The input is a training run's MODEL_DIR (its newest intact checkpoint), a
checkpoint prefix, or a bertexp encoder folder. bert_config.json, the
vocabulary and the label names come from the run's config.gin
(BERT_CONFIG_FILE, INPUT_META_DATA_PATH) or from files beside the
checkpoint, unless given.
"""
import dataclasses
import json
import re
from typing import Sequence

import numpy as np
import tensorflow as tf

from bertexp.checkpoints import run_dir
from bertexp.model import encoders
from bertexp.util import fileio

# bertexp's Transformer-block attributes -> Hugging Face module names.
_BLOCK = {"query": "attention.self.query", "key": "attention.self.key",
          "value": "attention.self.value",
          "attention_output": "attention.output.dense",
          "attention_layer_norm": "attention.output.LayerNorm",
          "intermediate": "intermediate.dense", "output_dense": "output.dense",
          "output_layer_norm": "output.LayerNorm"}
_EMBEDDINGS = {"word_embeddings": "word_embeddings.weight",
               "position_embeddings": "position_embeddings.weight",
               "type_embeddings": "token_type_embeddings.weight",
               "layer_norm/gamma": "LayerNorm.weight",
               "layer_norm/beta": "LayerNorm.bias"}
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
  """A string macro's value in the run's config.gin, else None."""
  config = fileio.join(run_folder, "config.gin")
  if not tf.io.gfile.exists(config):
    return None
  found = re.findall(rf"^\s*{name}\s*=\s*['\"](.+?)['\"]\s*$",
                     fileio.read_text(config), flags=re.M)
  return found[-1] if found else None


def hf_tensors(reader, prefix):
  """{Hugging Face name: float32 array} of the encoder under `prefix`
  ("model/encoder/" or "encoder/"), without the "bert." prefix."""
  shapes = reader.get_variable_to_shape_map()
  get = lambda name: reader.get_tensor(prefix + name + _SUFFIX).astype(np.float32)
  tensors = {f"embeddings.{hf}": get(f"embeddings/{ours}")
             for ours, hf in _EMBEDDINGS.items()}
  layers = sorted({int(m.group(1)) for key in shapes
                   for m in [re.match(re.escape(prefix) + r"blocks/(\d+)/", key)]
                   if m})
  for i in layers:
    for ours, hf in _BLOCK.items():
      name = f"encoder.layer.{i}.{hf}"
      if ours.endswith("layer_norm"):
        tensors[name + ".weight"] = get(f"blocks/{i}/{ours}/gamma")
        tensors[name + ".bias"] = get(f"blocks/{i}/{ours}/beta")
      else:   # Keras kernels are [in, out]; PyTorch Linear weights [out, in]
        tensors[name + ".weight"] = get(f"blocks/{i}/{ours}/kernel").T
        tensors[name + ".bias"] = get(f"blocks/{i}/{ours}/bias")
  if prefix + "pooler/kernel" + _SUFFIX in shapes:
    tensors["pooler.dense.weight"] = get("pooler/kernel").T
    tensors["pooler.dense.bias"] = get("pooler/bias")
  return tensors


@dataclasses.dataclass(frozen=True)
class HeadMapping:
  """How a task's fine-tuning head goes to transformers: one dense layer.

  Attributes:
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
  layer: str
  hf_module: str
  architecture: str
  labels: str = "none"


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


def hf_config(config, head=None, num_labels=None, label_names=None):
  """config.json of transformers' BERT with `head` (a HeadMapping; None:
  the encoder alone)."""
  act = {"gelu_tanh": "gelu_new", "swish": "silu"}.get(config.hidden_act,
                                                        config.hidden_act)
  values = {
      "model_type": "bert", "vocab_size": config.vocab_size,
      "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_hidden_layers,
      "num_attention_heads": config.num_attention_heads,
      "intermediate_size": config.intermediate_size, "hidden_act": act,
      "hidden_dropout_prob": config.hidden_dropout_prob,
      "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
      "max_position_embeddings": config.max_position_embeddings,
      "type_vocab_size": config.type_vocab_size,
      "initializer_range": config.initializer_range,
      "layer_norm_eps": config.layer_norm_eps, "pad_token_id": 0,
      "position_embedding_type": "absolute",
      "architectures": ["Bert" + (head.architecture if head else "Model")]}
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
  """(bert_config.json, vocab.txt, meta data or None) for the export."""
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
  candidates = [vocab_file, meta and meta.get("vocab_file"),
                fileio.join(bert_config_file.rsplit("/", 1)[0], "vocab.txt"),
                fileio.join(beside, "vocab.txt")]
  vocab = next((v for v in candidates if v and tf.io.gfile.exists(v)), None)
  if vocab is None:
    raise FileNotFoundError(f"{checkpoint}: no vocab.txt found beside "
                            f"{bert_config_file} or the checkpoint (pass "
                            "--vocab_file)")
  return bert_config_file, vocab, meta


def export_huggingface(input_path, output_dir, bert_config_file=None,
                       vocab_file=None, heads: Sequence[HeadMapping] = ()):
  """Writes a Hugging Face model folder.

  Args:
    input_path: a MODEL_DIR, a checkpoint prefix or an encoder folder.
    output_dir: the folder to write (whole or not at all).
    bert_config_file, vocab_file: override what the run's config.gin says.
    heads: the HeadMappings the tasks declare; the checkpoint's head is
      the one whose layer it holds.
  Returns:
    (the transformers architecture, {HF name: array}).
  Raises:
    FileNotFoundError: no config, vocabulary or checkpoint.
    ValueError: no encoder in the checkpoint, a layer count other than
      the config's, or an encoder family other than BERT.
  """
  from safetensors.numpy import save as save_safetensors
  checkpoint, run_folder = _checkpoint_prefix(input_path)
  bert_config_file, vocab, meta = _sources(run_folder, checkpoint,
                                           bert_config_file, vocab_file)
  config = encoders.read_config(bert_config_file)
  if config.family != "bert":
    raise ValueError(f"{bert_config_file}: --to=huggingface writes the BERT "
                     f"family; family {config.family!r} is not supported")
  reader = tf.train.load_checkpoint(checkpoint)
  shapes = reader.get_variable_to_shape_map()
  prefix = ("model/encoder/" if any(k.startswith("model/encoder/") for k in shapes)
            else "encoder/")
  if not any(k.startswith(prefix) for k in shapes):
    raise ValueError(f"{checkpoint}: holds no bertexp encoder")
  head_mapping, head = _head(reader, heads)
  encoder = hf_tensors(reader, prefix)
  if len([k for k in encoder if k.endswith("attention.self.query.weight")]) != (
      config.num_hidden_layers):
    raise ValueError(f"{checkpoint}: its layer count does not match "
                     f"{bert_config_file}")
  tensors = ({f"bert.{k}": v for k, v in encoder.items()} if head_mapping
             else encoder)
  tensors.update(head)
  num_labels = (head[f"{head_mapping.hf_module}.bias"].shape[0]
                if head_mapping else None)
  values = hf_config(config, head_mapping, num_labels,
                     meta and meta.get("label_names"))
  with fileio.atomic_folder(output_dir) as tmp:
    fileio.write_text(fileio.join(tmp, "config.json"),
                      json.dumps(values, indent=2, sort_keys=True) + "\n")
    with tf.io.gfile.GFile(fileio.join(tmp, "model.safetensors"), "wb") as f:
      f.write(save_safetensors({k: np.ascontiguousarray(v)
                                for k, v in tensors.items()},
                               metadata={"format": "pt"}))
    tf.io.gfile.copy(vocab, fileio.join(tmp, "vocab.txt"), overwrite=True)
    lower = True if meta is None else bool(meta.get("do_lower_case", True))
    for name, content in _tokenizer_files(lower).items():
      fileio.write_text(fileio.join(tmp, name),
                        json.dumps(content, indent=2) + "\n")
  architecture = values["architectures"][0]
  print(f"wrote {architecture} ({len(tensors)} tensors) from {checkpoint} to "
        f"{output_dir}", flush=True)
  return architecture, tensors
