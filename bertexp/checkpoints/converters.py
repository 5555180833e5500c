"""Checkpoint converters into bertexp's format, with a parity check.

A bertexp checkpoint folder holds `bert_config.json`, the tokenizer's files
(`vocab.txt` for WordPiece; ALBERT's `spiece.model` or XLM-RoBERTa's
`sentencepiece.bpe.model`, with `tokenizer_config.json`) and
`bert_model.ckpt.{index,data-*}` (a tf.train.Checkpoint(encoder=...)); it is
what INIT_CHECKPOINT, `bertexp.load_encoder` and `prepare --tokenizer` take.
"""
import dataclasses
import json
import logging

import numpy as np
import tensorflow as tf

from bertexp.checkpoints import run_dir
from bertexp.checkpoints import sentence_transformers
from bertexp.data import tokenization
from bertexp.model.encoders import tokenizers
from bertexp.model import encoders
from bertexp.util import fileio

PARITY_TOLERANCE = 1e-5


@dataclasses.dataclass
class ConversionReport:
  """What a conversion mapped, left unmapped or missed, and its parity."""
  mapped: list
  unmapped_source: list     # source tensors with no place in the encoder
  missing: list             # encoder variables with no source tensor
  max_abs_diff: dict        # output name -> max |bertexp - reference|

  def lines(self):
    out = [f"mapped {len(self.mapped)} tensors"]
    out += [f"unmapped source tensor (not part of the encoder): {n}"
            for n in self.unmapped_source]
    out += [f"MISSING encoder variable: {n}" for n in self.missing]
    out += [f"parity max abs diff {k}: {v:.3g}"
            for k, v in sorted(self.max_abs_diff.items())]
    return out


# -- Hugging Face --------------------------------------------------------------

def read_safetensors(path, prefix="bert"):
  """{name: float32 numpy array} of a safetensors file, the encoder's module
  prefix of HF task models (`bert.`, `roberta.`...) dropped."""
  from safetensors import numpy as st_numpy  # only the converter needs it
  with tf.io.gfile.GFile(path, "rb") as f:
    content = f.read()
  try:
    raw = st_numpy.load(content)
  except Exception as e:  # safetensors raises its own error types
    raise ValueError(f"{path}: not a safetensors file, or damaged "
                     f"({type(e).__name__}: {e})") from None
  tensors = {}
  for name, value in raw.items():
    # BertModel checkpoints have no prefix; task models (BertFor...) use bert.
    key = name[len(prefix) + 1:] if name.startswith(prefix + ".") else name
    tensors[key] = value.astype(np.float32)
  return tensors


def hf_config(config_path):
  """The encoder config (of the family that converts its `model_type`) of a
  Hugging Face config.json.

  Raises:
    ValueError: not a JSON object, a model_type no family converts, or an
      option the family does not support (naming the file).
  """
  values = fileio.read_json(config_path)
  if not isinstance(values, dict):
    raise ValueError(f"{config_path}: expected a JSON object (a Hugging Face "
                     "config.json)")
  family = encoders.family_for_hf_model_type(values.get("model_type", "bert"),
                                             config_path)
  if values.get("position_embedding_type", "absolute") != "absolute":
    raise ValueError(f"{config_path}: position_embedding_type "
                     f"{values['position_embedding_type']!r} is not supported")
  values = {k: v for k, v in values.items() if k != "family"}
  return family.config_class.from_dict(dict(values, family=family.name),
                                       source=config_path)


def assign(encoder, tensors, assignments, optional=()):
  """Copies tensors into the encoder; returns a report of what did not fit.
  A source in `optional` may be absent (its variable keeps its value)."""
  used, mapped, missing = set(), [], []
  for variable, source, transform in assignments:
    if source not in tensors:
      if source not in optional:
        missing.append(f"{variable.name} (expected source {source})")
      continue
    value = tensors[source]
    if transform is not None:
      value = transform(value)
    if tuple(value.shape) != tuple(variable.shape):
      raise ValueError(f"{source}: shape {value.shape} does not fit "
                       f"{variable.name} {tuple(variable.shape)}")
    variable.assign(value)
    used.add(source)
    mapped.append(source)
  skipped = {"embeddings.position_ids"}   # a constant buffer, not a weight
  unmapped = sorted(n for n in tensors if n not in used and n not in skipped)
  return ConversionReport(mapped, unmapped, missing, {})


