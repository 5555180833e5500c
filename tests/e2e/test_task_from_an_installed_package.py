"""A task package another distribution declares (entry point group
"bertexp.tasks"), installed with pip: its prepare verb is a `bertexp
prepare` subcommand and its gin configurables are known to every .gin file,
with no edit in bertexp and no `import` line in the gin file."""
import textwrap

import gin
import pytest

from bertexp import cli
from bertexp import gin_setup
from bertexp.tasks import catalog
from bertexp.tasks import prepare_command
import task_packages

FILES = {
    "pyproject.toml": task_packages.pyproject(
        "bertexp-echo-task", "echo", "bertexp_echo.echo", "bertexp_echo"),
    "bertexp_echo/__init__.py": "",
    "bertexp_echo/echo/__init__.py": "",
    "bertexp_echo/echo/prepare.py": '''
        """`bertexp prepare echo_lines`: the input's lines, numbered."""
        import os
        from bertexp.tasks import prepare_command


        def _arguments(parser):
          parser.add_argument("--input_file", required=True)
          parser.add_argument("--output_dir", required=True)


        def _run(args):
          lines = open(args.input_file).read().splitlines()
          if not lines:
            raise ValueError(f"{args.input_file}: no lines")
          with open(os.path.join(args.output_dir, "echo.txt"), "w") as f:
            f.write("".join(f"{i}\\t{line}\\n" for i, line in enumerate(lines)))
          print(f"prepared echo: {len(lines)} lines", flush=True)


        COMMANDS = (prepare_command.PrepareCommand(
            name="echo_lines", help="numbered lines", add_arguments=_arguments,
            run=_run, text_flags_default_length=None),)
        ''',
    "bertexp_echo/echo/task.py": '''
        """The echo task's gin configurable."""
        import gin


        @gin.configurable(module="echo")
        def echo_settings(size=1):
          return size
        ''',
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
  """The package built and installed by pip into a folder of its own."""
  root = str(tmp_path_factory.mktemp("echo_package"))
  return task_packages.install(root, {
      name: text if name == "pyproject.toml" else
      textwrap.dedent(text).lstrip() for name, text in FILES.items()})


def test_an_installed_packages_prepare_verb_is_a_bertexp_command(
    installed, tmp_path, monkeypatch, capsys):
  monkeypatch.syspath_prepend(str(installed))
  assert ("echo", "bertexp_echo.echo") in catalog.task_packages()
  assert "echo_lines" in [c.name for c in prepare_command.discover()]
  (tmp_path / "in.txt").write_text("first\nsecond\n")
  assert cli.main(["prepare", "echo_lines", f"--input_file={tmp_path}/in.txt",
                   f"--output_dir={tmp_path}/out"]) == 0
  assert (tmp_path / "out" / "echo.txt").read_text() == "0\tfirst\n1\tsecond\n"
  assert "prepared echo: 2 lines" in capsys.readouterr().out
  # Its failure leaves no folder either (every verb writes aside).
  (tmp_path / "empty.txt").write_text("")
  assert cli.main(["prepare", "echo_lines", f"--input_file={tmp_path}/empty.txt",
                   f"--output_dir={tmp_path}/none"]) == 2
  assert not (tmp_path / "none").exists()


def test_an_installed_packages_configurables_need_no_import_line(
    installed, tmp_path, monkeypatch):
  monkeypatch.syspath_prepend(str(installed))
  path = tmp_path / "echo.gin"
  path.write_text("echo.echo_settings.size = 3\n")
  gin_setup.parse_gin([str(path)], [])
  assert gin.query_parameter("echo.echo_settings.size") == 3


def test_a_declared_package_that_is_not_there_is_named(tmp_path, monkeypatch):
  """An entry point whose package is gone (uninstalled, misspelt): one line
  naming the entry point, not an import traceback."""
  info = tmp_path / "bertexp_gone-0.1.dist-info"
  info.mkdir()
  (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bertexp-gone\n"
                                 "Version: 0.1\n")
  (info / "entry_points.txt").write_text(
      "[bertexp.tasks]\ngone = bertexp_gone.task_pkg\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  with pytest.raises(ValueError, match=r"^entry point bertexp.tasks:gone = "
                     r"'bertexp_gone.task_pkg': cannot be imported"):
    catalog.modules_named("prepare")
