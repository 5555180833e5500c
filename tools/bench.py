"""`make bench`: bertexp against Model Garden, side by side in one run.

1. Train step (forward + backward + AdamW) of bertexp's encoder and of
   Model Garden's `official.nlp.modeling.networks.BertEncoder` at the same
   shapes, fp32 and mixed_bfloat16, as examples/sec and the ratio
   bertexp / Model Garden (> 1 = bertexp faster). Both run the same
   classifier head, loss, optimizer and tf.function(jit_compile=False).
   bertexp's encoder runs as its classifier and Trainer run it (pooled_only:
   the last block computes [CLS]'s row only; a dropout seed per step, so its
   stateless 16-bit masks); Model Garden's as its BERT classifier
   configs build it (output_range unset: every row), and again with
   output_range=1, its own [CLS]-only option, for the like-for-like ratio.
   Beside them, bertexp's real Trainer step (its loop, loss normalisation,
   clipping, guards and metrics) on the same shape. Then the AdamW update
   alone on each shape's variables: Keras' AdamW against bertexp's (one fused
   kernel per variable), as milliseconds and their ratio.
2. `bertexp prepare` throughput on MNLI-size input (sentence pairs drawn
   from the real movie-review sentences), including TFRecord writing.
3. SQuAD dev-v1.1 windowing, post-processing and scoring.
4. `bertexp prepare pretraining` (seq 128, 20 predictions, whole-word
   masking, dupe_factor 1) on a corpus of real English sentences: MB of text
   per second and instances per second with 1 worker and with one worker per
   core, in the same run.
5. Resuming training input at 90 % of the MNLI-size file of (2): seconds to
   the first batch with bertexp's positioned order (bertexp.data.order),
   against reading through the consumed records (`Dataset.skip` over the
   parsed, shuffled stream: the only exact resume a shuffle buffer allows),
   and against a fresh start.

The machine is shared and noisy: the two sides alternate, and we report the
median of several timed windows per side.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bertexp  # noqa: E402,F401  (before TensorFlow: legacy Keras, oneDNN)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from bertexp.model import modeling  # noqa: E402
from bertexp.util import machine  # noqa: E402

SHAPES = {
    # name: (layers, hidden, heads, intermediate, seq, batch)
    "base": (12, 768, 12, 3072, 128, 8),
    "tiny": (2, 128, 2, 512, 128, 32),
}


def _bertexp_encoder(layers, hidden, heads, inner, vocab=30522):
  config = modeling.BertConfig(vocab_size=vocab, hidden_size=hidden,
                               num_hidden_layers=layers,
                               num_attention_heads=heads,
                               intermediate_size=inner)
  return modeling.BertEncoder(config)


def _model_garden_encoder(layers, hidden, heads, inner, vocab=30522,
                          output_range=None):
  from official.nlp.modeling import networks
  return networks.BertEncoder(
      output_range=output_range,
      vocab_size=vocab, hidden_size=hidden, num_layers=layers,
      num_attention_heads=heads, inner_dim=inner, max_sequence_length=512,
      type_vocab_size=2, inner_activation=lambda x: tf.nn.gelu(x),
      output_dropout=0.1, attention_dropout=0.1, dict_outputs=True)


def _make_inputs(seq, batch):
  rng = np.random.RandomState(0)
  return {"input_word_ids": tf.constant(rng.randint(1000, 30000, [batch, seq]),
                                        tf.int32),
          "input_mask": tf.ones([batch, seq], tf.int32),
          "input_type_ids": tf.zeros([batch, seq], tf.int32)}


def _make_step(encoder, seq, batch, seeded_dropout=False, **call_kwargs):
  """A compiled train step of `encoder` + a dense head, Keras' AdamW.

  seeded_dropout: pass a new [2] dropout seed each step, as bertexp's
  Trainer does (bertexp's encoder then draws its 16-bit stateless masks;
  without a seed it falls back to tf.nn.dropout, a path training never
  takes)."""
  head = tf_keras.layers.Dense(2, dtype="float32")
  optimizer = tf_keras.optimizers.AdamW(learning_rate=1e-5)
  inputs = _make_inputs(seq, batch)
  labels = tf.constant(np.random.RandomState(1).randint(0, 2, [batch]))
  steps_taken = tf.Variable(0, dtype=tf.int64, trainable=False)

  @tf.function
  def step():
    kwargs = dict(call_kwargs)
    if seeded_dropout:
      kwargs["dropout_seed"] = tf.stack([tf.constant(0, tf.int64),
                                         steps_taken.assign_add(1)])
    with tf.GradientTape() as tape:
      pooled = encoder(inputs, training=True, **kwargs)["pooled_output"]
      logits = head(tf.cast(pooled, tf.float32))
      loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(
          labels, logits, from_logits=True))
    variables = encoder.trainable_variables + head.trainable_variables
    grads = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(grads, variables))
    return loss
  return step


def _trainer_window(layers, hidden, heads, inner, seq, batch, steps):
  """A function running `steps` steps of bertexp's real Trainer (one
  compiled loop, as `bertexp train` runs them) on one in-memory batch."""
  import dataclasses
  import memory_probe
  from bertexp.train import optimization
  from bertexp.train import strategy as strategy_lib
  from bertexp.train import trainer as trainer_lib
  config = _bertexp_encoder(layers, hidden, heads, inner).config
  task = memory_probe.classification_task(
      tempfile.mkdtemp(), dataclasses.asdict(config), seq)
  model = task.build_model()
  optimizer = optimization.create_optimizer(10 ** 6, 100, learning_rate=1e-5)
  optimizer.build(model.trainable_variables)
  features = _make_inputs(seq, batch)
  labels = tf.zeros([batch], tf.int64)
  trainer = trainer_lib.Trainer(
      task=task, model=model, optimizer=optimizer,
      strategy=strategy_lib.make_strategy("default"),
      settings=trainer_lib.StepSettings(global_batch_size=batch,
                                        eval_batch_size=batch),
      total_steps=10 ** 6,
      train_dataset=tf.data.Dataset.from_tensors((features, labels)).repeat())
  return lambda: trainer.train(tf.constant(steps))["loss"]


def bench_train(shape, precision, windows, steps_per_window):
  """Examples/s of (bertexp encoder, Model Garden encoder) in the same
  hand-written step, and of bertexp's whole Trainer step."""
  layers, hidden, heads, inner, seq, batch = SHAPES[shape]
  tf_keras.mixed_precision.set_global_policy(precision)
  sides = {}
  for name, build, call_kwargs in (
      ("bertexp", _bertexp_encoder,
       {"pooled_only": True, "seeded_dropout": True}),
      # As a user's own Keras loop calls bertexp.load_encoder(...): no
      # seed (the encoder draws one), every row of the last block.
      ("bertexp_user", _bertexp_encoder, {}),
      ("model_garden", _model_garden_encoder, {}),
      ("model_garden_range1", lambda *shape: _model_garden_encoder(
          *shape, output_range=1), {})):
    step = _make_step(build(layers, hidden, heads, inner), seq, batch,
                      **call_kwargs)

    def window(step=step):
      for _ in range(steps_per_window):
        loss = step()
      return loss
    sides[name] = (window, [])
  sides["trainer"] = (_trainer_window(layers, hidden, heads, inner, seq, batch,
                                      steps_per_window), [])
  for window, _ in sides.values():            # compile
    float(window())
  for _ in range(windows):                    # alternate: same noise for all
    for name, (window, rates) in sides.items():
      start = time.perf_counter()
      float(window())
      rates.append(steps_per_window * batch / (time.perf_counter() - start))
  tf_keras.mixed_precision.set_global_policy("float32")
  return {name: statistics.median(rates) for name, (_, rates) in sides.items()}


