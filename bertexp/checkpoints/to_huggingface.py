"""bertexp -> Hugging Face: `bertexp convert-checkpoint --to=huggingface`.

Writes what transformers' `from_pretrained` reads: config.json,
model.safetensors (PyTorch layout: Linear weights [out, in]), vocab.txt,
tokenizer_config.json and special_tokens_map.json. The model class follows
the checkpoint's head:

  classifier [H, L]  -> BertForSequenceClassification (num_labels L; L == 1
                        is regression, problem_type "regression")
  span_head [H, 2]   -> BertForQuestionAnswering (qa_outputs)
  tagger [H, L]      -> BertForTokenClassification (id2label: the tags)
  encoder only       -> BertModel

The input is a training run's MODEL_DIR (its newest intact checkpoint), a
checkpoint prefix, or a bertexp encoder folder. bert_config.json, the
vocabulary and the label names come from the run's config.gin
(BERT_CONFIG_FILE, INPUT_META_DATA_PATH) or from files beside the
checkpoint, unless given.
"""
import json
import re

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


def _head(reader):
  """("classifier" | "span" | "token" | None, {HF name: array}) of a training
  checkpoint's fine-tuning head."""
  shapes = reader.get_variable_to_shape_map()
  for ours, kind, hf in (("classifier", "classifier", "classifier"),
                         ("span_head", "span", "qa_outputs"),
                         ("tagger", "token", "classifier")):
    if f"model/{ours}/kernel{_SUFFIX}" in shapes:
      kernel = reader.get_tensor(f"model/{ours}/kernel{_SUFFIX}")
      bias = reader.get_tensor(f"model/{ours}/bias{_SUFFIX}")
      return kind, {f"{hf}.weight": kernel.T.astype(np.float32),
                    f"{hf}.bias": bias.astype(np.float32)}
  return None, {}


def hf_config(config, kind, num_labels=None, label_names=None):
  """config.json of transformers' BERT for `kind` of head."""
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
      "architectures": [{"classifier": "BertForSequenceClassification",
                         "span": "BertForQuestionAnswering",
                         "token": "BertForTokenClassification"}.get(
                             kind, "BertModel")]}
  if kind in ("classifier", "token"):
    values["num_labels"] = num_labels
    if num_labels == 1 and kind == "classifier":
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
                       vocab_file=None):
  """Writes a Hugging Face model folder; returns (architecture, tensors)."""
  from safetensors.numpy import save as save_safetensors
  checkpoint, run_folder = _checkpoint_prefix(input_path)
  bert_config_file, vocab, meta = _sources(run_folder, checkpoint,
                                           bert_config_file, vocab_file)
  config = encoders.read_config(bert_config_file)
  reader = tf.train.load_checkpoint(checkpoint)
  shapes = reader.get_variable_to_shape_map()
  prefix = ("model/encoder/" if any(k.startswith("model/encoder/") for k in shapes)
            else "encoder/")
  if not any(k.startswith(prefix) for k in shapes):
    raise ValueError(f"{checkpoint}: holds no bertexp encoder")
  kind, head = _head(reader)
  encoder = hf_tensors(reader, prefix)
  if len([k for k in encoder if k.endswith("attention.self.query.weight")]) != (
      config.num_hidden_layers):
    raise ValueError(f"{checkpoint}: its layer count does not match "
                     f"{bert_config_file}")
  tensors = ({f"bert.{k}": v for k, v in encoder.items()} if kind else encoder)
  tensors.update(head)
  num_labels = (head["classifier.bias"].shape[0]
                if kind in ("classifier", "token") else None)
  values = hf_config(config, kind, num_labels, meta and meta.get("label_names"))
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
