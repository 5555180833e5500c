"""The Hugging Face PyTorch side of tools/bench_vs_hf.py, run in its own venv
(.cache/bench_hf: torch and transformers, pinned in the Makefile).

    .cache/bench_hf/bin/python tools/hf_reference.py --model_dir .cache/minilm_hf \\
        --batches batches.npz --precision bfloat16 --threads 2 --padding dynamic

What a Hugging Face user runs: AutoModelForSequenceClassification (BERT's,
or another family's for tools/bench_families.py) from the same weights, torch.optim.AdamW (weight decay 0.01, none on biases and LayerNorm)
with transformers' linear warmup/decay schedule, gradient clipping to norm
1.0; bfloat16 through torch.autocast on the CPU. `batches.npz` holds the
token ids the bertexp side trains on, batch by batch ([steps, B, S]);
"dynamic" padding cuts each batch to its longest sequence, as transformers'
DataCollatorWithPadding does. Prints one JSON line: examples per second over
the steps after the first --warmup ones, and the first loss.
`--save_random config.json --model_dir DIR` writes a model of that config
with random weights instead (tools/bench_families.py).
"""
import argparse
import json
import time

import numpy as np
import torch
import transformers


def _optimizer(model, steps, learning_rate):
  no_decay = ("bias", "LayerNorm.weight")
  groups = [
      {"params": [p for n, p in model.named_parameters()
                  if not any(k in n for k in no_decay)], "weight_decay": 0.01},
      {"params": [p for n, p in model.named_parameters()
                  if any(k in n for k in no_decay)], "weight_decay": 0.0}]
  optimizer = torch.optim.AdamW(groups, lr=learning_rate, eps=1e-6)
  schedule = transformers.get_linear_schedule_with_warmup(
      optimizer, num_warmup_steps=max(1, steps // 10), num_training_steps=steps)
  return optimizer, schedule


def save_random(config_file, model_dir):
  """A sequence classifier of `config_file`'s family with random weights
  (seed 0), saved as a Hugging Face folder (config.json, safetensors)."""
  torch.manual_seed(0)
  config = transformers.AutoConfig.for_model(**json.load(open(config_file)))
  config.num_labels = 2
  model = transformers.AutoModelForSequenceClassification.from_config(config)
  model.save_pretrained(model_dir)


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--batches")
  parser.add_argument("--precision", default="float32",
                      choices=["float32", "bfloat16"])
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--padding", default="fixed", choices=["fixed", "dynamic"])
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--save_random", metavar="CONFIG_JSON",
                      help="instead: write --model_dir, a model of this "
                      "config.json with random weights (seed 0)")
  args = parser.parse_args()
  if args.save_random:
    save_random(args.save_random, args.model_dir)
    return
  if not args.batches:
    parser.error("--batches is required (or --save_random)")
  torch.set_num_threads(args.threads)
  torch.manual_seed(0)
  data = np.load(args.batches)
  ids, mask, labels = data["input_word_ids"], data["input_mask"], data["labels"]
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      args.model_dir, num_labels=2)
  model.train()
  optimizer, schedule = _optimizer(model, len(ids), 2e-5)
  start, first_loss = None, None
  for step in range(len(ids)):
    if step == args.warmup:
      start = time.perf_counter()
    length = int(mask[step].sum(1).max()) if args.padding == "dynamic" else (
        ids.shape[2])
    batch = {"input_ids": torch.from_numpy(ids[step, :, :length]).long(),
             "attention_mask": torch.from_numpy(mask[step, :, :length]).long(),
             "labels": torch.from_numpy(labels[step]).long()}
    with torch.autocast("cpu", dtype=torch.bfloat16,
                        enabled=args.precision == "bfloat16"):
      loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    if first_loss is None:
      first_loss = float(loss)
  seconds = time.perf_counter() - start
  examples = (len(ids) - args.warmup) * ids.shape[1]
  print(json.dumps({"examples_per_second": examples / seconds,
                    "first_loss": first_loss}), flush=True)


if __name__ == "__main__":
  main()
