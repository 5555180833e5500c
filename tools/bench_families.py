"""`make bench`: each encoder family's fine-tuning step, bertexp against
Hugging Face PyTorch and, for the families Model Garden ships (ALBERT,
MobileBERT, ELECTRA as its BERT encoder with factorised embeddings), against
Model Garden's encoder; same shapes, same token ids, same threads.

    python tools/bench_families.py [--steps 20] [--rounds 2] [--families ...]
        [--precisions float32,bfloat16]

For each family, a sequence classifier of the shape below is made with
random weights by transformers (tools/hf_reference.py --save_random, in the
.cache/bench_hf venv), converted by `bertexp convert-checkpoint`, and both
sides fine-tune it on the demo's movie-review batches (seq 48, batch 32, the
ids bertexp's training order gives; AdamW, warmup/decay, clipping to 1.0)
as tools/bench_vs_hf.py does for MiniLM; Model Garden's side is
tools/model_garden_reference.py on the same batches. Rows: examples/s of
each side (medians of --rounds, alternating) and the ratios bertexp / each
reference (> 1: bertexp faster), fixed padding, with the CPU printed; per
precision: float32 (all three sides), and on a CPU with bfloat16
instructions bfloat16 (bertexp's mixed_bfloat16 policy against Hugging
Face's torch.autocast to bfloat16; Model Garden's side is float32 only).

The shapes are MiniLM-L6's (6 layers, width 384, 12 heads, feed-forward
1536) in each family's own form: ELECTRA and ALBERT with 128-wide embeddings
projected (ALBERT's 6 layers share one block), RoBERTa's positions after
the pad row, DeBERTa-v3's disentangled attention over 256 position buckets,
and MobileBERT as released (24 bottlenecked layers of width 512).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_vs_hf  # noqa: E402  (imports bertexp before TensorFlow)
import model_garden_reference  # noqa: E402
import tensorflow as tf  # noqa: E402

from bertexp import cli  # noqa: E402
from bertexp.model import encoders  # noqa: E402
from bertexp.util import machine  # noqa: E402

MINILM_SHAPE = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                    num_attention_heads=12, intermediate_size=1536,
                    max_position_embeddings=512)
SHAPES = {
    "bert": dict(MINILM_SHAPE, model_type="bert"),
    "electra": dict(MINILM_SHAPE, model_type="electra", embedding_size=128),
    "roberta": dict(MINILM_SHAPE, model_type="roberta",
                    max_position_embeddings=514, pad_token_id=1,
                    type_vocab_size=1, layer_norm_eps=1e-5),
    "albert": dict(MINILM_SHAPE, model_type="albert", embedding_size=128,
                   hidden_act="gelu_new"),
    "deberta-v2": dict(MINILM_SHAPE, model_type="deberta-v2",
                       relative_attention=True, position_buckets=256,
                       max_relative_positions=-1,
                       pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                       share_att_key=True, position_biased_input=False,
                       type_vocab_size=0, layer_norm_eps=1e-7),
    "mobilebert": dict(model_type="mobilebert", vocab_size=30522),
}


def make_family(family, folder):
  """HF folder (random weights + MiniLM's vocab.txt) -> converted folder."""
  hf_dir, ours = os.path.join(folder, "hf"), os.path.join(folder, "bertexp")
  config = os.path.join(folder, "config.json")
  os.makedirs(folder)
  with open(config, "w") as f:
    json.dump(SHAPES[family], f)
  subprocess.run([bench_vs_hf.HF_PYTHON,
                  os.path.join(bench_vs_hf.REPO, "tools", "hf_reference.py"),
                  "--save_random", config, "--model_dir", hf_dir], check=True)
  tf.io.gfile.copy(os.path.join(bench_vs_hf.REPO, ".cache", "minilm_hf",
                                "vocab.txt"), os.path.join(hf_dir, "vocab.txt"))
  if cli.main(["convert-checkpoint", "--from=huggingface", f"--input={hf_dir}",
               f"--output={ours}"]) != 0:
    sys.exit(f"{family}: convert-checkpoint failed")
  return hf_dir, ours


def measure(family, precision, args, tmp):
  """(parameters, bertexp ex/s, Hugging Face ex/s, Model Garden ex/s or
  None) of one family in one precision."""
  folder = os.path.join(tmp, family)
  if os.path.exists(folder):
    hf_dir, ours = os.path.join(folder, "hf"), os.path.join(folder, "bertexp")
  else:
    hf_dir, ours = make_family(family, folder)
  task = bench_vs_hf._task(encoder_dir=ours)  # pylint: disable=protected-access
  batches_file = os.path.join(tmp, "batches.npz")
  if not os.path.exists(batches_file):
    bench_vs_hf.dump_batches(task, args.steps + 3, batches_file)
  mine, theirs, garden = [], [], []
  for _ in range(args.rounds):
    mine.append(bench_vs_hf.bertexp_rate(task, precision, args.steps, None,
                                         encoder_dir=ours))
    theirs.append(bench_vs_hf.hf_rate(batches_file, precision, "fixed",
                                      model_dir=hf_dir))
    if precision == "float32" and family in model_garden_reference.FAMILIES:
      garden.append(model_garden_reference.rate(family, SHAPES[family],
                                                batches_file))
  config = encoders.read_config(os.path.join(ours, "bert_config.json"))
  return (config.parameter_count(), statistics.median(mine),
          statistics.median(theirs),
          statistics.median(garden) if garden else None)


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--families", default=",".join(SHAPES))
  parser.add_argument(
      "--precisions", default=None,
      help="comma-separated; default float32,bfloat16 on a CPU with bfloat16 "
           "instructions, float32 elsewhere")
  args = parser.parse_args()
  if args.precisions is None:
    args.precisions = ("float32,bfloat16" if machine.cpu_has_native_bfloat16()
                       else "float32")
  print(machine.cpu_line(), flush=True)
  if not os.path.exists(bench_vs_hf.HF_PYTHON):
    sys.exit(f"{bench_vs_hf.HF_PYTHON} missing: run `make bench` (it builds "
             "that venv)")
  tf.config.threading.set_intra_op_parallelism_threads(2)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  print("| family | precision | encoder parameters | bertexp ex/s | Model "
        "Garden ex/s | ratio | Hugging Face ex/s | ratio |\n"
        "|---|---|---|---|---|---|---|---|", flush=True)
  with tempfile.TemporaryDirectory() as tmp:
    for family in args.families.split(","):
      for precision in args.precisions.split(","):
        parameters, mine, theirs, garden = measure(family, precision, args, tmp)
        versus_garden = (f"{garden:.1f} | {mine / garden:.2f}" if garden
                         else "— | —")
        print(f"| {family} | {precision} | {parameters / 1e6:.1f} M | "
              f"{mine:.1f} | {versus_garden} | {theirs:.1f} | "
              f"{mine / theirs:.2f} |", flush=True)


if __name__ == "__main__":
  main()
