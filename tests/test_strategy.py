"""The strategy factory and numerics knobs."""
import pytest
import tensorflow as tf
import tf_keras

from bertexp import strategy


def test_tpu_without_address_fails_first():
  with pytest.raises(ValueError, match="strategy kind 'tpu' needs an address"):
    strategy.make_strategy("tpu")


def test_unknown_kind():
  with pytest.raises(ValueError, match="strategy kind 'gpus' is not one of"):
    strategy.make_strategy("gpus")


def test_cpu_kinds_build():
  assert strategy.make_strategy("mirrored", num_gpus=0).num_replicas_in_sync == 1
  assert isinstance(strategy.make_strategy("one_device"),
                    tf.distribute.OneDeviceStrategy)
  assert strategy.make_strategy("default").num_replicas_in_sync == 1
  with pytest.raises(ValueError, match="num_gpus must be >= 0"):
    strategy.make_strategy("mirrored", num_gpus=-1)


def test_cross_device_ops_choice():
  assert isinstance(strategy._cross_device_ops("nccl", 8), tf.distribute.NcclAllReduce)
  assert isinstance(strategy._cross_device_ops("hierarchical_copy", 2),
                    tf.distribute.HierarchicalCopyAllReduce)
  assert strategy._cross_device_ops("nccl", 1) is None
  with pytest.raises(ValueError, match="all_reduce 'tree'"):
    strategy._cross_device_ops("tree", 2)


def test_precision_policy():
  try:
    assert strategy.configure_numerics("mixed_bfloat16") == ("mixed_bfloat16", False)
    assert tf_keras.mixed_precision.global_policy().compute_dtype == "bfloat16"
    with pytest.raises(ValueError, match="precision 'fp8'"):
      strategy.configure_numerics("fp8")
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
