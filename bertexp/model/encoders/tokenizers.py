"""Tokenizers as the encoder families declare them: each family lists the
tokenizer of every Hugging Face model_type it reads (EncoderFamily.
tokenizers: kind, files, special tokens, pair template), and everything
that loads a tokenizer asks here, by model_type, instead of keeping a table
of families.

    tokenizer = tokenizers.load(**tokenizers.folder_settings("hf/xlmr"))
    tokenizer = tokenizers.from_meta(meta, meta["vocab_file"])

A WordPiece vocabulary with no model_type (bertexp's own data, a plain
vocab.txt) is BERT's.
"""
import tensorflow as tf

from bertexp.data import tokenization
from bertexp.model import encoders
from bertexp.util import fileio


def specs():
  """{model_type: TokenizerSpec} of every family, in family order."""
  return {model_type: spec for family in encoders.families().values()
          for model_type, spec in family.tokenizers.items()}


def spec_for(model_type, source="--tokenizer"):
  """The tokenizer of Hugging Face `model_type` (None: WordPiece).

  Raises:
    ValueError: no family reads that model_type's tokenizer (naming them).
  """
  if model_type is None:
    return tokenization.WORDPIECE
  known = specs()
  if model_type not in known:
    raise ValueError(f"{source}: unknown model_type {model_type!r}; "
                     f"expected one of {sorted(known)}")
  return known[model_type]


def model_type_of_file(path):
  """The model_type whose tokenizer file (not WordPiece's vocab.txt) `path`
  is, by its name (spm.model -> "deberta-v2"), else None."""
  name = path.rstrip("/").rsplit("/", 1)[-1]
  return next((model_type for model_type, spec in specs().items()
               if spec.kind != "wordpiece" and spec.files[0] == name), None)


def load(vocab_file, do_lower_case=True, family=None, keep_accents=False):
  """The tokenizer `bertexp prepare` used, from what its meta data records.

  Args:
    vocab_file: the tokenizer's file (WordPiece vocab.txt, a SentencePiece
      model, byte-level BPE's vocab.json with merges.txt beside it).
    do_lower_case: as prepared.
    family: the Hugging Face model_type it belongs to (None: WordPiece).
    keep_accents: ALBERT's tokenizer option.
  Returns:
    A tokenizer with tokenize / tokenize_tf and the family's pair layout.
  Raises:
    ValueError: a model_type no family declares.
  """
  return spec_for(family, vocab_file).load(
      vocab_file, family, do_lower_case=do_lower_case,
      keep_accents=keep_accents)


def from_meta(meta, vocab_file):
  """The tokenizer a prepare command recorded in `meta` (with `vocab_file`,
  its file as found now)."""
  return load(vocab_file, meta.get("do_lower_case", True),
              meta.get("tokenizer_family"), meta.get("keep_accents", False))


def _folder_model_type(folder):
  """config.json's model_type; for a converted folder (bert_config.json),
  the model_type whose tokenizer file it holds (else BERT's)."""
  config_path = fileio.join(folder, "config.json")
  if tf.io.gfile.exists(config_path):
    return fileio.read_json(config_path).get("model_type")
  if tf.io.gfile.exists(fileio.join(folder, "bert_config.json")):
    for model_type, spec in specs().items():
      if spec.kind != "wordpiece" and tf.io.gfile.exists(
          fileio.join(folder, spec.files[0])):
        return model_type
    return "bert"
  raise ValueError(f"--tokenizer={folder}: no config.json (its model_type "
                   "names the tokenizer) or bert_config.json")


def folder_settings(folder):
  """What `--tokenizer=FOLDER` (a Hugging Face or converted folder) means:
  {"vocab_file", "do_lower_case", "family", "keep_accents"} for `load`.

  The family is config.json's model_type (in a folder convert-checkpoint
  wrote: the tokenizer file it holds); do_lower_case (and ALBERT's
  keep_accents) come from tokenizer_config.json when it has them.

  Raises:
    ValueError: no config.json model_type, a model_type no family reads,
      or its tokenizer files missing (each names it).
  """
  family = _folder_model_type(folder)
  spec = spec_for(family, f"--tokenizer={folder}")
  for name in spec.files:
    if not tf.io.gfile.exists(fileio.join(folder, name)):
      raise ValueError(f"--tokenizer={folder}: no {name} (the {family} "
                       "tokenizer's file)")
  config_file = fileio.join(folder, "tokenizer_config.json")
  saved = (fileio.read_json(config_file)
           if tf.io.gfile.exists(config_file) else {})
  refused = [o for o in tokenization.REFUSED_OPTIONS if saved.get(o)]
  if refused:
    raise ValueError(f"{config_file}: {refused[0]} is not supported by "
                     "bertexp's tokenizers")
  settings = {key: bool(saved.get(key, default))
              for key, default in spec.defaults.items()}
  return dict({"keep_accents": False}, **settings,
              vocab_file=fileio.join(folder, spec.files[0]),
              family=None if spec.kind == "wordpiece" else family)
