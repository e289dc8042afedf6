"""Hostile text printed by the CLI: key names, run inputs, agent output and error messages
holding rich markup, ANSI escapes and control characters are shown as text, never acted on."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from tests.conftest import TorenCli
from toren.cli.output import plain, safe
from toren.errors import ConfigError
from toren.keys import MAX_NAME_LENGTH, check_key_name
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(180)

#: Names and inputs that are text to a person and instructions to rich or a terminal.
MARKUP = ["[/]", "[link=https://evil.example]click me[/link]", "[bold red]admin[/]",
          "x[/bold]y", "\\[escaped]", "[", "]"]
ESC = "\x1b"


@pytest.mark.parametrize("text", MARKUP)
def test_markup_prints_as_written(text: str) -> None:
    out = io.StringIO()
    terminal = Console(file=out, force_terminal=True, color_system="truecolor", highlight=False)
    terminal.print(f"[bold]{safe(text)}[/]")

    # the text comes out verbatim (between the bold on/off sequences), never as a link
    assert text in out.getvalue()
    assert "\x1b]8;" not in out.getvalue()


@pytest.mark.parametrize(("text", "shown"), [
    ("red \x1b[31mALERT\x1b[0m done", "red ALERT done"),
    ("title \x1b]0;pwned\x07 ok", "title  ok"),
    ("link \x1b]8;;https://evil.example\x1b\\here\x1b]8;;\x1b\\", "link here"),
    ("over\rwrite", "overwrite"),
    ("bell\x07 nul\x00 del\x7f c1\x9b2J", "bell nul del c1"),
    ("abc\u202edcba", "abcdcba"),
    ("tabs\tand\nnewlines stay", "tabs    and\nnewlines stay"),  # rich expands the tab
])
def test_escape_sequences_and_control_characters_are_removed(text: str, shown: str) -> None:
    assert plain(text) == shown.replace("    ", "\t")
    out = io.StringIO()
    Console(file=out, color_system=None).print(safe(text), end="")
    assert out.getvalue() == shown


@pytest.mark.parametrize("name", [
    "ci\x1b[31m", "line\nbreak", "nul\x00", "bell\x07", "right\u202eto-left", "zero\u200bwidth",
    "sep\u2028arator", "x" * (MAX_NAME_LENGTH + 1), "   ",
])
def test_key_names_must_be_printable_and_short(name: str) -> None:
    with pytest.raises(ConfigError):
        check_key_name(name)


@pytest.mark.parametrize("name", ["ci", "[/]", "deploy bot (prod)", "équipe-données", "名前",
                                  "x" * MAX_NAME_LENGTH])
def test_printable_key_names_are_accepted(name: str) -> None:
    assert check_key_name(f"  {name} ") == name


def test_hostile_key_names_are_stored_and_listed_as_text(toren_cli: TorenCli,
                                                         database_url: str) -> None:
    env = {"DATABASE_URL": database_url}
    for name in ("[/]", "[link=https://evil.example]click me[/link]"):
        created = toren_cli("keys", "create", name, env=env)
        # before the fix, '[/]' stored an active key and then crashed before printing it
        assert created.returncode == 0, created.stderr
        assert created.stdout.startswith("toren_")
        assert f"({name}, role admin" in created.stderr

    listed = toren_cli("keys", "list", env=env)
    assert listed.returncode == 0, listed.stderr  # crashed for everyone before
    assert "[/]" in listed.stdout
    assert "[link=https://evil.example]click me[/link]" in listed.stdout

    for name in ("ci\x1b[31mred", "two\nlines", "x" * (MAX_NAME_LENGTH + 1)):
        refused = toren_cli("keys", "create", name, env=env)
        assert refused.returncode == 1
        assert refused.stderr.startswith("Error: an API key")
        assert ESC not in refused.stderr
    stored = json.loads(toren_cli("keys", "list", "--json", env=env).stdout)["keys"]
    assert sorted(key["name"] for key in stored) == sorted(
        ["[/]", "[link=https://evil.example]click me[/link]"])

    missing = toren_cli("keys", "revoke", "[/]\x1b[2J", env=env)
    assert missing.returncode == 1
    assert "no API key has the id or prefix '[/]" in missing.stderr
    assert ESC not in missing.stderr


def test_hostile_run_input_and_output_print_as_text(toren_cli: TorenCli, database_url: str,
                                                    tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    env = {"DATABASE_URL": database_url}
    hostile = "[/] [link=https://evil.example]x[/link] \x1b[31mred\x1b[0m \x1b]0;title\x07"

    done = toren_cli("run", "crew", hostile, "--dir", str(crew), env=env)

    assert done.returncode == 0, done.stderr
    # the scripted model answers with the input: shown as text, escapes removed
    assert "[/] [link=https://evil.example]x[/link] red " in done.stdout
    assert ESC not in done.stdout + done.stderr
    run_id = json.loads(toren_cli("jobs", "list", "--json", env=env).stdout)["runs"][0]["id"]
    shown = toren_cli("jobs", "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "[/] [link=https://evil.example]x[/link] red " in shown.stdout
    assert ESC not in shown.stdout


def test_errors_holding_markup_print_as_text(toren_cli: TorenCli, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")

    result = toren_cli("run", "[/]\x1b[2J", "hi", "--dir", str(crew))

    assert result.returncode == 1
    assert result.stderr.startswith("Error: agent '[/]")
    assert ESC not in result.stderr
    assert "Traceback" not in result.stderr