def bench_optimizer(shape, windows, steps_per_window=5):
  """ms per AdamW update of an encoder's variables (the word embedding's
  gradient dense, as the Trainer gives it on several replicas): Keras'
  AdamW against bertexp's (one fused kernel per variable), alternating."""
  from bertexp.train import optimization
  layers, hidden, heads, inner, _, _ = SHAPES[shape]
  encoder = _bertexp_encoder(layers, hidden, heads, inner)
  encoder(_make_inputs(8, 1))
  shapes = [v.shape for v in encoder.trainable_variables]
  rng = np.random.RandomState(0)
  grads = [tf.constant(rng.normal(0, 1e-3, s).astype(np.float32))
           for s in shapes]
  sides = {}
  for name, cls in (("keras", tf_keras.optimizers.AdamW),
                    ("bertexp", optimization.AdamW)):
    variables = [tf.Variable(v) for v in encoder.trainable_variables]
    optimizer = cls(learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6)
    optimizer.build(variables)
    step = tf.function(lambda o=optimizer, v=variables: o.apply_gradients(
        zip(grads, v)))
    step()
    sides[name] = (step, [])
  for _ in range(windows):
    for step, times in sides.values():
      start = time.perf_counter()
      for _ in range(steps_per_window):
        step()
      times.append((time.perf_counter() - start) / steps_per_window * 1e3)
  return {name: statistics.median(times) for name, (_, times) in sides.items()}


