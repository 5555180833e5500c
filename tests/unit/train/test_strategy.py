"""The strategy factory and numerics knobs."""
import os
import platform
import subprocess
import sys

import pytest
import tensorflow as tf
import tf_keras

from bertexp.train import strategy


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
  with pytest.raises(ValueError, match="num_gpus and cpu_replicas must be >= 0"):
    strategy.make_strategy("mirrored", num_gpus=-1)


def test_auto_on_a_machine_alone_is_the_default_strategy(monkeypatch, caplog):
  """No cluster in the environment and no GPU: what runtime/cpu.gin binds
  (a cluster's TF_CONFIG: the 2-worker cells of the strategy matrix, which
  run through `bertexp launch --platform=local`)."""
  for name in ("TF_CONFIG", "CLUSTER_SPEC", "TPU_NAME", "TPU_ACCELERATOR_TYPE"):
    monkeypatch.delenv(name, raising=False)
  assert strategy.make_strategy("auto") is tf.distribute.get_strategy()
  monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v4-8")
  caplog.set_level("INFO")
  with pytest.raises(ValueError):            # no TPU here: it tried one
    strategy.make_strategy("auto")
  assert "strategy from the environment: tpu" in caplog.text


def test_cross_device_ops_choice():
  assert isinstance(strategy._cross_device_ops("nccl", 8), tf.distribute.NcclAllReduce)
  assert isinstance(strategy._cross_device_ops("hierarchical_copy", 2),
                    tf.distribute.HierarchicalCopyAllReduce)
  assert strategy._cross_device_ops("nccl", 1) is None
  with pytest.raises(ValueError, match="all_reduce 'tree'"):
    strategy._cross_device_ops("tree", 2)


def test_precision_policy(monkeypatch):
  # Under a oneDNN cap without bfloat16 it is refused (the test below).
  monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
  monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
  try:
    assert strategy.configure_numerics("mixed_bfloat16") == ("mixed_bfloat16", False)
    assert tf_keras.mixed_precision.global_policy().compute_dtype == "bfloat16"
    with pytest.raises(ValueError, match="precision 'fp8'"):
      strategy.configure_numerics("fp8")
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")


def test_xla_flags_join_the_users_once_and_the_tpu_check_binds_them(
    monkeypatch):
  """configure_numerics adds its XLA options to XLA_FLAGS (read at XLA's
  first compile), keeps the user's, and adds them once however often it
  runs; runtime/tpu_check.gin turns LLVM's optimisation off."""
  from bertexp import gin_setup
  monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/mine")
  for _ in range(2):
    strategy.configure_numerics(xla_flags="--xla_backend_optimization_level=0")
  assert os.environ["XLA_FLAGS"] == (
      "--xla_dump_to=/tmp/mine --xla_backend_optimization_level=0")
  monkeypatch.delenv("XLA_FLAGS")
  strategy.configure_numerics()
  assert "XLA_FLAGS" not in os.environ
  with open(gin_setup.resolve_gin_file("runtime/tpu_check.gin")) as f:
    assert ('bertexp.configure_numerics.xla_flags = '
            '"--xla_backend_optimization_level=0"') in f.read().splitlines()


def test_auto_precision_picks_by_device():
  assert strategy.auto_precision("TPU") == "mixed_bfloat16"
  assert strategy.auto_precision("GPU", (8, 0)) == "mixed_bfloat16"
  assert strategy.auto_precision("GPU", (7, 5)) == "mixed_float16"
  assert strategy.auto_precision("GPU", (6, 1)) == "float32"
  assert strategy.auto_precision("GPU", None) == "float32"
  cpu = "mixed_bfloat16" if strategy.cpu_has_native_bfloat16() else "float32"
  assert strategy.auto_precision("CPU") == cpu


@pytest.mark.parametrize("line,native", [
    ("flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw", False),  # AVX-512, no BF16
    ("flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni", True),     # Cooper Lake, Zen 4
    ("flags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8", True),  # Sapphire Rapids
    ("Features\t: fp asimd sve bf16 i8mm", True),                        # Arm v8.6
    ("Features\t: fp asimd evtstrm aes crc32", False)])
def test_native_bfloat16_is_read_from_cpuinfo_flags(tmp_path, line, native):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text(f"processor\t: 0\nmodel name\t: some cpu bf16\n{line}\n")
  assert strategy.cpu_has_native_bfloat16(str(cpuinfo), environ={}) is native
  assert strategy.cpu_has_native_bfloat16(str(tmp_path / "missing"),
                                          environ={}) is False
  assert strategy.cpuinfo_field(("model name",), str(cpuinfo)) == "some cpu bf16"
  assert strategy.cpuinfo_field(("model name",), str(tmp_path / "missing")) is None


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="bertexp asks for oneDNN on x86-64 CPUs only")
def test_importing_bertexp_turns_onednn_on_unless_the_user_chose():
  """TensorFlow leaves oneDNN off on x86 CPUs without AVX-512 VNNI/bfloat16
  or AMX; bertexp asks for it on every x86-64 CPU, and keeps the user's
  TF_ENABLE_ONEDNN_OPTS=0."""
  code = ("import bertexp; from bertexp.train import strategy; "
          "print(strategy.onednn_state())")
  runs = {}
  for setting in (None, "0"):
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if setting is not None:
      env["TF_ENABLE_ONEDNN_OPTS"] = setting
    runs[setting] = subprocess.Popen([sys.executable, "-c", code], env=env,
                                     stdout=subprocess.PIPE, text=True)
  states = {setting: run.communicate()[0].strip().splitlines()[-1]
            for setting, run in runs.items()}
  assert states == {None: "on", "0": "off"}


