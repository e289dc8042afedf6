"""The kernel's command table (``toren.cli.command_table``) says what the commands say: the
line ``toren --help`` shows for each is the first paragraph of the command's own help, and
``toren --help`` imports none of them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from toren.cli import build_command, reflow
from toren.cli.command_table import KERNEL_COMMANDS


@pytest.fixture
def command(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TOREN_LOAD_PLUGINS", "")
    return build_command()


@pytest.mark.parametrize("entry", KERNEL_COMMANDS, ids=lambda entry: entry.name)
def test_each_summary_is_the_first_paragraph_of_the_commands_help(command, entry) -> None:  # type: ignore[no-untyped-def]
    built = command.get_command(None, entry.name)
    first = (reflow(built.help) or "").split("\n\n")[0]
    assert entry.summary == first, (
        f"toren.cli.command_table's summary of {entry.name!r} differs from the command's "
        f"help ({entry.target}); make them one: {first!r}")


def test_the_table_lists_every_command_once_in_help_order(command) -> None:  # type: ignore[no-untyped-def]
    names = [entry.name for entry in KERNEL_COMMANDS]
    assert len(names) == len(set(names))
    assert command.list_commands(None)[:len(names)] == names


def test_help_imports_no_kernel_command_module() -> None:
    code = ("import sys\nfrom toren.cli import main\ntry:\n    main(['--help'])\n"
            "except SystemExit:\n    pass\nimport json\nsys.stderr.write(json.dumps(sorted("
            "sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True, env={"TOREN_LOAD_PLUGINS": "",
                                                        "PATH": "/usr/bin:/bin"})
    loaded = set(json.loads(done.stderr))
    modules = {entry.target.partition(":")[0] for entry in KERNEL_COMMANDS}
    assert "Usage: toren" in done.stdout
    assert not modules & loaded, modules & loaded
    # secrets resolve when a command runs, not for the help
    assert "toren.seams.secrets" not in loaded
