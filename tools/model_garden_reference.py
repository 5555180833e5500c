"""Model Garden's encoder of a family fine-tuned on the benchmark's batches:
the reference of tools/bench_families.py for the families Model Garden
ships (ALBERT, MobileBERT, and ELECTRA as Model Garden builds it: its BERT
encoder with factorised embeddings, BertEncoderV2(embedding_width=...)).

Model Garden is the venv's tf-models-official (`make setup` installs it
without its pins: bertexp's Orbit comes from it), as for tools/bench.py.

Its side of a row: the family's network of the benchmark's shape, a Dense
classifier on its pooled output, Model Garden's own fine-tuning optimizer
(official.nlp.optimization.create_optimizer: AdamWeightDecay 0.01, warmup
then linear decay), gradients clipped to global norm 1.0, one tf.function
step over the same token ids bertexp trains on; float32, dropout on.
"""
import time

import numpy as np
import tensorflow as tf
import tf_keras

FAMILIES = ("albert", "electra", "mobilebert")


def encoder(family, shape):
  """Model Garden's network of `family` with the benchmark's `shape` (a
  Hugging Face config dict, tools/bench_families.py's SHAPES).

  Raises:
    ValueError: a family Model Garden does not ship.
  """
  from official.nlp.modeling import networks  # pylint: disable=g-import-not-at-top
  gelu_tanh = lambda x: tf_keras.activations.gelu(x, approximate=True)
  common = dict(num_attention_heads=shape.get("num_attention_heads"),
                max_sequence_length=shape.get("max_position_embeddings"),
                type_vocab_size=2)
  if family == "albert":
    return networks.AlbertEncoder(
        vocab_size=shape["vocab_size"], embedding_width=shape["embedding_size"],
        hidden_size=shape["hidden_size"], num_layers=shape["num_hidden_layers"],
        intermediate_size=shape["intermediate_size"], activation=gelu_tanh,
        dict_outputs=True, **common)
  if family == "electra":
    return networks.BertEncoderV2(
        vocab_size=shape["vocab_size"], hidden_size=shape["hidden_size"],
        num_layers=shape["num_hidden_layers"],
        inner_dim=shape["intermediate_size"],
        inner_activation=tf_keras.activations.gelu,
        embedding_width=shape["embedding_size"], **common)
  if family == "mobilebert":
    # Model Garden's defaults are MobileBERT as released (24 bottlenecked
    # blocks of 512, 4 stacked feed-forward networks, NoNorm), the shape
    # transformers' MobileBertConfig defaults give the other sides.
    return networks.MobileBERTEncoder(word_vocab_size=shape["vocab_size"])
  raise ValueError(f"Model Garden ships no {family!r} encoder; it has "
                   f"{list(FAMILIES)}")


def rate(family, shape, batches_file, warmup=3):
  """Examples/s of Model Garden's `family` fine-tuning on the batches of
  `batches_file` (bench_vs_hf.dump_batches) after `warmup` steps.

  Args:
    family: one of FAMILIES.
    shape: the benchmark's Hugging Face config dict of the family.
    batches_file: .npz of input_word_ids, input_mask, labels [steps, B, S].
    warmup: untimed steps first (the first one traces the step).
  Returns:
    Examples per second over the remaining steps.
  """
  from official.nlp import optimization  # pylint: disable=g-import-not-at-top
  batches = np.load(batches_file)
  steps, batch = batches["labels"].shape[:2]
  network = encoder(family, shape)
  classifier = tf_keras.layers.Dense(2, name="classifier")
  optimizer = optimization.create_optimizer(2e-5, steps, steps // 10)

  @tf.function
  def step(word_ids, mask, labels):
    with tf.GradientTape() as tape:
      outputs = network({"input_word_ids": word_ids, "input_mask": mask,
                         "input_type_ids": tf.zeros_like(word_ids)},
                        training=True)
      logits = classifier(outputs["pooled_output"])                # [B, 2]
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels, logits))
    variables = network.trainable_variables + classifier.trainable_variables
    gradients, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), 1.0)
    optimizer.apply_gradients(zip(gradients, variables))
    return loss

  def run(index):
    step(tf.constant(batches["input_word_ids"][index], tf.int32),
         tf.constant(batches["input_mask"][index], tf.int32),
         tf.constant(batches["labels"][index], tf.int32))

  for index in range(warmup):
    run(index)
  start = time.perf_counter()
  for index in range(warmup, steps):
    run(index)
  return (steps - warmup) * batch / (time.perf_counter() - start)
