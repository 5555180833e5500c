"""One training process per MODEL_DIR (bertexp.train.writer_lock): a second
process is refused, a dead holder's lock is taken over, a stale lease from
another host expires, and `bertexp train` refuses a held MODEL_DIR while
eval, predict and export still read it."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from bertexp import cli
from bertexp.train import writer_lock
from conftest import REPO, prepare_tiny_sst2_run

HOLD = ("import sys, time\n"
        "from bertexp.train import writer_lock\n"
        "lock = writer_lock.WriterLock(sys.argv[1]).acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n")


@pytest.fixture
def holder(tmp_path):
  """A real other process holding tmp_path/run's lock; killed at the end."""
  model_dir = str(tmp_path / "run")
  process = subprocess.Popen([sys.executable, "-c", HOLD, model_dir],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
  assert process.stdout.readline().strip() == "held"
  yield model_dir, process
  process.kill()
  process.wait()


def test_a_second_process_is_refused_naming_the_holder(holder):
  model_dir, process = holder
  with pytest.raises(ValueError) as refused:
    writer_lock.WriterLock(model_dir).acquire()
  message = str(refused.value)
  assert f"pid {process.pid}" in message and socket.gethostname() in message
  assert "started 20" in message and "\n" not in message
  assert process.poll() is None            # the holder is untouched
  lock = json.load(open(os.path.join(model_dir, writer_lock.LOCK_NAME)))
  assert lock["pid"] == process.pid


def test_a_killed_holders_lock_is_taken_over(holder, caplog):
  model_dir, process = holder
  process.send_signal(signal.SIGKILL)
  process.wait()
  with caplog.at_level("WARNING"):
    lock = writer_lock.WriterLock(model_dir).acquire()
  assert f"its process {process.pid} is gone" in caplog.text
  held = json.load(open(os.path.join(model_dir, writer_lock.LOCK_NAME)))
  assert held["pid"] == os.getpid() and held["token"] == lock.record["token"]
  lock.release()
  assert not os.path.exists(os.path.join(model_dir, writer_lock.LOCK_NAME))


@pytest.mark.parametrize("age,taken", [(10, False), (500, True)])
def test_another_hosts_lease_expires(tmp_path, age, taken):
  model_dir = tmp_path / "run"
  model_dir.mkdir()
  (model_dir / writer_lock.LOCK_NAME).write_text(json.dumps({
      "host": "another-host", "pid": 1, "started": "2026-12-01T00:00:00+00:00",
      "token": "theirs", "renewed": time.time() - age}))
  lock = writer_lock.WriterLock(str(model_dir), lease_seconds=120)
  if not taken:
    with pytest.raises(ValueError, match="host another-host, pid 1"):
      lock.acquire()
    return
  with lock:
    held = json.loads((model_dir / writer_lock.LOCK_NAME).read_text())
    assert held["token"] == lock.record["token"]


def test_the_holder_renews_its_lease(tmp_path):
  """Renewals every lease / 4 = 2 s; the wait for one is bounded (30 s),
  not a fixed sleep, and a holder renewing within its 8 s lease is alive
  however loaded the machine: no timing this test can lose."""
  lock = writer_lock.WriterLock(str(tmp_path), lease_seconds=8).acquire()
  path = tmp_path / writer_lock.LOCK_NAME
  first = json.loads(path.read_text())["renewed"]
  deadline = time.monotonic() + 30
  while (json.loads(path.read_text())["renewed"] == first and
         time.monotonic() < deadline):
    time.sleep(0.1)
  assert json.loads(path.read_text())["renewed"] > first
  # A renewing holder is alive however old its start: refused.
  with pytest.raises(ValueError, match="being trained by another process"):
    writer_lock.WriterLock(str(tmp_path), lease_seconds=8).acquire()
  lock.release()


def test_bertexp_train_refuses_a_held_model_dir_and_eval_still_reads(
    tmp_path, tiny_vocab, one_layer_config, capsys):
  paths = prepare_tiny_sst2_run(str(tmp_path / "exp"), tiny_vocab,
                                one_layer_config)
  gin_file = os.path.join(REPO, "experiments/demo/movie_sentiment_cpu.gin")
  params = [f'--gin_param={k}="{v}"' for k, v in paths.items()] + [
      "--gin_param=TRAIN_BATCH_SIZE=8", "--gin_param=EVAL_BATCH_SIZE=8",
      "--gin_param=TRAIN_STEPS=2", "--gin_param=STEPS_PER_LOOP=1"]
  train = ["train", f"--gin_file={gin_file}"] + params
  assert cli.main(train + ["--mode=train"]) == 0
  model_dir = paths["MODEL_DIR"]
  assert not os.path.exists(os.path.join(model_dir, writer_lock.LOCK_NAME))
  process = subprocess.Popen([sys.executable, "-c", HOLD, model_dir],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
  try:
    assert process.stdout.readline().strip() == "held"
    capsys.readouterr()
    assert cli.main(train + ["--mode=train",
                             "--gin_param=TRAIN_STEPS=4"]) == 2
    err = capsys.readouterr().err
    assert f"pid {process.pid}" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(os.path.join(model_dir, "ckpt-4.index"))
    assert cli.main(train + ["--mode=eval"]) == 0     # readers need no lock
  finally:
    process.kill()
    process.wait()
