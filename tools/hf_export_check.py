"""A bertexp classifier exported with `convert-checkpoint --to=huggingface`,
loaded by Hugging Face transformers, against bertexp's own predictions.

    .cache/bench_hf/bin/python tools/hf_export_check.py --hf_dir runs/demo_hf \\
        --tsv .cache/movie_reviews/heldout.tsv --column sentence \\
        --predictions runs/demo/test_results.tsv --max_seq_length 48

Runs in the Hugging Face venv of `make bench` (torch + transformers): the
three lines a PyTorch user writes (from_pretrained for the model and the
tokenizer, then a forward pass); prints the largest difference from
`--mode=predict`'s probabilities over the first --rows rows.
"""
import argparse
import csv

import numpy as np
import torch
from transformers import BertForSequenceClassification, BertTokenizer


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
  parser.add_argument("--hf_dir", required=True)
  parser.add_argument("--tsv", required=True, help="the predicted file")
  parser.add_argument("--column", default="sentence")
  parser.add_argument("--predictions", required=True,
                      help="bertexp's test_results.tsv for that file")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--rows", type=int, default=64)
  args = parser.parse_args()
  model = BertForSequenceClassification.from_pretrained(args.hf_dir).eval()
  tokenizer = BertTokenizer.from_pretrained(args.hf_dir)
  with open(args.tsv, newline="") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))[:args.rows]
  batch = tokenizer([r[args.column] for r in rows], padding=True,
                    truncation=True, max_length=args.max_seq_length,
                    return_tensors="pt")
  with torch.no_grad():
    probabilities = torch.softmax(model(**batch).logits, -1).numpy()
  ours = np.loadtxt(args.predictions, ndmin=2)[:len(rows)]
  print(f"{len(rows)} rows, labels {model.config.id2label}: max abs "
        f"difference from bertexp's predictions "
        f"{np.abs(probabilities - ours).max():.2g}", flush=True)


if __name__ == "__main__":
  main()
