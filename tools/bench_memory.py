"""`make bench`: bertexp's memory plan against measured peak memory, and what
activation recompute saves and costs.

    python tools/bench_memory.py [--configs tiny-128,base-512] [--steps 2]

Each configuration trains in a fresh process (tools/memory_probe.py: real
Trainer, AdamW, dropout on, full-length sequences) with recompute off and
on; its peak resident memory (ru_maxrss) is compared with the plan
(bertexp.model.memory_plan.estimate plus the runtime the process held before the
model existed, measured in that process). Then the README table: the
largest micro-batch the plan allows for BERT-Base and BERT-Large on GPUs of
12, 16 and 32 GB and a TPU v3 core (float32 GPUs, bfloat16 TPU), next to
what google-research/bert's README measured on a 12 GB GPU.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bertexp.model import encoders  # noqa: E402
from bertexp.model import memory_plan  # noqa: E402
from bertexp.model import modeling  # noqa: E402

MODELS = {  # name: (layers, hidden, heads, intermediate)
    "tiny": (2, 128, 2, 512),
    "minilm": (6, 384, 12, 1536),
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
}
# Other encoder families, MiniLM-sized (MobileBERT: 12 of its layers).
FAMILIES = {
    "deberta": dict(family="deberta-v2", vocab_size=30522, hidden_size=384,
                    num_hidden_layers=6, num_attention_heads=12,
                    intermediate_size=1536, max_position_embeddings=512,
                    relative_attention=True, position_buckets=256,
                    pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                    position_biased_input=False, type_vocab_size=0),
    "mobilebert": dict(family="mobilebert", vocab_size=30522,
                       num_hidden_layers=12),
}
BATCH = {128: 8, 512: 4}
# google-research/bert README, "Out-of-memory issues": Titan X (12 GB),
# TF 1.11, Adam; max batch at each sequence length.
GOOGLE_12GB = {("base", 128): 32, ("base", 384): 12, ("base", 512): 6,
               ("large", 128): 6, ("large", 384): 0, ("large", 512): 0}


def config_of(name):
  if name in FAMILIES:
    return encoders.config_from_dict(FAMILIES[name])
  layers, hidden, heads, inner = MODELS[name]
  return modeling.BertConfig(vocab_size=30522, hidden_size=hidden,
                             num_hidden_layers=layers,
                             num_attention_heads=heads,
                             intermediate_size=inner)


def probe(name, seq, batch, recompute, steps):
  command = [sys.executable, os.path.join(REPO, "tools", "memory_probe.py"),
             f"--seq={seq}", f"--batch={batch}", f"--steps={steps}"] + (
                 ["--recompute"] if recompute else [])
  if name in FAMILIES:
    config_file = os.path.join(tempfile.mkdtemp(), "bert_config.json")
    with open(config_file, "w") as f:
      json.dump(FAMILIES[name], f)
    command.append(f"--config_json={config_file}")
  else:
    layers, hidden, heads, inner = MODELS[name]
    command += [f"--layers={layers}", f"--hidden={hidden}",
                f"--heads={heads}", f"--intermediate={inner}"]
  out = subprocess.run(command, check=True, capture_output=True,
                       text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


TOLERANCE = 0.20     # the plan's promise: within ±20 % of the measured peak


def compare(configs, steps):
  """Plan against measured peak for each configuration, recompute off and
  on; returns the rows whose plan / peak is outside 1 ± TOLERANCE."""
  gib = memory_plan.GB
  outside = []
  print(f"{'config':18} {'recompute':9} {'plan GiB':>9} {'peak GiB':>9} "
        f"{'plan/peak':>9} {'s/step':>7}")
  for item in configs:
    name, seq = item.split("-")
    seq = int(seq)
    config = config_of(name)
    measured = {}
    for recompute in (False, True):
      result = probe(name, seq, BATCH[seq], recompute, steps)
      plan = memory_plan.estimate(
          config, seq_length=seq, micro_batch=BATCH[seq],
          head=memory_plan.Head.pooled_dense(config, 2), recompute=recompute,
          runtime_bytes=result["runtime"])
      measured[recompute] = result
      ratio = plan.total_bytes / result["peak"]
      if abs(ratio - 1) > TOLERANCE:
        outside.append(f"{name}-{seq} recompute "
                       f"{'on' if recompute else 'off'}: {ratio:.2f}")
      print(f"{name}-{seq} b{BATCH[seq]:<10} {'on' if recompute else 'off':9} "
            f"{plan.total_bytes / gib:9.2f} {result['peak'] / gib:9.2f} "
            f"{plan.total_bytes / result['peak']:9.2f} "
            f"{result['seconds_per_step']:7.2f}", flush=True)
    saved = 1 - measured[True]["peak"] / measured[False]["peak"]
    slower = (measured[True]["seconds_per_step"] /
              measured[False]["seconds_per_step"] - 1)
    print(f"  recompute: peak memory {-saved:+.0%}, step time {slower:+.0%}",
          flush=True)
  return outside


def capacity_table():
  print("largest micro-batch the plan allows (recompute off / on):")
  print(f"{'model':6} {'seq':>4} {'12 GB':>10} {'16 GB':>10} {'32 GB':>10} "
        f"{'TPU v3 core':>12} {'google 12 GB':>13}")
  for name in ("base", "large"):
    config = config_of(name)
    for seq in (128, 384, 512):
      cells = []
      for gb, mixed in ((12, False), (16, False), (32, False), (16, True)):
        sizes = [memory_plan.largest_micro_batch(
            config, seq_length=seq, head=memory_plan.Head.pooled_dense(config, 2),
            device_bytes=gb * memory_plan.GB,
            recompute=recompute, mixed_precision=mixed)
                 for recompute in (False, True)]
        cells.append(f"{sizes[0]} / {sizes[1]}")
      print(f"{name:6} {seq:4} {cells[0]:>10} {cells[1]:>10} {cells[2]:>10} "
            f"{cells[3]:>12} {GOOGLE_12GB.get((name, seq), '-'):>13}",
            flush=True)


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
  parser.add_argument("--configs", default="tiny-128,tiny-512,minilm-128,"
                      "minilm-512,base-128,base-512,deberta-128,deberta-512,"
                      "mobilebert-128,mobilebert-512")
  parser.add_argument("--steps", type=int, default=2)
  args = parser.parse_args()
  capacity_table()
  outside = compare(args.configs.split(","), args.steps)
  if outside:
    print(f"memory plan outside ±{TOLERANCE:.0%} of the measured peak: "
          + "; ".join(outside), flush=True)
    sys.exit(1)
  print(f"memory plan within ±{TOLERANCE:.0%} of every measured peak",
        flush=True)


if __name__ == "__main__":
  main()
