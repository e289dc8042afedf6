"""What a newcomer hits in the first hour (issue 13), through the real ``toren`` executable:
errors that come before the database starts, lines that work where they are pasted, help
and output that are not cut or cryptic."""

from __future__ import annotations

import json
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import toren
from tests.conftest import TOREN, TorenCli, TorenProcess, clean_env, one_line, wait_until
from toren.cli import build_command, main
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(240)

StartToren = Callable[..., TorenProcess]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


# -- errors before the database ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_wrong_agent_name_fails_before_the_database_starts(toren_cli: TorenCli,
                                                             tmp_path: Path,
                                                             command: str) -> None:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "crew")
    write_agent_dir(crews, "my-dir", agent_yaml="name: renamed\nmodel: toren/scripted\n")
    args = ["hi"] if command == "run" else []

    wrong = toren_cli(command, "nobody", *args, "--dir", str(crews), input="")
    by_directory = toren_cli(command, "my-dir", *args, "--dir", str(crews), input="")

    assert wrong.returncode == 1
    assert one_line(wrong.stderr) == ("Error: agent 'nobody' is not served here; served "
                                      "agents: crew, renamed")
    assert by_directory.returncode == 1
    assert ("the directory my-dir holds the agent 'renamed': an agent's name is the `name:` "
            "in its agent.yaml") in one_line(by_directory.stderr)
    # no embedded Postgres was started, so no schema (or anything else) was created
    assert not (tmp_path / "toren-home").exists()


@pytest.mark.parametrize("command", ["dev", "serve"])
def test_a_port_in_use_fails_before_the_database_starts(toren_cli: TorenCli, tmp_path: Path,
                                                        busy_port: int, command: str) -> None:
    crew = write_agent_dir(tmp_path, "crew")

    result = toren_cli(command, "--dir", str(crew), "--port", str(busy_port), "--json")

    assert result.returncode == 1
    assert one_line(result.stderr) == (f"Error: port {busy_port} on 127.0.0.1 is already in "
                                       "use; pass --port (or TOREN_PORT) to pick another")
    assert "Stopped." not in result.stderr
    assert json.loads(result.stdout)["error"]["code"] == "config_error"
    assert not (tmp_path / "toren-home").exists()  # the database was never started


def test_an_unreachable_api_is_one_line_with_the_reason(toren_cli: TorenCli,
                                                        busy_port: int) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: connections are refused

        result = toren_cli("chat", "crew", "--url", f"http://127.0.0.1:{port}", input="")

    assert result.returncode == 1
    assert one_line(result.stderr) == (
        f"Error: cannot connect to the Toren API at http://127.0.0.1:{port}: Connection "
        "refused. Is the server running? Start it with `toren dev`, or set TOREN_URL to where "
        "it listens")


# -- lines that work where they are pasted -------------------------------------------------------


def test_init_prints_a_next_command_that_runs(toren_cli: TorenCli, tmp_path: Path) -> None:
    (tmp_path / "my projects").mkdir()
    without = toren_cli("init", "my projects/first", env={"PATH": "/usr/bin:/bin"})
    on_path = toren_cli("init", "second", env={"PATH": f"{TOREN.parent}:/usr/bin:/bin"})

    assert without.returncode == 0, without.stderr
    # toren is not on PATH: the line names this executable, and quotes the directory
    next_line = without.stdout.splitlines()[-1]
    assert next_line == f"Next: {shlex.quote(str(TOREN))} dev --dir 'my projects/first'"
    words = shlex.split(next_line.removeprefix("Next: "))
    assert Path(words[0]) == TOREN and (tmp_path / words[-1] / "agent.yaml").is_file()
    assert on_path.stdout.splitlines()[-1] == "Next: toren dev --dir second"


def test_the_chat_resume_line_works_from_another_directory(toren_cli: TorenCli,
                                                           toren_env: dict[str, str],
                                                           database_url: str,
                                                           tmp_path: Path) -> None:
    crews = tmp_path / "my crews"
    write_agent_dir(crews, "crew")
    env = {"DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"}
    first = toren_cli("chat", "crew", "--dir", str(crews), env=env, input="postgres\n/exit\n")
    assert first.returncode == 0, first.stderr
    resume = first.stderr.split("Resume it with: ", 1)[1].strip()
    assert resume.startswith(f"{shlex.quote(str(TOREN))} chat crew --dir ")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    pasted = subprocess.run(["sh", "-c", resume], cwd=elsewhere, input="/close\n", text=True,
                            capture_output=True, timeout=120, check=False,
                            env=toren_env | env)

    assert pasted.returncode == 0, pasted.stderr
    assert "Resuming session" in pasted.stderr and "1 turn(s) so far" in pasted.stderr
    assert "you> postgres" in pasted.stdout
    assert "has ended (completed)" in pasted.stderr


