"""The experiment's settings: four typed gin-configurable objects
(bertexp/settings.py), with `bertexp.experiment` down to a handful of
parameters. Every shipped .gin file gives the settings it gave before the
objects existed (tests/golden/experiment_settings.json, recorded from the
34-parameter experiment), and a file that binds `bertexp.experiment.<field>`
as before still works."""
import glob
import inspect
import json
import os
import re

import gin
import pytest

from bertexp import experiment
from bertexp import gin_setup
from bertexp import settings
from conftest import REPO

GOLDEN = os.path.join(REPO, "tests", "golden", "experiment_settings.json")


def _parse(path, extra=()):
  """Parses a shipped file with MODEL_DIR and its other required macros
  bound, the task left unbuilt."""
  params = ['MODEL_DIR="m"', "bertexp.experiment.task = None", *extra]
  while True:
    try:
      return gin_setup.parse_gin([path], params)
    except ValueError as e:
      missing = re.search(r"(\w+)/macro.value set to `%gin.REQUIRED`", str(e))
      if not missing:
        raise
      params.insert(0, f"{missing.group(1)}=None")


def _settings_of_bindings():
  """The Settings an experiment call would resolve from the parsed files."""
  fields = gin.get_bindings("bertexp.experiment")
  named = {k: fields.pop(k, None) for k in
           ("model_dir", "task", "schedule", "steps", "checkpoints",
            "runtime", "config_text")}
  return named["model_dir"], settings.resolve(
      named["schedule"], named["steps"], named["checkpoints"],
      named["runtime"], fields)


SHIPPED = sorted(os.path.relpath(p, REPO) for p in
                 glob.glob(os.path.join(REPO, "experiments", "*", "*.gin")))


def test_the_golden_covers_every_shipped_experiment():
  assert sorted(json.load(open(GOLDEN))) == SHIPPED and len(SHIPPED) > 20


@pytest.mark.parametrize("gin_file", SHIPPED)
def test_a_shipped_file_gives_the_settings_it_gave_before(gin_file):
  _parse(os.path.join(REPO, gin_file))
  model_dir, resolved = _settings_of_bindings()
  before = json.load(open(GOLDEN))[gin_file]
  assert model_dir == before.pop("model_dir") == "m"
  assert resolved.flat() == before


def test_a_field_bound_on_experiment_wins_over_its_object():
  """Files written before the objects bind `bertexp.experiment.<field>`;
  such a binding overrides the object's (base.gin binds the objects)."""
  _parse(os.path.join(REPO, "experiments/glue/mrpc_gpu.gin"),
         ["bertexp.experiment.train_batch_size = 7",
          "bertexp.experiment.seed = 11",
          "bertexp.StepOptions.clip_norm = 2.5"])
  _, resolved = _settings_of_bindings()
  assert resolved.schedule.train_batch_size == 7
  assert resolved.runtime.seed == 11
  assert resolved.steps.clip_norm == 2.5


def test_a_field_that_is_no_setting_is_a_one_line_error():
  with pytest.raises(ValueError) as error:
    settings.resolve(overrides={"train_batch_sise": 8})
  message = str(error.value)
  assert message.startswith("bertexp.experiment.train_batch_sise: not a "
                            "setting; the settings are [")
  assert "'train_batch_size'" in message and "\n" not in message


def test_experiment_takes_a_handful_of_parameters():
  named = [p for p in inspect.signature(
      inspect.unwrap(experiment.experiment)).parameters.values()
           if p.kind != inspect.Parameter.VAR_KEYWORD]
  assert len(named) <= 8, [p.name for p in named]