def parity_inputs(config, batch=2, seq=16, seed=0):
  """Fixed inputs: random ids, the second row padded after 10 tokens."""
  rng = np.random.RandomState(seed)
  seq = min(seq, config.max_seq_length)
  word_ids = rng.randint(0, config.vocab_size, size=[batch, seq]).astype(np.int32)
  mask = np.ones([batch, seq], np.int32)
  mask[1:, seq * 5 // 8:] = 0
  type_ids = np.zeros([batch, seq], np.int32)
  type_ids[:, seq // 2:] = min(1, config.type_vocab_size - 1)
  return word_ids, mask, type_ids


def parity(encoder, reference_fn):
  """Max abs difference of both outputs on the real (unpadded) positions."""
  word_ids, mask, type_ids = parity_inputs(encoder.config)
  ours = encoder({"input_word_ids": word_ids, "input_mask": mask,
                  "input_type_ids": type_ids}, training=False)
  theirs = reference_fn(word_ids, mask, type_ids)
  real = mask.astype(bool)
  diffs = {"sequence_output": float(np.max(np.abs(
      ours["sequence_output"].numpy()[real] -
      theirs["sequence_output"][real])))}
  if "pooled_output" in theirs:      # a family's pooler may be a new layer
    diffs["pooled_output"] = float(np.max(np.abs(
        ours["pooled_output"].numpy() - theirs["pooled_output"])))
  return diffs


# -- writing ---------------------------------------------------------------------

def write_checkpoint_folder(encoder, vocab_file, output_dir,
                            tokenizer_files=(), extra_files=None):
  """bert_config.json + the tokenizer's files + bert_model.ckpt, written
  atomically.

  Args:
    encoder: a built encoder.
    vocab_file: a WordPiece vocab.txt (checked, copied as vocab.txt), or
      None when tokenizer_files carry another tokenizer.
    output_dir: the folder to write.
    tokenizer_files: more files copied under their own names
      (SentencePiece models, tokenizer_config.json).
    extra_files: {name: text} written beside them (a sentence-transformers
      folder's pooling).
  """
  if vocab_file:
    tokenization.load_vocab(vocab_file)      # refuse a vocab without [CLS]...
  with fileio.atomic_folder(output_dir) as tmp:
    fileio.write_text(fileio.join(tmp, "bert_config.json"),
                      encoder.config.to_json_string() + "\n")
    if vocab_file:
      tf.io.gfile.copy(vocab_file, fileio.join(tmp, "vocab.txt"),
                       overwrite=True)
    for path in tokenizer_files:
      tf.io.gfile.copy(path, fileio.join(tmp, path.rsplit("/", 1)[-1]),
                       overwrite=True)
    for name, text in (extra_files or {}).items():
      fileio.write_text(fileio.join(tmp, name), text)
    tf.train.Checkpoint(encoder=encoder).write(fileio.join(tmp, "bert_model.ckpt"))
  return output_dir


def huggingface_tokenizer_files(input_dir, config):
  """(vocab.txt or None, [other tokenizer files]) of a Hugging Face folder:
  WordPiece's vocab.txt, or the family's SentencePiece model or byte-level
  BPE files (with tokenizer_config.json when present).

  Raises:
    ValueError: no tokenizer file bertexp reads, or a SentencePiece
      vocabulary larger than the model's embedding table.
  """
  vocab = fileio.join(input_dir, "vocab.txt")
  if tf.io.gfile.exists(vocab):
    return vocab, []
  # The first family tokenizer whose every file the folder holds.
  complete = [[fileio.join(input_dir, n) for n in spec.files]
              for spec in tokenizers.specs().values()
              if spec.kind != "wordpiece"]
  found = next((paths for paths in complete
                if all(tf.io.gfile.exists(p) for p in paths)), [])
  if not found:
    names = sorted({" + ".join(p.rsplit("/", 1)[-1] for p in paths)
                    for paths in complete})
    raise ValueError(f"{input_dir}: no tokenizer file bertexp reads "
                     f"(vocab.txt or one of {names})")
  settings = tokenizers.folder_settings(input_dir)
  size = len(tokenizers.load(**settings).vocab)
  if size > config.vocab_size:
    raise ValueError(f"{found[0]}: {size} tokens, but config.json's "
                     f"vocab_size is {config.vocab_size}")
  extra = fileio.join(input_dir, "tokenizer_config.json")
  return None, found + ([extra] if tf.io.gfile.exists(extra) else [])


def _convert(tensors, config, vocab_file, output_dir, tolerance, source,
             skipped=(), tokenizer_files=(), extra_files=None):
  """HF-named float32 tensors -> checked, written bertexp checkpoint folder.

  skipped: source tensor names the caller already set aside as not part of
  the encoder; they are reported with the unmapped ones.
  """
  family = encoders.family_of(config)
  encoder = family.build(config, False).build_variables()
  report = assign(encoder, tensors, family.hf_assignments(encoder, tensors),
                  family.hf_optional_sources)
  report.unmapped_source = list(skipped) + report.unmapped_source
  if report.missing:
    raise ValueError(f"{source}: the checkpoint lacks encoder tensors:\n  " +
                     "\n  ".join(report.missing))
  report.max_abs_diff = parity(
      encoder, lambda *inputs: family.numpy_reference(tensors, config,
                                                      *inputs))
  for line in report.lines():
    print(line, flush=True)
  worst = max(report.max_abs_diff.values())
  if worst > tolerance:
    raise ValueError(f"parity check failed: max abs diff {worst:.3g} > "
                     f"{tolerance:g}; nothing written")
  write_checkpoint_folder(encoder, vocab_file, output_dir, tokenizer_files,
                          extra_files)
  print(f"wrote bertexp checkpoint folder {output_dir}", flush=True)
  return report


def convert_huggingface(input_dir, output_dir, tolerance=PARITY_TOLERANCE):
  """HF folder (model.safetensors, config.json, the tokenizer's files) ->
  bertexp, for every family bertexp builds. A sentence-transformers
  folder's pooling is kept beside the checkpoint (sentence_pooling.json)."""
  config = hf_config(fileio.join(input_dir, "config.json"))
  pooling = sentence_transformers.read_folder(input_dir)
  vocab, tokenizer_files = huggingface_tokenizer_files(input_dir, config)
  tensors = read_safetensors(fileio.join(input_dir, "model.safetensors"),
                             encoders.family_of(config).hf_prefix)
  return _convert(tensors, config, vocab, output_dir, tolerance, input_dir,
                  tokenizer_files=tokenizer_files,
                  extra_files=pooling and {sentence_transformers.POOLING_FILE:
                                           json.dumps(pooling) + "\n"})


# -- google-research/bert TF1 checkpoints -------------------------------------------

def tf1_to_hf_name(name):
  """`bert/encoder/layer_3/attention/self/query/kernel` ->
  (`encoder.layer.3.attention.self.query.weight`, transpose?). None: not
  part of the encoder (e.g. `cls/...` pre-training heads, optimizer slots)."""
  if not name.startswith("bert/"):
    return None
  parts = name[len("bert/"):].split("/")
  if parts[-1] in ("adam_m", "adam_v"):
    return None
  leaf = parts[-1]
  renamed = {"kernel": "weight", "gamma": "weight", "beta": "bias",
             "bias": "bias"}.get(leaf)
  path = [p.replace("layer_", "layer.") if p.startswith("layer_") else p
          for p in parts[:-1]]
  if parts[:1] == ["embeddings"] and len(parts) == 2:
    # bert/embeddings/word_embeddings -> embeddings.word_embeddings.weight
    return f"embeddings.{leaf}.weight", False
  if renamed is None:
    return None
  return ".".join(path + [renamed]), leaf == "kernel"


def convert_tf1(input_dir, output_dir, tolerance=PARITY_TOLERANCE):
  """google-research folder (bert_model.ckpt*, bert_config.json, vocab.txt).

  TF1 BERT's "gelu" is the tanh approximation: the converted config says
  "gelu_tanh" so the encoder computes what the checkpoint was trained with.
  """
  values = fileio.read_json(fileio.join(input_dir, "bert_config.json"))
  if values.get("hidden_act") == "gelu":
    values = dict(values, hidden_act="gelu_tanh")
  config = encoders.config_from_dict(values, source=input_dir)
  # Every tensor is read below: the checksums are checked there.
  prefix = run_dir.resolve(input_dir, intact=False)
  reader = tf.train.load_checkpoint(prefix)
  tensors, skipped = {}, []
  for name in sorted(reader.get_variable_to_shape_map()):
    mapped = tf1_to_hf_name(name)
    if mapped is None:
      skipped.append(name)
      continue
    hf_name, transpose = mapped
    value = reader.get_tensor(name).astype(np.float32)
    tensors[hf_name] = value.T if transpose else value     # HF: [out, in]
  return _convert(tensors, config, fileio.join(input_dir, "vocab.txt"),
                  output_dir, tolerance, input_dir, skipped=skipped)


# -- TF Model Garden (TF2) BertEncoder checkpoints ------------------------------------

def _model_garden_layout(num_layers):
  """Object-graph slot of each Model Garden BertEncoder weight ->
  (HF name, reshape to [in, out] or None). Slots: 0 word, 1 position, 2 type
  embeddings, 3 embedding LayerNorm, 4..4+L-1 Transformer layers, 4+L pooler."""
  layout = {
      "layer_with_weights-0/embeddings": ("embeddings.word_embeddings.weight", None),
      "layer_with_weights-1/embeddings": ("embeddings.position_embeddings.weight", None),
      "layer_with_weights-2/embeddings": ("embeddings.token_type_embeddings.weight", None),
      "layer_with_weights-3/gamma": ("embeddings.LayerNorm.weight", None),
      "layer_with_weights-3/beta": ("embeddings.LayerNorm.bias", None),
      f"layer_with_weights-{4 + num_layers}/kernel": ("pooler.dense.weight", "dense"),
      f"layer_with_weights-{4 + num_layers}/bias": ("pooler.dense.bias", None),
  }
  for i in range(num_layers):
    source, target = f"layer_with_weights-{4 + i}/", f"encoder.layer.{i}."
    for mg, hf in (("query", "attention.self.query"), ("key", "attention.self.key"),
                   ("value", "attention.self.value")):
      layout[f"{source}_attention_layer/_{mg}_dense/kernel"] = (target + hf + ".weight",
                                                                "heads_in")
      layout[f"{source}_attention_layer/_{mg}_dense/bias"] = (target + hf + ".bias",
                                                              "flatten")
    layout[f"{source}_attention_layer/_output_dense/kernel"] = (
        target + "attention.output.dense.weight", "heads_out")
    layout[f"{source}_attention_layer/_output_dense/bias"] = (
        target + "attention.output.dense.bias", None)
    for mg, hf in (("_attention_layer_norm", "attention.output.LayerNorm"),
                   ("_output_layer_norm", "output.LayerNorm")):
      layout[f"{source}{mg}/gamma"] = (target + hf + ".weight", None)
      layout[f"{source}{mg}/beta"] = (target + hf + ".bias", None)
    for mg, hf in (("_intermediate_dense", "intermediate.dense"),
                   ("_output_dense", "output.dense")):
      layout[f"{source}{mg}/kernel"] = (target + hf + ".weight", "dense")
      layout[f"{source}{mg}/bias"] = (target + hf + ".bias", None)
  return layout


def _to_hf(value, how):
  """Model Garden kernels -> HF [out, in] (EinsumDense keeps head axes)."""
  if how == "dense":
    return value.T                                        # [in, out] -> [out, in]
  if how == "heads_in":                                   # [H, N, D] -> [N*D, H]
    return value.reshape(value.shape[0], -1).T
  if how == "heads_out":                                  # [N, D, H] -> [H, N*D]
    return value.reshape(-1, value.shape[-1]).T
  if how == "flatten":                                    # [N, D] -> [N*D]
    return value.reshape(-1)
  return value


_MG_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_MG_WORD_EMBEDDINGS = "layer_with_weights-0/embeddings" + _MG_SUFFIX


def model_garden_encoder_prefix(shapes, config, source):
  """Where the BertEncoder sits in a Model Garden object graph: "encoder/"
  for Checkpoint(encoder=...), "model/layer_with_weights-0/" for
  Checkpoint(model=BertClassifier(...)), etc. Found by the word-embedding
  table [vocab_size, hidden_size]; "encoder/" wins when both are saved."""
  want = [config.vocab_size, config.hidden_size]
  found = sorted((name[:-len(_MG_WORD_EMBEDDINGS)] for name, shape in shapes.items()
                  if name.endswith(_MG_WORD_EMBEDDINGS) and list(shape) == want),
                 key=lambda p: (p != "encoder/", len(p), p))
  if not found:
    raise ValueError(
        f"{source}: no Model Garden BertEncoder in this checkpoint (no "
        f"'.../{_MG_WORD_EMBEDDINGS}' of shape {want}; saved objects: "
        f"{sorted({n.split('/')[0] for n in shapes})})")
  return found[0]


def convert_model_garden(input_dir, output_dir, tolerance=PARITY_TOLERANCE):
  """A Model Garden BertEncoder checkpoint, alone (Checkpoint(encoder=...))
  or inside a model (run_classifier's Checkpoint(model=..., encoder=...)),
  with bert_config.json + vocab.txt. Heads around the encoder are listed."""
  config = encoders.read_config(fileio.join(input_dir, "bert_config.json"))
  prefix = run_dir.resolve(input_dir, intact=False)
  reader = tf.train.load_checkpoint(prefix)
  shapes = reader.get_variable_to_shape_map()
  object_prefix = model_garden_encoder_prefix(shapes, config, input_dir)
  logging.info("%s: Model Garden encoder at %r", input_dir, object_prefix)
  layout = _model_garden_layout(config.num_hidden_layers)
  tensors, skipped = {}, []
  for name in sorted(shapes):
    key = name[len(object_prefix):-len(_MG_SUFFIX)] if (
        name.startswith(object_prefix) and name.endswith(_MG_SUFFIX)) else None
    if key not in layout:
      if name != "_CHECKPOINTABLE_OBJECT_GRAPH":
        skipped.append(name)
      continue
    hf_name, how = layout[key]
    tensors[hf_name] = _to_hf(reader.get_tensor(name).astype(np.float32), how)
  return _convert(tensors, config, fileio.join(input_dir, "vocab.txt"),
                  output_dir, tolerance, input_dir, skipped=skipped)
