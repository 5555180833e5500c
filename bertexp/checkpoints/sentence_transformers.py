"""How a sentence-transformers folder pools its sentences, both ways.

A sentence-transformers model folder is a Hugging Face model folder plus
`modules.json` (the module chain: Transformer, Pooling, optionally
Normalize), the Pooling module's `config.json` and
`sentence_bert_config.json` (max_seq_length). Converting such a folder
keeps its pooling as `sentence_pooling.json` beside the bertexp checkpoint
({"mode", "normalize", "max_seq_length"}), which an embedding task reads
as its default; exporting an embedding model writes the three files back,
so `SentenceTransformer(folder)` loads it as it is.
"""
import json
from typing import Dict, Optional

import tensorflow as tf

from bertexp.util import fileio

POOLING_FILE = "sentence_pooling.json"
_MODES = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
          "max": "pooling_mode_max_tokens"}
_ST = "sentence_transformers.models."


def read_folder(folder) -> Optional[Dict]:
  """{"mode", "normalize", "max_seq_length"} of a sentence-transformers
  folder, or None when `folder` has no modules.json.

  Raises:
    ValueError: a module chain or pooling mode bertexp does not implement
      (one line naming the file and the module or mode).
  """
  modules_path = fileio.join(folder, "modules.json")
  if not tf.io.gfile.exists(modules_path):
    return None
  modules = fileio.read_json(modules_path)
  kinds = [m.get("type", "") for m in modules]
  known = [_ST + "Transformer", _ST + "Pooling", _ST + "Normalize"]
  if kinds[:2] != known[:2] or kinds[2:] not in ([], known[2:]):
    raise ValueError(f"{modules_path}: modules {kinds}: bertexp reads "
                     "Transformer, Pooling and optionally Normalize")
  pooling_path = fileio.join(folder, modules[1].get("path", ""), "config.json")
  pooling = fileio.read_json(pooling_path)
  chosen = [mode for mode, key in _MODES.items() if pooling.get(key)]
  others = [key for key, value in pooling.items()
            if key.startswith("pooling_mode") and value and
            key not in _MODES.values()]
  if len(chosen) != 1 or others:
    raise ValueError(f"{pooling_path}: pooling {chosen + others}: bertexp "
                     f"pools with exactly one of {list(_MODES)}")
  settings_path = fileio.join(folder, "sentence_bert_config.json")
  length = (fileio.read_json(settings_path).get("max_seq_length")
            if tf.io.gfile.exists(settings_path) else None)
  return {"mode": chosen[0], "normalize": len(kinds) == 3,
          "max_seq_length": length}


def folder_files(*, mode, normalize, max_seq_length, width) -> Dict[str, str]:
  """{relative path: text} of the sentence-transformers files of a model
  pooled by `mode` (normalized or not) into `width`-wide vectors (the
  tokenizer's own files say its casing: sentence-transformers lower-cases
  nothing itself)."""
  modules = [{"idx": 0, "name": "0", "path": "", "type": _ST + "Transformer"},
             {"idx": 1, "name": "1", "path": "1_Pooling",
              "type": _ST + "Pooling"}]
  if normalize:
    modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                    "type": _ST + "Normalize"})
  pooling = {"word_embedding_dimension": width,
             **{key: m == mode for m, key in _MODES.items()},
             "pooling_mode_mean_sqrt_len_tokens": False}
  text = lambda value: json.dumps(value, indent=2) + "\n"
  return {"modules.json": text(modules),
          "1_Pooling/config.json": text(pooling),
          "sentence_bert_config.json": text(
              {"max_seq_length": max_seq_length, "do_lower_case": False}),
          POOLING_FILE: text({"mode": mode, "normalize": normalize,
                              "max_seq_length": max_seq_length})}
