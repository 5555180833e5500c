"""Every shipped .gin parses; typos and missing macros fail at parse time."""
import glob
import os

import gin
import pytest

from bertexp import cli
from conftest import REPO

SHIPPED = sorted(glob.glob(os.path.join(REPO, "experiments", "**", "*.gin"),
                           recursive=True))


def test_there_are_shipped_experiments():
  names = {os.path.relpath(p, os.path.join(REPO, "experiments")) for p in SHIPPED}
  for required in ("glue/mnli_tpu.gin", "glue/mrpc_gpu.gin", "glue/mrpc_tpu.gin",
                   "demo/movie_sentiment_cpu.gin",
                   "demo/movie_score_regression_cpu.gin"):
    assert required in names
  for task in ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli"):
    assert f"glue/{task}_base.gin" in names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: os.path.relpath(p, REPO))
def test_shipped_gin_parses(path):
  params = ['MODEL_DIR="/tmp/x"']
  if "tpu" in os.path.basename(path):
    params.append('TPU_ADDRESS="local"')
  if "distill_tpu" in os.path.basename(path):    # the teacher run: required
    params.append('TEACHER_DIR="/tmp/teacher"')
  cli.parse_gin([path], params)
  assert gin.query_parameter("%MODEL_DIR") == "/tmp/x"
  assert gin.query_parameter("bertexp.experiment.task") is not None


def test_paper_settings_of_seed_experiments():
  cli.parse_gin([os.path.join(REPO, "experiments/glue/mnli_tpu.gin")],
                ['MODEL_DIR="m"', 'TPU_ADDRESS="local"'])
  assert gin.query_parameter("%TRAIN_BATCH_SIZE") == 32
  assert gin.query_parameter("%LEARNING_RATE") == 2e-5
  assert gin.query_parameter("%STEPS_PER_LOOP") == 1000
  assert gin.query_parameter("bertexp.configure_numerics.precision") == "mixed_bfloat16"
  assert gin.query_parameter("bertexp.make_strategy.kind") == "tpu"
  gin.clear_config()
  cli.parse_gin([os.path.join(REPO, "experiments/glue/mrpc_gpu.gin")],
                ['MODEL_DIR="m"', "LEARNING_RATE=3e-5"])
  assert gin.query_parameter("%TRAIN_BATCH_SIZE") == 4
  assert gin.query_parameter("%STEPS_PER_LOOP") == 1
  assert gin.query_parameter("%LEARNING_RATE") == 3e-5    # override wins
  assert gin.query_parameter("bertexp.make_strategy.kind") == "mirrored"


def test_typo_fails_at_parse_time():
  with pytest.raises(ValueError, match="LEARNIG_RATE"):
    cli.parse_gin([os.path.join(REPO, "experiments/glue/mrpc_gpu.gin")],
                  ['MODEL_DIR="m"', "LEARNIG_RATE=3e-5"])
  with pytest.raises(ValueError, match="train_batch_sise"):
    cli.parse_gin([os.path.join(REPO, "experiments/glue/mrpc_gpu.gin")],
                  ['MODEL_DIR="m"', "bertexp.experiment.train_batch_sise=3"])


def test_missing_model_dir_fails_at_parse_time():
  with pytest.raises(ValueError, match=r"MODEL_DIR.*%gin.REQUIRED"):
    cli.parse_gin([os.path.join(REPO, "experiments/glue/mrpc_gpu.gin")], [])


def test_tpu_needs_an_address_at_parse_time():
  with pytest.raises(ValueError, match=r"TPU_ADDRESS.*%gin.REQUIRED"):
    cli.parse_gin([os.path.join(REPO, "experiments/glue/mrpc_tpu.gin")],
                  ['MODEL_DIR="m"'])


def test_cli_reports_parse_errors(capsys):
  code = cli.main(["train", "--gin_file=experiments/glue/mrpc_gpu.gin",
                   "--gin_param=NOPE=1", '--gin_param=MODEL_DIR="m"'])
  assert code == 2
  assert "NOPE" in capsys.readouterr().err


def _one_line_error(capsys, argv):
  code = cli.main(argv)
  err = capsys.readouterr().err
  assert code == 2
  lines = [l for l in err.splitlines() if l.startswith("bertexp: error:")]
  assert len(lines) == 1 and "Traceback" not in err, err
  return lines[0]


def test_user_errors_are_one_line_with_the_fix(capsys):
  gin_file = "--gin_file=experiments/glue/mrpc_gpu.gin"
  line = _one_line_error(capsys, ["train", gin_file,
                                  "--gin_param=MODEL_DIR=runs/x"])
  assert "--gin_param 'MODEL_DIR=runs/x'" in line
  assert """strings need quotes: --gin_param='MODEL_DIR="runs/x"'""" in line
  line = _one_line_error(capsys, ["train", gin_file, '--gin_param=MODEL_DIR="m"',
                                  "--gin_param=TRAIN_BATCH_SIZE=[1,"])
  assert "--gin_param 'TRAIN_BATCH_SIZE=[1,' does not parse" in line
  line = _one_line_error(capsys, ["train", "--gin_file=nope.gin",
                                  '--gin_param=MODEL_DIR="m"'])
  assert "nope.gin" in line


def test_debug_shows_the_traceback_of_a_user_error(capsys):
  assert cli.main(["train", "--gin_file=nope.gin", "--debug"]) == 2
  err = capsys.readouterr().err
  assert "Traceback (most recent call last)" in err
  assert err.strip().splitlines()[-1].startswith("bertexp: error:")


def test_version_flag_spellings_and_defaults_in_help(capsys):
  with pytest.raises(SystemExit) as done:
    cli.main(["--version"])
  assert done.value.code == 0
  from bertexp import __version__
  assert capsys.readouterr().out.strip() == f"bertexp {__version__}"
  assert cli.normalise_flag_spelling(
      ["evaluate-squad", "--na-prob-file=a-b.json", "--out-file", "x-y",
       "-n", "--nbest_file=z"]) == [
           "evaluate-squad", "--na_prob_file=a-b.json", "--out_file", "x-y",
           "-n", "--nbest_file=z"]
  with pytest.raises(SystemExit):
    cli.main(["evaluate-squad", "--help"])
  assert "(default: 1.0)" in capsys.readouterr().out   # defaults in --help
  for command, shown in ((["prepare", "pretraining"], "(default: 20)"),
                         (["prepare", "squad"], "(default: 384)"),
                         (["sweep"], "(default: 1)")):
    with pytest.raises(SystemExit):
      cli.main(command + ["--help"])
    assert shown in capsys.readouterr().out, command


@pytest.mark.parametrize("argv", [
    ["prepare", "multiple_choice", "--train_file=a.csv", "--eval_file=b.csv",
     "--task_name=t", "--output_dir=o", "--vocab_file=v.txt",
     "--choice_column=a,b"],
    ["train", "--gin_file=glue/mrpc_gpu.gin", "--gin_para=SEED=1"],
    ["sweep", "--gin_file=x.gin", "--output_dir=runs/s", "--paralle=2"]])
def test_an_abbreviated_flag_is_refused_not_completed(argv, capsys):
  """argparse completes a unique prefix (--choice_column meant
  --choice_columns); every command takes whole flag names only."""
  with pytest.raises(SystemExit) as done:
    cli.build_parser().parse_args(argv)
  assert done.value.code == 2
  assert "unrecognized arguments: " + argv[-1] in capsys.readouterr().err
