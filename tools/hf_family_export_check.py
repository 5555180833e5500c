"""Each encoder family's classifier, exported with `convert-checkpoint
--to=huggingface`, loaded by transformers' AutoModelForSequenceClassification,
against bertexp's own logits on the same padded pairs.

Two steps, one per environment:
    .venv/bin/python tools/hf_family_export_check.py write /tmp/family_check
    /tmp/hfvenv/bin/python tools/hf_family_export_check.py read /tmp/family_check

`write` (bertexp's venv) converts each fixture of tests/golden/families,
gives the classification model random head and encoder weights, writes a
training checkpoint, exports it and saves bertexp's logits (logits.npz);
`read` (a venv with torch and transformers) loads each folder with
from_pretrained and prints the largest difference from bertexp's logits.
"""
import os
import sys

import numpy as np

GOLDEN = os.path.join(os.path.dirname(__file__), os.pardir, "tests", "golden",
                      "families")


def write(root):
  """bertexp side: exported folders and their logits."""
  import tensorflow as tf
  import bertexp
  from bertexp import cli
  from bertexp.model import modeling
  for name in sorted(os.listdir(GOLDEN)):
    source = os.path.join(GOLDEN, name)
    if not os.path.isdir(source) or name.startswith("modernbert"):
      continue                  # ModernBERT does not go back to HF yet
    out = os.path.join(root, name)
    assert cli.main(["convert-checkpoint", "--from=huggingface",
                     f"--input={source}", f"--output={out}/bertexp"]) == 0
    model = modeling.ClassifierModel(bertexp.load_encoder(f"{out}/bertexp"), 3)
    model.build_variables()
    tf.random.set_seed(7)
    for variable in model.variables:
      variable.assign(variable + tf.random.normal(variable.shape, stddev=0.02))
    prefix = tf.train.Checkpoint(model=model).write(f"{out}/ckpt-1")
    assert cli.main(["convert-checkpoint", "--to=huggingface",
                     f"--input={prefix}", f"--output={out}/hf",
                     f"--bert_config_file={out}/bertexp/bert_config.json",
                     f"--vocab_file={out}/bertexp/vocab.txt"]) == 0
    golden = np.load(os.path.join(source, "outputs.npz"))
    logits = model({"input_word_ids": golden["input_ids"].astype(np.int32),
                    "input_mask": golden["attention_mask"].astype(np.int32),
                    "input_type_ids": golden["token_type_ids"].astype(np.int32)},
                   training=False)
    np.savez(f"{out}/logits.npz", logits=np.asarray(logits), **golden)


def read(root):
  """transformers side: from_pretrained, forward, largest difference."""
  import torch
  import transformers
  for name in sorted(os.listdir(root)):
    folder = os.path.join(root, name)
    saved = np.load(os.path.join(folder, "logits.npz"))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        os.path.join(folder, "hf")).eval()
    inputs = {"input_ids": torch.tensor(saved["input_ids"]),
              "attention_mask": torch.tensor(saved["attention_mask"])}
    if model.config.type_vocab_size > 0:
      inputs["token_type_ids"] = torch.tensor(saved["token_type_ids"])
    with torch.no_grad():
      theirs = model(**inputs).logits.numpy()
    print(f"{name:24s} {type(model).__name__:40s} max |logit difference| "
          f"{np.abs(theirs - saved['logits']).max():.2e}")


if __name__ == "__main__":
  {"write": write, "read": read}[sys.argv[1]](sys.argv[2])
