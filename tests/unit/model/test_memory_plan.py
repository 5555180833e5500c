"""The memory plan (bertexp.model.memory_plan, `--mode=plan`): its parameter count
is the real models', its choice for the shipped 16 GB SQuAD file holds, and
`bertexp train --mode=plan` prints it without training."""
import gin
import numpy as np
import pytest

from bertexp import cli
from bertexp import gin_setup
from bertexp.model import memory_plan
from bertexp.model import modeling
from bertexp.tasks.pretraining import task as pretraining
from bertexp.tasks.squad import task as squad
from bertexp.tasks.tagging import task as tagging
from bertexp.train import strategy
from conftest import TINY_CONFIG
from conftest import prepare_tiny_sst2_run

BERT_LARGE = modeling.BertConfig(vocab_size=30522, hidden_size=1024,
                                 num_hidden_layers=24, num_attention_heads=16,
                                 intermediate_size=4096)


def _size(model):
  return sum(int(np.prod(v.shape)) for v in model.variables)


@pytest.mark.parametrize("head", ["classifier", "span", "tagging",
                                  "masked_lm"])
def test_plan_counts_the_parameters_of_the_real_models(head):
  """Each task's declared memory-plan head counts its real model's
  parameters."""
  config = modeling.BertConfig(**TINY_CONFIG)
  encoder = modeling.BertEncoder(config)
  if head == "classifier":
    model = modeling.ClassifierModel(encoder, 3).build_variables()
    planned = memory_plan.Head.pooled_dense(config, 3)
  elif head == "span":
    model = squad.SpanModel(encoder).build_variables()
    planned = memory_plan.Head.token_dense(config, 16, 2)
  elif head == "tagging":
    model = tagging.TaggingModel(encoder, 7, 0.1).build_variables()
    planned = memory_plan.Head.token_dense(config, 16, 7)
  else:
    model = pretraining.PretrainingModel(encoder).build_variables(5)
    planned = pretraining.masked_lm_head(config, 5)
  plan = memory_plan.estimate(config, seq_length=16, micro_batch=2,
                              head=planned)
  assert plan.parameters == _size(model)
  assert plan.weights == 4 * _size(model)


def test_recompute_and_accumulation_shrink_the_plan():
  head = memory_plan.Head.token_dense(BERT_LARGE, 384, 2)
  plain = memory_plan.estimate(BERT_LARGE, seq_length=384, micro_batch=32,
                               head=head)
  recomputed = memory_plan.estimate(BERT_LARGE, seq_length=384, micro_batch=32,
                                    head=head, recompute=True)
  accumulated = memory_plan.estimate(BERT_LARGE, seq_length=384, micro_batch=4,
                                     head=head, accumulation_steps=8)
  assert recomputed.activations < plain.activations / 4
  assert accumulated.accumulator == 4 * plain.parameters
  assert accumulated.total_bytes < plain.total_bytes / 2
  assert memory_plan.largest_micro_batch(
      BERT_LARGE, seq_length=512, head=head, device_bytes=12 * memory_plan.GB,
      recompute=True) > memory_plan.largest_micro_batch(
          BERT_LARGE, seq_length=512, head=head,
          device_bytes=12 * memory_plan.GB)


def test_the_16gb_squad_file_fits_where_the_plan_says_plain_k_would_need_8():
  """BERT-Large, SQuAD seq 384, batch 32 on a 16 GB GPU in float32: the plan
  needs accumulation 8 without recompute, 1 with; the shipped file takes
  recompute + 2, which fits with headroom."""
  head = memory_plan.Head.token_dense(BERT_LARGE, 384, 2)
  device = 16 * memory_plan.GB
  assert memory_plan.smallest_fitting(
      BERT_LARGE, seq_length=384, batch_per_replica=32, head=head,
      device_bytes=device) == {False: 8, True: 1}
  gin_setup.parse_gin(["experiments/squad/squad_v1_gpu_16gb.gin"],
                      ['MODEL_DIR="unused"'])
  k = gin.query_parameter("%GRADIENT_ACCUMULATION_STEPS")
  assert (k, gin.query_parameter("%RECOMPUTE")) == (2, True)
  assert gin.query_parameter("%TRAIN_BATCH_SIZE") == 32
  shipped = memory_plan.estimate(BERT_LARGE, seq_length=384,
                                 micro_batch=32 // k, head=head,
                                 recompute=True, accumulation_steps=k)
  assert shipped.total_bytes < 0.7 * device


