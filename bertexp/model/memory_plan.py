"""How much device memory a training run needs, before running it.

    plan = memory_plan.estimate(config, seq_length=512, micro_batch=4,
                                head=memory_plan.Head.pooled_dense(config, 2))
    plan.total_bytes, plan.rows()

Per replica, in bytes (P parameters, b micro-batch, S sequence length, H
hidden, I intermediate, N heads, L layers; e = 4 bytes in float32, 2 in
mixed precision):

  weights        4 P                   (float32 master weights)
  gradients      4 P                   (float32)
  optimizer      8 P                   (AdamW / LAMB: two float32 slots)
  accumulator    4 P                   (only with gradient accumulation)
  weight casts   2 P                   (only in mixed precision)
  activations    b * ((L - 1) * layer + last + embeddings + head) * e
    layer        = 10 S H + 2 S I + 3 N S^2   (what one Transformer block
                   keeps for its backward pass: its input, q, k, v, context,
                   two dropout masks and the LayerNorm inputs [10 S H]; the
                   feed-forward pre- and post-activation [2 S I]; attention
                   probabilities, their dropout mask and the dropped
                   probabilities [3 N S^2])
    last         = layer, or for classification heads (whose last block
                   computes [CLS]'s row only) 3 S H + 7 H + 2 I + 3 N S
    with recompute: L * S H (each block's input) + 2 layers (the block
                   being differentiated: its recomputed activations and
                   their gradients)
    embeddings   = 4 S H;  head = what the task's head keeps (Head)
  backward peak  b * (2 N S^2 + 2 S I) * e   (gradients of the largest
                   tensors of the layer being differentiated)
  overhead       4 P + 0.25 GiB  (update temporaries, the traced
                   graphs and allocator slack: fitted to the peaks `make
                   bench` measures on the CPU, 12 configurations from a
                   2x128 to a 12x768 encoder) + L x what a family's block
                   holds whatever the batch (block_fixed_bytes: 0 for
                   BERT's blocks, measured for MobileBERT's)
  runtime        what the process holds before the model exists (the
                   TensorFlow runtime on a CPU; measured, not modelled)

Dropout masks cost nothing when the dropout rates are 0. The formula counts
the tensors bertexp's encoder keeps; `make bench` compares it with the
measured peak memory of real training steps (tools/bench.py memory).
"""
import dataclasses
import os
from typing import Optional

GB = 1024 ** 3

# HBM per TPU core (v2, v3) or chip (v4 and later), GiB.
TPU_CORE_MEMORY_GB = {"v2": 8, "v3": 16, "v4": 32, "v5e": 16, "v5p": 95,
                      "v6e": 32}


@dataclasses.dataclass(frozen=True)
class Head:
  """A task head: its parameters, the activation elements it keeps per
  example for the backward pass, and how many positions the encoder's last
  block computes for it (None: all)."""
  parameters: int
  activations_per_example: int
  last_block_positions: Optional[int] = None

  @classmethod
  def pooled_dense(cls, config, outputs):
    """A dense layer of `outputs` units on the pooled [CLS] output (a
    sequence classifier): the last block computes one position."""
    return cls(config.hidden_size * outputs + outputs,
               3 * config.hidden_size, last_block_positions=1)

  @classmethod
  def token_dense(cls, config, seq_length, outputs):
    """A dense layer of `outputs` units on every position (span ends,
    tags): logits, their softmax and its gradient per position."""
    return cls(config.hidden_size * outputs + outputs,
               3 * seq_length * outputs)


def encoder_parameters(config):
  """Parameters of the encoder `config` describes (its family's count:
  config.parameter_count())."""
  return config.parameter_count()


def _layer_elements(config, seq_length, queries=None):
  """Elements one block keeps when `queries` of its seq_length positions
  (all when None) are computed: the input, keys and values cover every
  position, the rest only the queries."""
  return config.block_activation_elements(
      seq_length, seq_length if queries is None else queries)