def bench_prepare(num_pairs, vocab_file, output_dir):
  from bertexp.util import demo_data
  from bertexp.tasks.classification import data as prepare
  from bertexp.data import readers
  sentences = [s for s, _ in demo_data.read_movie_reviews()]
  rng = np.random.RandomState(0)
  a = [sentences[i] for i in rng.randint(0, len(sentences), num_pairs)]
  b = [sentences[i] for i in rng.randint(0, len(sentences), num_pairs)]
  labels = [("contradiction", "entailment", "neutral")[i]
            for i in rng.randint(0, 3, num_pairs)]
  rows = readers.Rows("generated", a, b, labels,
                      [str(i) for i in range(num_pairs)],
                      list(range(2, num_pairs + 2)))
  start = time.perf_counter()
  prepare.prepare("bench", [("train", rows, True)], vocab_file=vocab_file,
                  output_dir=output_dir, max_seq_length=128,
                  label_names=("contradiction", "entailment", "neutral"),
                  regression=False)
  seconds = time.perf_counter() - start
  size = os.path.getsize(os.path.join(output_dir, "bench_train.tf_record"))
  return seconds, size


def _seconds_to_first_batch(make):
  start = time.perf_counter()
  next(iter(make()))
  return time.perf_counter() - start


def bench_resume(records_file, num_records, fraction=0.9, batch=32):
  """Seconds to the first training batch at `fraction` of an epoch."""
  from bertexp.data import pipeline
  consumed = int(num_records * fraction) // batch * batch
  with tempfile.TemporaryDirectory() as tmp:
    counts = os.path.join(tmp, "counts.json")
    ours = lambda start: lambda: pipeline.make_dataset(
        records_file, seq_length=128, label_type="int", batch_size=batch,
        is_training=True, train_order=pipeline.TrainOrder(
            seed=1, start=start, counts_cache=counts))
    first_count = _seconds_to_first_batch(ours(0))   # counts the records
    fresh = _seconds_to_first_batch(ours(0))
    resumed = _seconds_to_first_batch(ours(consumed))
    through = _seconds_to_first_batch(
        lambda: ours(0)().skip(consumed // batch))
  print(f"resume at {fraction:.0%} of {num_records:,} records (seq 128, batch "
        f"{batch}): {resumed:.2f} s to the first batch; fresh start "
        f"{fresh:.2f} s; reading through the consumed batches {through:.1f} s "
        f"(ratio {through / resumed:.0f}x); first start of a run (counting "
        f"the records once) {first_count:.2f} s", flush=True)


def _pretraining_corpus(path, megabytes):
  """Documents of 10-30 real movie-review sentences, reshuffled until the
  corpus reaches `megabytes`."""
  from bertexp.util import demo_data
  sentences = [s for s, _ in demo_data.read_movie_reviews()]
  rng = np.random.RandomState(0)
  written = 0
  with open(path, "w") as f:
    while written < megabytes * 1e6:
      order = rng.permutation(len(sentences))
      start = 0
      while start < len(order):
        size = rng.randint(10, 31)
        text = "\n".join(sentences[i] for i in order[start:start + size]) + "\n\n"
        f.write(text)
        written += len(text.encode())
        start += size


def bench_pretraining(vocab_file, megabytes):
  from bertexp.tasks.pretraining import data as pretraining
  options = pretraining.Options(vocab_file=vocab_file, max_seq_length=128,
                                max_predictions_per_seq=20, dupe_factor=1,
                                do_whole_word_mask=True)
  cores = os.cpu_count() or 1
  with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "corpus.txt")
    _pretraining_corpus(corpus, megabytes)
    results = {}
    for workers in sorted({1, cores}):
      start = time.perf_counter()
      meta = pretraining.prepare_pretraining(
          input_files=corpus, output_file=os.path.join(tmp, f"w{workers}.tfrecord"),
          options=options, num_workers=workers, progress=False)
      seconds = time.perf_counter() - start
      results[workers] = (meta["input_bytes"] / 1e6 / seconds,
                          meta["train_data_size"] / seconds, seconds)
      print(f"prepare pretraining: {meta['input_bytes'] / 1e6:.1f} MB, "
            f"{workers} worker(s): {seconds:.1f} s = {results[workers][0]:.2f} "
            f"MB/s, {results[workers][1]:,.0f} instances/s", flush=True)
    same = open(os.path.join(tmp, "w1.tfrecord"), "rb").read() == open(
        os.path.join(tmp, f"w{cores}.tfrecord"), "rb").read()
    print(f"prepare pretraining: {cores} workers / 1 worker = "
          f"{results[cores][0] / results[1][0]:.2f}x; outputs identical: {same}",
          flush=True)


def bench_squad(vocab_file, dev_file):
  """Full dev-v1.1: windowing (384/128/64) and post-processing + scoring of
  given logits (random here: the work does not depend on their values)."""
  from bertexp.tasks.squad import data as squad
  from bertexp.data import tokenization
  from bertexp.tasks.squad import answers as squad_answers
  from bertexp.tasks.squad import squad_json
  from bertexp.tasks.squad import scoring as squad_scoring
  start = time.perf_counter()
  examples, _ = squad.read_examples(dev_file, is_training=False,
                                    version_2_with_negative=False)
  tokenizer = tokenization.Tokenizer(vocab_file)
  features = squad.convert_examples(examples, tokenizer, max_seq_length=384,
                                    doc_stride=128, max_query_length=64,
                                    is_training=False)
  prepare_seconds = time.perf_counter() - start
  rng = np.random.RandomState(0)
  dataset = squad_json.load_json(dev_file, "dataset")
  # Two kinds of given logits: pure noise (a worst case: long spans, many
  # distinct texts) and model-like (noise plus a clear short span per window).
  noise = {f.unique_id: (rng.randn(384).astype(np.float32),
                         rng.randn(384).astype(np.float32)) for f in features}
  peaked = {}
  for f in features:
    start, end = noise[f.unique_id]
    start, end = start.copy(), end.copy()
    context = sorted(f.token_to_word)
    s = context[rng.randint(len(context))]
    start[s] += 8.0
    end[min(s + rng.randint(4), context[-1])] += 8.0
    peaked[f.unique_id] = (start, end)
  for name, logits in (("model-like", peaked), ("random", noise)):
    begin = time.perf_counter()
    predictions, _, _ = squad_answers.predict_answers(examples, features, logits,
                                                      tokenizer)
    post_seconds = time.perf_counter() - begin
    begin = time.perf_counter()
    squad_scoring.evaluate_v1(dataset, predictions)
    eval_seconds = time.perf_counter() - begin
    print(f"squad dev-v1.1 ({name} logits): {len(examples)} questions -> "
          f"{len(features)} windows in {prepare_seconds:.1f} s (target <= 6 s); "
          f"post-processing {post_seconds:.1f} s + evaluation "
          f"{eval_seconds:.1f} s = {post_seconds + eval_seconds:.1f} s "
          "(target <= 4 s)", flush=True)
    squad_scoring.normalize_answer.cache_clear()   # each kind starts cold
    squad_answers.final_text.cache_clear()


def main():
  parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
  parser.add_argument("--shapes", default="tiny,base")
  parser.add_argument("--precisions", default="float32,mixed_bfloat16")
  parser.add_argument("--windows", type=int, default=5)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--prepare_pairs", type=int, default=393_000)
  parser.add_argument("--vocab_file", default=".cache/minilm_hf/vocab.txt")
  parser.add_argument("--skip_train", action="store_true")
  parser.add_argument("--squad_dev", default=".cache/squad/dev-v1.1.json")
  parser.add_argument("--pretraining_mb", type=float, default=24)
  args = parser.parse_args()
  print(machine.cpu_line(), flush=True)
  if not args.skip_train:
    print("examples/s; ratios to Model Garden's default encoder (MG) and "
          "to it with output_range=1 (MG r=1)")
    print("user: bertexp's encoder as a user's own loop calls it (no seed, "
          "every row), against MG")
    print(f"{'shape':6} {'precision':15} {'bertexp':>8} {'MG':>8} "
          f"{'ratio':>6} {'MG r=1':>8} {'ratio':>6} {'Trainer':>8} "
          f"{'ratio':>6} {'user':>8} {'ratio':>6}")
    for shape in args.shapes.split(","):
      for precision in args.precisions.split(","):
        rates = bench_train(shape, precision, args.windows, args.steps)
        ours, theirs = rates["bertexp"], rates["model_garden"]
        range1, trainer = rates["model_garden_range1"], rates["trainer"]
        user = rates["bertexp_user"]
        print(f"{shape:6} {precision:15} {ours:8.2f} {theirs:8.2f} "
              f"{ours / theirs:6.2f} {range1:8.2f} {ours / range1:6.2f} "
              f"{trainer:8.2f} {trainer / theirs:6.2f} {user:8.2f} "
              f"{user / theirs:6.2f}", flush=True)
    for shape in args.shapes.split(","):
      ms = bench_optimizer(shape, args.windows)
      print(f"AdamW update, {shape} encoder's variables: Keras "
            f"{ms['keras']:.1f} ms, bertexp {ms['bertexp']:.1f} ms, ratio "
            f"{ms['keras'] / ms['bertexp']:.2f}x", flush=True)
  if args.squad_dev:
    bench_squad(args.vocab_file, args.squad_dev)
  if args.prepare_pairs:
    with tempfile.TemporaryDirectory() as tmp:
      seconds, size = bench_prepare(args.prepare_pairs, args.vocab_file, tmp)
      print(f"prepare: {args.prepare_pairs} sentence pairs (seq 128) -> "
            f"TFRecord ({size / 1e6:.0f} MB) in {seconds:.1f} s = "
            f"{args.prepare_pairs / seconds:,.0f} pairs/s", flush=True)
      bench_resume(os.path.join(tmp, "bench_train.tf_record"),
                   args.prepare_pairs)
  if args.pretraining_mb:
    bench_pretraining(args.vocab_file, args.pretraining_mb)


if __name__ == "__main__":
  main()