def test_mode_plan_prints_the_plan_and_trains_nothing(tmp_path, tiny_vocab,
                                                      tiny_config, capsys):
  params = prepare_tiny_sst2_run(str(tmp_path / "exp"), tiny_vocab,
                                 tiny_config)
  params.update(MODEL_DIR=str(tmp_path / "run"), TRAIN_BATCH_SIZE=8,
                GRADIENT_ACCUMULATION_STEPS=2, RECOMPUTE=True)
  args = ["train", "--mode=plan",
          "--gin_file=experiments/demo/movie_sentiment_cpu.gin",
          "--gin_param=bertexp.memory_report.device_memory_gb=64"] + [
              f"--gin_param={k}={v!r}" for k, v in params.items()]
  assert cli.main(args) == 0
  out = capsys.readouterr().out
  config = modeling.BertConfig.from_json_file(tiny_config)
  parameters = memory_plan.encoder_parameters(config) + 2 * 16 + 2
  assert f"parameters                       {parameters:,}" in out
  assert "micro-batch 4 x sequence 16" in out
  assert "recompute on; gradient_accumulation_steps 2" in out
  # The demo binds precision "auto": the plan names what this CPU gets.
  assert f"sequence 16; {strategy.auto_precision('CPU')} (auto);" in out
  assert "device: CPU (all replicas share it) with 64.0 GiB: fits" in out
  assert "smallest gradient_accumulation_steps that fits with recompute: 1" in out
  assert not (tmp_path / "run").exists() or not list((tmp_path / "run").glob(
      "ckpt-*"))


def test_families_add_what_their_blocks_keep():
  """DeBERTa's blocks also keep the relative terms' scores against every
  table row ([N, Q, 2 x span] a block); MobileBERT's keep its bottlenecks
  and every feed-forward network: the plan counts both (their peaks are
  compared with measurements by tools/bench_memory.py)."""
  from bertexp.model import encoders
  shape = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
               num_attention_heads=12, intermediate_size=1536)
  seq, batch = 128, 8
  activations = lambda config: memory_plan.estimate(
      config, seq_length=seq, micro_batch=batch,
      head=memory_plan.Head.pooled_dense(config, 2)).activations
  bert = modeling.BertConfig(**shape)
  deberta = encoders.config_from_dict(dict(
      shape, family="deberta-v2", relative_attention=True,
      position_buckets=256, pos_att_type=["p2c", "c2p"],
      type_vocab_size=0))
  relative = 6 * batch * 4 * 12 * 2 * 256 * (seq * 5 + 1) // 6
  assert activations(deberta) - activations(bert) == relative
  mobile = encoders.config_from_dict(dict(family="mobilebert",
                                          vocab_size=30522))
  one_ffn = encoders.config_from_dict(dict(
      family="mobilebert", vocab_size=30522, num_feedforward_networks=1))
  # Per network: its input and the residual sum at 128, relu's output at 512
  # (relu's gradient reads its output; gelu's its input too).
  per_network = 24 * batch * 4 * (2 * 128 + 512) * (seq * 23 + 1) // 24
  assert activations(mobile) - activations(one_ffn) == 3 * per_network
  import dataclasses
  gelu = dataclasses.replace(mobile, hidden_act="gelu")
  assert (activations(gelu) - activations(mobile)) == (
      24 * batch * 4 * 4 * 512 * (seq * 23 + 1) // 24)


def test_mobilebert_blocks_add_their_measured_fixed_bytes_to_the_overhead():
  """What a MobileBERT block holds whatever the batch (measured by
  tools/bench_memory.py) is in the overhead, once per block, more with
  recompute; BERT's blocks add nothing to the fitted overhead."""
  from bertexp.model import encoders
  mobile = encoders.config_from_dict(dict(family="mobilebert",
                                          vocab_size=30522))
  bert = modeling.BertConfig(vocab_size=30522)
  for config, off, on in ((mobile, 61, 70), (bert, 0, 0)):
    for recompute, per_block in ((False, off), (True, on)):
      plan = memory_plan.estimate(
          config, seq_length=128, micro_batch=4, recompute=recompute,
          head=memory_plan.Head.pooled_dense(config, 2))
      fitted = 4 * plan.parameters + memory_plan.GB // 4
      assert plan.overhead - fitted == (
          config.num_hidden_layers * per_block * 2 ** 20)