@dataclasses.dataclass(frozen=True)
class Plan:
  """Per-replica bytes of one training configuration."""
  parameters: int
  weights: int
  gradients: int
  optimizer_slots: int
  accumulator: int
  weight_casts: int
  activations: int
  activations_without_recompute: int
  activations_with_recompute: int
  backward_peak: int
  overhead: int
  runtime: int

  @property
  def total_bytes(self):
    return (self.weights + self.gradients + self.optimizer_slots +
            self.accumulator + self.weight_casts + self.activations +
            self.backward_peak + self.overhead + self.runtime)

  def rows(self):
    """(label, value) lines for printing."""
    gib = lambda b: f"{b / GB:.2f} GiB"
    return [("parameters", f"{self.parameters:,}"),
            ("weights", gib(self.weights)),
            ("gradients", gib(self.gradients)),
            ("optimizer slots", gib(self.optimizer_slots)),
            ("accumulator", gib(self.accumulator)),
            ("weight casts (mixed precision)", gib(self.weight_casts)),
            ("activations", gib(self.activations)),
            ("  without recompute", gib(self.activations_without_recompute)),
            ("  with recompute", gib(self.activations_with_recompute)),
            ("backward peak", gib(self.backward_peak)),
            ("overhead", gib(self.overhead)),
            ("runtime", gib(self.runtime)),
            ("total", gib(self.total_bytes))]


def estimate(config, *, seq_length, micro_batch, head, recompute=False,
             accumulation_steps=1, mixed_precision=False, runtime_bytes=0):
  """The Plan of training `config` + `head` at (micro_batch, seq_length)."""
  parameters = encoder_parameters(config) + head.parameters
  element = 2 if mixed_precision else 4
  layer = _layer_elements(config, seq_length)
  last = _layer_elements(config, seq_length, head.last_block_positions)
  embeddings = 4 * seq_length * config.hidden_size
  outside = embeddings + head.activations_per_example
  layers = config.num_hidden_layers
  plain = micro_batch * ((layers - 1) * layer + last + outside) * element
  recomputed = micro_batch * (
      layers * seq_length * config.hidden_size + 2 * layer + outside) * element
  backward = micro_batch * element * (
      2 * config.num_attention_heads * seq_length ** 2 +
      2 * seq_length * config.intermediate_size)
  return Plan(
      parameters=parameters, weights=4 * parameters,
      gradients=4 * parameters, optimizer_slots=8 * parameters,
      accumulator=4 * parameters if accumulation_steps > 1 else 0,
      weight_casts=2 * parameters if mixed_precision else 0,
      activations=recomputed if recompute else plain,
      activations_without_recompute=plain,
      activations_with_recompute=recomputed, backward_peak=backward,
      overhead=(4 * parameters + GB // 4 +
                layers * config.block_fixed_bytes(recompute)),
      runtime=runtime_bytes)


def smallest_fitting(config, *, seq_length, batch_per_replica, head,
                     device_bytes, mixed_precision=False, runtime_bytes=0):
  """{recompute: smallest K dividing batch_per_replica whose plan fits
  device_bytes, or None}, for recompute False and True."""
  found = {}
  for recompute in (False, True):
    found[recompute] = None
    for k in range(1, batch_per_replica + 1):
      if batch_per_replica % k:
        continue
      plan = estimate(config, seq_length=seq_length,
                      micro_batch=batch_per_replica // k, head=head,
                      recompute=recompute, accumulation_steps=k,
                      mixed_precision=mixed_precision,
                      runtime_bytes=runtime_bytes)
      if plan.total_bytes <= device_bytes:
        found[recompute] = k
        break
  return found


def largest_micro_batch(config, *, seq_length, head, device_bytes,
                        recompute=False, mixed_precision=False, limit=4096):
  """The largest micro-batch whose plan fits device_bytes (0: none)."""
  best = 0
  low, high = 1, limit
  while low <= high:
    middle = (low + high) // 2
    plan = estimate(config, seq_length=seq_length, micro_batch=middle,
                    head=head, recompute=recompute,
                    mixed_precision=mixed_precision)
    if plan.total_bytes <= device_bytes:
      best, low = middle, middle + 1
    else:
      high = middle - 1
  return best


def cpu_memory_bytes():
  """Physical memory of this machine."""
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def tpu_memory_bytes(tpu_type):
  """HBM per core of a TPU type such as "v3" or "v3-8"."""
  version = tpu_type.split("-")[0].lower()
  if version not in TPU_CORE_MEMORY_GB:
    raise ValueError(f"TPU type {tpu_type!r}: expected one of "
                     f"{sorted(TPU_CORE_MEMORY_GB)}")
  return TPU_CORE_MEMORY_GB[version] * GB

