"""Peak memory of real bertexp train steps, in this fresh process.

    python tools/memory_probe.py --layers 12 --hidden 768 --heads 12 \\
        --intermediate 3072 --seq 512 --batch 4 [--recompute]

Builds a classifier on a BERT of that shape, AdamW, and bertexp's Trainer
with dynamic padding off (every sequence full length, random token ids),
runs --steps train steps and prints one JSON line: the process's resident
memory before the model existed (`runtime`), its peak (`peak`, ru_maxrss),
and the seconds per step after the first. tools/bench.py runs it once per
configuration, each in its own process, and compares with bertexp's memory
plan.
"""
import argparse
import json
import os
import resource
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bertexp  # noqa: E402,F401  (before TensorFlow: legacy Keras, oneDNN)


def _resident_bytes():
  with open("/proc/self/status") as status:
    for line in status:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) * 1024
  raise RuntimeError("no VmRSS in /proc/self/status")


def _config(args):
  return {"vocab_size": args.vocab, "hidden_size": args.hidden,
          "num_hidden_layers": args.layers,
          "num_attention_heads": args.heads,
          "intermediate_size": args.intermediate, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
          "max_position_embeddings": max(512, args.seq),
          "type_vocab_size": 2, "initializer_range": 0.02}


def classification_task(folder, config, seq_length):
  """A 2-label ClassificationTask on a BERT config dict, with only what the
  trainer needs (config and meta data files in `folder`, no records)."""
  from bertexp.tasks.classification import task as classification
  with open(f"{folder}/bert_config.json", "w") as f:
    json.dump(config, f)
  with open(f"{folder}/meta.json", "w") as f:
    json.dump({"max_seq_length": seq_length, "num_labels": 2,
               "label_type": "int", "train_data_size": 1000}, f)
  return classification.ClassificationTask(
      bert_config_file=f"{folder}/bert_config.json",
      meta_data_path=f"{folder}/meta.json")


def _dataset(args):
  import tensorflow as tf
  ids = tf.random.stateless_uniform([args.batch, args.seq], [1, 2], 5,
                                    args.vocab, tf.int32)
  features = {"input_word_ids": ids, "input_mask": tf.ones_like(ids),
              "input_type_ids": tf.zeros_like(ids)}
  labels = tf.zeros([args.batch], tf.int64)
  return tf.data.Dataset.from_tensors((features, labels)).repeat()


def probe(args):
  import tensorflow as tf
  import tf_keras
  from bertexp.train import optimization
  from bertexp.train import strategy as strategy_lib
  from bertexp.train import trainer as trainer_lib
  from bertexp.model import encoders
  tf.config.threading.set_intra_op_parallelism_threads(args.threads)
  tf.config.threading.set_inter_op_parallelism_threads(args.threads)
  if args.precision != "float32":
    tf_keras.mixed_precision.set_global_policy(args.precision)
  strategy = strategy_lib.make_strategy("default")
  tf.constant(1.0) + 1.0            # the runtime is up
  runtime = _resident_bytes()
  with tempfile.TemporaryDirectory() as folder:
    config = (json.load(open(args.config_json)) if args.config_json
              else _config(args))
    task = classification_task(folder, config, args.seq)
    with strategy.scope(), encoders.settings_scope(
        encoders.EncoderSettings(recompute=args.recompute)):
      model = task.build_model()
      optimizer = optimization.create_optimizer(100, 10, learning_rate=1e-5)
      optimizer.build(model.trainable_variables)
  trainer = trainer_lib.Trainer(
      task=task, model=model, optimizer=optimizer, strategy=strategy,
      settings=trainer_lib.StepSettings(global_batch_size=args.batch,
                                        eval_batch_size=args.batch),
      total_steps=100, train_dataset=_dataset(args))
  trainer.train(tf.constant(1))
  start = time.time()
  trainer.train(tf.constant(args.steps))
  seconds = (time.time() - start) / args.steps
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  return {"runtime": runtime, "peak": peak, "seconds_per_step": seconds}


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
  for name, default in (("layers", 2), ("hidden", 128), ("heads", 2),
                        ("intermediate", 512), ("vocab", 30522), ("seq", 128),
                        ("batch", 8), ("steps", 2), ("threads", 2)):
    parser.add_argument(f"--{name}", type=int, default=default)
  parser.add_argument("--recompute", action="store_true")
  parser.add_argument("--precision", default="float32")
  parser.add_argument("--config_json",
                      help="a bert_config.json of any encoder family, "
                      "instead of the shape flags")
  args = parser.parse_args()
  import logging
  logging.disable(logging.WARNING)
  print(json.dumps(probe(args)), flush=True)
  os._exit(0)   # tf.data threads can hold the exit


if __name__ == "__main__":
  main()