def test_auto_precision_sets_the_policy_it_returns():
  try:
    for replicas in (strategy.make_strategy("default"),
                     strategy.make_strategy("mirrored", cpu_replicas=2)):
      precision, _ = strategy.configure_numerics("auto", strategy=replicas)
      assert precision == strategy.auto_precision("CPU")
      assert tf_keras.mixed_precision.global_policy().name == precision
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")


def test_cpu_replicas_are_logical_cpu_devices():
  two = strategy.make_strategy("mirrored", cpu_replicas=2)
  assert two.num_replicas_in_sync == 2
  assert [d.split("/")[-1] for d in two.extended.worker_devices] == [
      "device:CPU:0", "device:CPU:1"]
  assert strategy.make_strategy("mirrored", cpu_replicas=2) is two
  with pytest.raises(ValueError, match="bind num_gpus or cpu_replicas"):
    strategy.make_strategy("mirrored", num_gpus=2, cpu_replicas=2)


def test_a_second_replica_count_in_one_process_is_a_clear_error():
  strategy.make_strategy("mirrored", cpu_replicas=2)
  with pytest.raises(ValueError, match="start a new process"):
    strategy.make_strategy("mirrored", cpu_replicas=4)
  # More logical CPUs than TensorFlow started with (the test process has 8).
  with pytest.raises(ValueError, match="already started with 8 CPU"):
    strategy.split_cpu(9)


def test_more_gpus_than_visible_is_a_clear_error():
  visible = len(tf.config.list_physical_devices("GPU"))
  with pytest.raises(ValueError, match=f"NUM_GPUS={visible + 1} .* sees "
                     f"{visible} GPU"):
    strategy.make_strategy("mirrored", num_gpus=visible + 1)


@pytest.mark.parametrize("cap,native", [
    ("AVX2", False), ("avx512_core", False), ("AVX512_CORE_VNNI", False),
    ("AVX512_CORE_BF16", True), ("AVX512_CORE_AMX", True), ("ALL", True),
    ("", True)])
def test_a_onednn_cap_below_bfloat16_makes_bfloat16_emulated(tmp_path, cap,
                                                             native):
  """ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 leaves oneDNN without its
  bfloat16 kernels (TensorFlow still sends it bfloat16 matmuls, and crashes):
  "auto" must then pick float32 on a CPU that has the instructions."""
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n")
  assert strategy.cpu_has_native_bfloat16(
      str(cpuinfo), environ={"ONEDNN_MAX_CPU_ISA": cap}) is native
  assert strategy.cpu_has_native_bfloat16(
      str(cpuinfo), environ={"DNNL_MAX_CPU_ISA": cap}) is native


def test_bfloat16_on_cpu_under_a_onednn_cap_without_it_is_refused(monkeypatch):
  """An explicit mixed_bfloat16 under ONEDNN_MAX_CPU_ISA=AVX2 is a one-line
  error naming the cap and the variable, not TensorFlow's segfault at the first
  bfloat16 matmul; float32 is untouched, and so is bfloat16 uncapped."""
  if not strategy.onednn_enabled():
    pytest.skip("TensorFlow's oneDNN kernels are off in this process")
  monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
  monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
  with pytest.raises(ValueError, match="oneDNN capped at AVX2 "
                     r"\(ONEDNN_MAX_CPU_ISA"):
    strategy.configure_numerics("mixed_bfloat16")
  assert strategy.configure_numerics("float32") == ("float32", False)
  monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
  try:
    assert strategy.configure_numerics("mixed_bfloat16") == (
        "mixed_bfloat16", False)
  finally:
    strategy.configure_numerics("float32")


# Two localhost workers: a collective, then the chief spends SECONDS more
# in the block than worker 1 (as a chief evaluating or writing its files at
# the end of a run), then each prints when it left and exits as `bertexp`
# does (os._exit).
_LEAVING = """
import json, os, sys, time
import tensorflow as tf
from bertexp.train import strategy as strategy_lib
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy_lib.leaving_together(strategy):
  assert strategy_lib.chief_value(strategy, 7 + index) == 7
  if index == 0:
    time.sleep(float(sys.argv[1]))
print("left at", time.time(), flush=True)
os._exit(0)
"""


def test_workers_leave_together_so_the_chief_sees_no_crashed_peer():
  """Worker 1 waits for the chief before it exits; leaving 12 s earlier,
  its missing heartbeats made the chief log "StartAbort UNAVAILABLE ...
  The tasks have crashed" (after ~9 s) at the end of a successful run. The
  chief's draw is every worker's value."""
  import json
  import forked_python
  from bertexp.launch.local import free_ports
  seconds = 12.0
  cluster = {"worker": [f"localhost:{p}" for p in free_ports(2)]}
  workers = [forked_python.popen(
      ["-c", _LEAVING, str(seconds)], env=dict(os.environ, TF_CONFIG=json.dumps(
          {"cluster": cluster, "task": {"type": "worker", "index": i}})),
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
  outputs = []
  try:
    for worker in workers:
      output, _ = worker.communicate(timeout=300)
      assert worker.returncode == 0, output[-3000:]
      outputs.append(output)
  finally:
    for worker in workers:
      worker.kill()
  left = [float(o.split("left at ")[1].split()[0]) for o in outputs]
  assert abs(left[0] - left[1]) < seconds / 4, left
  assert "StartAbort" not in outputs[0] and "crashed" not in outputs[0], (
      outputs[0][-3000:])