def test_the_chat_resume_line_names_the_embedded_database() -> None:
    from toren.cli.chat import _local_resume
    from toren.config import Settings

    class Loaded:  # what _local_resume reads of a runtime
        settings = Settings(database_url=None, home=Path("/srv/toren data/.toren"))

    words = _local_resume(Loaded(), "crew", [Path("/srv/crews")])  # type: ignore[arg-type]

    assert shlex.split(" ".join(words))[0] == "TOREN_HOME=/srv/toren data/.toren"
    assert words[-2:] == ["--dir", "/srv/crews"]


# -- help and version ----------------------------------------------------------------------------


COMMANDS = [[], ["version"], ["plugins"], ["init"], ["dev"], ["serve"], ["worker"], ["run"],
            ["chat"], ["jobs"], ["jobs", "list"], ["jobs", "show"], ["jobs", "receipt"],
            ["jobs", "cancel"], ["keys", "create"], ["keys", "list"], ["keys", "revoke"],
            ["db", "migrate"], ["schedules"], ["schedules", "list"], ["schedules", "show"],
            ["schedules", "pause"], ["schedules", "resume"], ["schedules", "trigger"],
            ["jobs", "fork"], ["jobs", "diff"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "toren")
def test_help_uses_one_placeholder_style(command: list[str], capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_LOAD_PLUGINS", "")
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out

    assert "Usage: toren" in shown
    assert not re.search(r"<(bool|str|int|float|list|path|int range)\b", shown, re.I), shown
    for placeholder in re.findall(r"[{\[]([A-Za-z_]+)[}\]](?:\.\.\.)?", shown.split("\n")[1]):
        assert placeholder == "OPTIONS" or placeholder.isupper(), shown


def test_help_reads_as_paragraphs_and_each_group_names_its_commands(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_LOAD_PLUGINS", "")
    command = build_command()

    def every(group: Any, path: str) -> Iterator[tuple[str, Any]]:
        yield path, group
        for name, sub in getattr(group, "commands", {}).items():
            yield from every(sub, f"{path} {name}")

    for path, each in every(command, "toren"):
        for paragraph in (each.help or "").split("\n\n"):
            # one line per paragraph, so rich wraps it at the terminal's width (a docstring's
            # own line breaks read ragged in `toren --help`'s command list)
            assert "\n" not in paragraph or paragraph.startswith("\b"), (path, paragraph)
    for group in ("jobs", "approvals", "keys", "schedules", "files", "agents"):
        summary = command.commands[group].help
        missing = [name for name in command.commands[group].commands if name not in summary]
        assert not missing, (group, summary, missing)


@pytest.mark.parametrize(("args", "plugins"), [(["version"], None), (["--version"], None),
                                               (["--help"], ""), (["jobs", "--help"], ""),
                                               (["--help"], None)])
def test_help_and_version_load_no_runtime(args: list[str], plugins: str | None) -> None:
    # what a fresh `toren ...` imports (counts, not seconds: they hold on a loaded machine)
    code = ("import sys\nfrom toren.cli import main\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit:\n    pass\nimport json\nsys.stderr.write(json.dumps(sorted("
            "sys.modules)))")
    env = clean_env(Path("/nonexistent"), TOREN_LOAD_PLUGINS=plugins)
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    loaded = set(json.loads(done.stderr))

    assert done.stdout.strip()
    assert not {"toren.host.runtime", "aiohttp", "psycopg", "toren.agents"} & loaded
    # every installed plugin's commands too (plugins None): none of their SDKs or drivers
    assert not {"boto3", "toren_sqs.queue", "toren_sql.query", "anthropic", "openai"} & loaded
    if args[-1] != "--help":  # version: no plugin, no command tree
        assert not [name for name in loaded if name.startswith("toren_")]
        assert len(loaded) < 600, len(loaded)


def test_version_option(toren_cli: TorenCli) -> None:
    option = toren_cli("--version")
    command = toren_cli("version")

    assert option.returncode == 0, option.stderr
    assert option.stdout == command.stdout == (
        f"toren {toren.__version__} (Python {command.stdout.split('Python ')[1]}")


# -- toren jobs ----------------------------------------------------------------------------------


#: Commands that only work on records already in the database (one per noun).
READ_ONLY = [["jobs", "list"], ["jobs", "show", "0a1b"], ["jobs", "diff", "0a1b", "2c3d"],
             ["approvals", "list"], ["keys", "list"], ["files", "list"], ["audit"],
             ["schedules", "list"], ["agents", "versions", "crew"], ["top", "--json"]]


@pytest.mark.slow
def test_read_only_commands_never_create_a_database(toren_cli: TorenCli, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pgdata = elsewhere / ".toren" / "pgdata"

    for command in READ_ONLY:
        result = toren_cli(*command, env={"TOREN_HOME": None}, cwd=elsewhere)

        assert result.returncode == 1, (command, result.stdout, result.stderr)
        line = one_line(result.stderr)
        assert line.startswith(f"Error: no Toren database to read here: no embedded database "
                               f"in {pgdata} (DATABASE_URL is unset), and this command creates "
                               "none."), (command, line)
        assert "TOREN_HOME" in line and "DATABASE_URL" in line and "--url" in line
    assert not (elsewhere / ".toren").exists()  # nothing created, not even the directory
    as_json = toren_cli("jobs", "list", "--json", env={"TOREN_HOME": None}, cwd=elsewhere)
    assert json.loads(as_json.stdout)["error"]["code"] == "no_database"


def test_a_read_only_command_in_a_subdirectory_names_the_project_database(
        toren_cli: TorenCli, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".toren" / "pgdata").mkdir(parents=True)
    (project / ".toren" / "pgdata" / "PG_VERSION").write_text("16\n")  # as initdb leaves it
    (project / "docs").mkdir()

    result = toren_cli("jobs", "list", env={"TOREN_HOME": None}, cwd=project / "docs")

    assert result.returncode == 1
    assert (f"There is one in {project / '.toren'}: run the command from {project}, or set "
            "TOREN_HOME") in one_line(result.stderr)
    assert not (project / "docs" / ".toren").exists()


def test_an_empty_listing_names_the_database_it_read(toren_cli: TorenCli,
                                                     database_url: str) -> None:
    listed = toren_cli("jobs", "list", "--agent", "nobody", env={"DATABASE_URL": database_url})

    assert listed.returncode == 0, listed.stderr
    assert one_line(listed.stderr).startswith("No runs matching the filters in Postgres ")
    assert one_line(listed.stderr).endswith("(DATABASE_URL).")


def test_jobs_list_piped_keeps_every_cell_whole(toren_cli: TorenCli, database_url: str,
                                               tmp_path: Path) -> None:
    name = "research-crew-with-a-name-long-enough-to-cut"
    crew = write_agent_dir(tmp_path, name)
    env = {"DATABASE_URL": database_url, "COLUMNS": None}  # no terminal, no width given
    run_id = toren_cli("run", name, "x", "--no-follow", "--dir", str(crew), env=env).stdout.strip()

    listed = toren_cli("jobs", "list", env=env)

    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if run_id in line)
    assert f"│ {name} │ queued " in row
    assert "…" not in listed.stdout


def test_jobs_show_piped_keeps_every_tree_line_whole(toren_cli: TorenCli, database_url: str,
                                                    tmp_path: Path) -> None:
    subagent = "a-subagent-whose-name-pushes-the-cost-past-eighty-columns"
    crew = write_agent_dir(tmp_path, "crew", subagents={
        subagent: "---\ndescription: Repeats.\ntools: []\n---\nRepeat the input.\n"})
    (crew / "workflow.py").write_text(
        f"async def workflow(ctx):\n    return (await ctx.task({subagent!r}, 'x')).output\n")
    env = {"DATABASE_URL": database_url, "COLUMNS": None}  # no terminal, no width given
    ran = toren_cli("run", "crew", "hi", "--json", "--dir", str(crew), env=env)
    assert ran.returncode == 0, ran.stderr

    shown = toren_cli("jobs", "show", json.loads(ran.stdout)["id"], env=env)

    assert shown.returncode == 0, shown.stderr
    task = next(line for line in shown.stdout.splitlines() if "task w1-0" in line)
    assert task.endswith(f"task w1-0 ({subagent}, toren/scripted) completed · end_turn · "
                         "$0.0000")  # was cut at column 80 (no ellipsis): "$0.00" or less
    assert len(task) > 80


def test_jobs_show_after_a_peer_call_replays_nothing_and_costs_the_child(
        toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    peer = "a-writer-with-a-long-name"
    write_agent_dir(tmp_path / "crews", "desk", peers=[peer])
    write_agent_dir(tmp_path / "crews", peer, acceptsFrom=["desk"])
    env = {"DATABASE_URL": database_url, "COLUMNS": None, "TOREN_SCRIPTED_COST_USD": "0.0041"}
    ran = toren_cli("run", "desk", "tides", "--json", "--dir", str(tmp_path / "crews"), env=env)
    assert ran.returncode == 0, ran.stderr

    shown = toren_cli("jobs", "show", json.loads(ran.stdout)["id"], env=env)

    assert shown.returncode == 0, shown.stderr
    # the task parked for the peer and resumed: no crash, nothing was replayed
    assert "replayed" not in shown.stdout
    child = next(line for line in shown.stdout.splitlines() if f"peer {peer} run" in line)
    assert child.endswith("completed · $0.0041 · depth 1"), child


async def test_jobs_commands_take_a_unique_id_prefix(toren_cli: TorenCli, make_runtime,
                                                     database_url: str, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    runtime = await make_runtime(dirs=[crew], workers=False)
    ids = [await runtime.start_run("crew", f"input {n}") for n in range(17)]
    env = {"DATABASE_URL": database_url}
    # the shortest prefix of the first id that no other id shares
    target = ids[0]
    prefix = next(target[:n] for n in range(1, 37)
                  if not any(other.startswith(target[:n]) for other in ids[1:]))
    # 17 ids, 16 hex digits: two of them start alike
    shared = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) > 1)

    shown = toren_cli("jobs", "show", prefix, "--json", env=env)
    receipt = toren_cli("jobs", "receipt", prefix.upper(), "--json", env=env)
    ambiguous = toren_cli("jobs", "show", shared, env=env)
    free = next(f"{n:04x}" for n in range(65536) if not any(i.startswith(f"{n:04x}") for i in ids))
    unknown = toren_cli("jobs", "show", free, env=env)
    not_an_id = toren_cli("jobs", "show", "' OR 1=1 --", env=env)
    cancelled = toren_cli("jobs", "cancel", prefix, "--json", env=env)

    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == target
    assert json.loads(receipt.stdout)["run"]["id"] == target
    assert ambiguous.returncode == 1
    line = one_line(ambiguous.stderr)
    candidates = [i for i in ids if i.startswith(shared)]
    assert line.startswith(f"Error: {len(candidates)} runs have ids starting with '{shared}': ")
    assert all(candidate in line for candidate in candidates)
    assert line.endswith("Give more of the id")
    assert unknown.returncode == 1
    assert one_line(unknown.stderr) == (f"Error: no run id starts with '{free}' in this "
                                        "database (see `toren jobs list`)")
    assert not_an_id.returncode == 1
    assert "is not a run id or the start of one" in not_an_id.stderr
    assert json.loads(cancelled.stdout)["status"] == "cancelled"


# -- Ctrl-C on toren run -------------------------------------------------------------------------


def test_ctrl_c_on_run_says_what_it_waits_for_and_a_second_one_quits(
        start_toren: StartToren, database_url: str, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    # a model call that takes two minutes, and a grace period longer than the test's timeout:
    # only the second Ctrl-C can end the process in time
    run = start_toren("run", "crew", "x", "--dir", str(crew),
                      env={"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "120",
                           "TOREN_SHUTDOWN_GRACE": "600"})
    assert "task main started" in run.lines.get(timeout=120)  # the model call is in flight

    run.proc.send_signal(signal.SIGINT)
    assert wait_until(lambda: "Press Ctrl-C again to quit now." in run.stderr, 60), run.stderr
    assert "Stopped following. The run is durable" in run.stderr
    assert "up to 600s (TOREN_SHUTDOWN_GRACE)" in run.stderr
    assert run.proc.poll() is None  # still waiting for the step in hand

    assert run.stop(signal.SIGINT, timeout=60) == 130
    assert "Quitting without waiting" in run.stderr
    assert "Traceback" not in run.stderr
