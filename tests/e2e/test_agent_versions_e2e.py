"""Runs pinned to an agent version, end to end: real worker processes, the agent directory
changed under them while a run waits on a slow model, the CLI, and real Postgres."""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import TorenCli, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

AGENT = "crew"
SCHEMA = "agent_crew"
TOOL_NAMES = ("alpha", "bravo", "charlie", "delta")
#: Enough steps (a second each) that an upgrade from the CLI lands before the last one.
MANY_TOOLS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
              "juliett")


def write_version(directory: Path, number: int, *, on_change: str | None = None,
                  tools: tuple[str, ...] = TOOL_NAMES) -> Path:
    """The agent ``crew`` at version ``number``: its prompt and tools say which version."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [f"name: {AGENT}", "model: toren/scripted", f'version: "{number}.0"']
    if on_change:
        lines.append(f"onChange: {on_change}")
    (directory / "agent.yaml").write_text("\n".join(lines) + "\n")
    (directory / "prompt.md").write_text(f"You are version {number}.\n")
    source = "".join(textwrap.dedent(f'''
        def {name}(text: str) -> str:
            """Answer for {name}."""
            return "v{number}:{name}"
        ''') for name in tools)
    (directory / "tools.py").write_text(source)
    return directory


def env_for(database_url: str, delay: float) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": str(delay),
            "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
            "TOREN_MAX_DELIVERIES": "100"}


def tool_outputs(database_url: str, run_id: str) -> list[str]:
    """What each tool call of the run returned, in the order they were made."""
    events = sorted((e for e in run_events(database_url, SCHEMA, run_id)
                     if e.type == "ToolCallCompleted"), key=lambda e: (e.stream, e.seq))
    return [str(e.data["output"]) for e in events]


def of_type(database_url: str, run_id: str, kind: str) -> list[Any]:
    return [e for e in run_events(database_url, SCHEMA, run_id) if e.type == kind]


def started_calling(database_url: str, run_id: str) -> bool:
    return bool(of_type(database_url, run_id, "ModelCallStarted"))


def done(database_url: str, *run_ids: str) -> bool:
    return all(run_row(database_url, SCHEMA, r)[0] in ("completed", "failed", "stopped")
               for r in run_ids)


def versions_json(toren_cli: TorenCli, env: dict[str, str], *args: str) -> dict[str, Any]:
    shown = toren_cli("agents", "versions", AGENT, "--json", *args, env=env)
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def test_a_run_in_flight_finishes_on_its_version_after_the_directory_changes(
        start_toren, toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    env = env_for(database_url, 1.0)
    directory = write_version(tmp_path / "crew", 1)
    first = create_run(toren_cli, directory, AGENT, "first", env)
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: started_calling(database_url, first), 60)
    # a deploy: the worker dies mid model call, the directory changes, a new worker starts
    worker.proc.kill()
    worker.proc.wait(timeout=10)
    write_version(directory, 2)
    worker = start_worker(start_toren, directory, env)
    second = create_run(toren_cli, directory, AGENT, "second", env)
    assert wait_until(lambda: done(database_url, first, second), 120), worker.stderr

    assert run_row(database_url, SCHEMA, first)[0] == "completed"
    assert tool_outputs(database_url, first) == [f"v1:{name}" for name in TOOL_NAMES]
    assert tool_outputs(database_url, second) == [f"v2:{name}" for name in TOOL_NAMES]
    [pinned] = of_type(database_url, first, "AgentVersionPinned")
    assert pinned.data["human_version"] == "1.0"
    assert of_type(database_url, first, "AgentVersionUpgraded") == []
    # the task started with version 1's prompt, and that prompt is what the log names
    [started] = of_type(database_url, first, "TaskStarted")
    assert started.data["prompt_sha256"] == hashlib.sha256(b"You are version 1.\n").hexdigest()

    shown = toren_cli("jobs", "show", first, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    run = json.loads(shown.stdout)
    assert (run["agent_version"], run["agent_human_version"]) == (pinned.data["version"], "1.0")
    human = toren_cli("jobs", "show", first, env=env)
    assert f"{pinned.data['version'][:12]} (1.0)" in human.stdout

    listed = versions_json(toren_cli, env, "--dir", str(directory))
    by_human = {v["human_version"]: v for v in listed["versions"]}
    assert set(by_human) == {"1.0", "2.0"}
    assert (by_human["1.0"]["runs"], by_human["2.0"]["runs"]) == (1, 1)
    assert by_human["1.0"]["hash"] == pinned.data["version"]
    assert by_human["2.0"]["current"] and not by_human["1.0"]["current"]
    assert listed["current"] == by_human["2.0"]["hash"]
    assert set(by_human["1.0"]["files"]) == {"agent.yaml", "prompt.md", "tools.py"}
    table = toren_cli("agents", "versions", AGENT, env=env)
    assert table.returncode == 0 and "1.0" in table.stdout and "2.0" in table.stdout
    header = next(line for line in table.stdout.splitlines() if "version" in line)
    # every column is labelled; without --dir none is current, so there is no such column
    assert "active runs" in header and "current" not in header
    assert not re.search(r"┃\s+┃", header), header
    marked = toren_cli("agents", "versions", AGENT, "--dir", str(directory), env=env).stdout
    assert "current" in next(line for line in marked.splitlines() if "version" in line)
    assert re.search(rf"{by_human['2.0']['hash'][:12]}.*│ yes\s+│", marked), marked


def test_on_change_upgrade_moves_in_flight_runs_to_the_new_version(
        start_toren, toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    env = env_for(database_url, 1.0)
    directory = write_version(tmp_path / "crew", 1)
    run_id = create_run(toren_cli, directory, AGENT, "moving", env)
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: started_calling(database_url, run_id), 60)
    worker.proc.kill()
    worker.proc.wait(timeout=10)
    write_version(directory, 2, on_change="upgrade")
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: done(database_url, run_id), 120), worker.stderr

    assert run_row(database_url, SCHEMA, run_id)[0] == "completed"
    assert tool_outputs(database_url, run_id) == [f"v2:{name}" for name in TOOL_NAMES]
    [pinned] = of_type(database_url, run_id, "AgentVersionPinned")
    [upgraded] = of_type(database_url, run_id, "AgentVersionUpgraded")
    assert upgraded.data["reason"] == "on_change"
    assert upgraded.data["from_version"] == pinned.data["version"]
    assert upgraded.data["human_version"] == "2.0"
    assert upgraded.data["requested_by"]  # the worker's id
    shown = json.loads(toren_cli("jobs", "show", run_id, "--json", env=env).stdout)
    assert (shown["agent_version"], shown["agent_human_version"]) == (
        upgraded.data["version"], "2.0")


def test_jobs_upgrade_switches_a_running_task_at_its_next_step(
        start_toren, toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    env = env_for(database_url, 1.0)
    directory = write_version(tmp_path / "crew", 1, tools=MANY_TOOLS)
    run_id = create_run(toren_cli, directory, AGENT, "upgrade me", env)
    # this worker serves version 1 throughout: after the upgrade it loads version 2 from the
    # database, not from its directory
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: started_calling(database_url, run_id), 60)
    write_version(directory, 2, tools=MANY_TOOLS)
    upgraded = toren_cli("jobs", "upgrade", run_id[:8], "--dir", str(directory), "--json",
                         env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    result = json.loads(upgraded.stdout)
    assert result["upgraded"] is True and result["human_version"] == "2.0"
    assert wait_until(lambda: done(database_url, run_id), 120), worker.stderr

    assert run_row(database_url, SCHEMA, run_id)[0] == "completed"
    outputs = tool_outputs(database_url, run_id)
    versions = [output.split(":")[0] for output in outputs]
    # never switched back, never silently: some steps on v1 maybe, then v2 to the end
    assert versions[-1] == "v2" and versions == sorted(versions), outputs
    assert [output.split(":")[1] for output in outputs] == list(MANY_TOOLS)
    [event] = of_type(database_url, run_id, "AgentVersionUpgraded")
    assert (event.data["reason"], event.data["version"]) == ("requested", result["version"])
    assert event.data["requested_by"].startswith("cli:")
    assert event.data["from_version"] == result["from_version"]
    # the task took its later steps with version 2's prompt, and says so (once)
    [changed] = of_type(database_url, run_id, "TaskPromptChanged")
    v2_prompt = b"You are version 2.\n"
    assert changed.data["prompt_sha256"] == hashlib.sha256(v2_prompt).hexdigest()
    assert changed.data["version"] == result["version"]
    shown = toren_cli("jobs", "show", run_id, "--prompts", "--json", env=env)
    assert v2_prompt.decode() in json.loads(shown.stdout)["prompts"].values()

    again = toren_cli("jobs", "upgrade", run_id, "--dir", str(directory), env=env)
    assert again.returncode == 1
    assert "has ended" in again.stderr and "Traceback" not in again.stderr
    missing = toren_cli("jobs", "upgrade", "00000000-0000-4000-8000-000000000000", "--dir",
                        str(directory), env=env)
    assert missing.returncode == 1 and "no run" in missing.stderr


WORKFLOW_V1 = '''
async def workflow(ctx):
    first = await ctx.task("writer", ctx.input)
    second = await ctx.task("writer", "again: " + (first.output or ""))
    return second.output
'''
WORKFLOW_V2 = '''
async def workflow(ctx):
    first = await ctx.task("writer", "changed: " + ctx.input)
    return first.output
'''


def test_a_workflow_changed_mid_run_fails_naming_the_step_that_diverged(
        start_toren, toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    env = env_for(database_url, 1.5)
    directory = write_version(tmp_path / "crew", 1, tools=("alpha",))
    (directory / "subagents").mkdir()
    (directory / "subagents" / "writer.md").write_text("---\ndescription: writes\n---\n"
                                                        "You write.\n")
    (directory / "workflow.py").write_text(WORKFLOW_V1)
    run_id = create_run(toren_cli, directory, AGENT, "topic", env)
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: started_calling(database_url, run_id), 60)
    (directory / "workflow.py").write_text(WORKFLOW_V2)
    upgraded = toren_cli("jobs", "upgrade", run_id, "--dir", str(directory), "--json", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert wait_until(lambda: done(database_url, run_id), 120), worker.stderr

    status, _output, error = run_row(database_url, SCHEMA, run_id)
    assert status == "failed"
    assert error["code"] == "non_determinism"
    message = error["message"]
    assert "wave 1, task 0: input was \"topic\"" in message, message
    assert "workflow.py:3" in message, message  # the line of the ctx.task call that changed
    assert "workflow.py changed mid-run" in message and "upgraded from version" in message
    versions = versions_json(toren_cli, env)
    assert sorted(v["runs"] for v in versions["versions"]) == [0, 1]


def test_two_workers_with_different_directories_run_each_run_on_its_own_version(
        start_toren, toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    env = env_for(database_url, 0.2)
    old = write_version(tmp_path / "old" / "crew", 1, tools=("alpha", "bravo"))
    new = write_version(tmp_path / "new" / "crew", 2, tools=("alpha", "bravo"))
    runs = {create_run(toren_cli, old, AGENT, f"old {n}", env): "v1" for n in range(3)}
    runs |= {create_run(toren_cli, new, AGENT, f"new {n}", env): "v2" for n in range(3)}
    workers = [start_worker(start_toren, old, env), start_worker(start_toren, new, env)]
    assert wait_until(lambda: done(database_url, *runs), 120), [w.stderr for w in workers]
    for run_id, version in runs.items():
        assert run_row(database_url, SCHEMA, run_id)[0] == "completed"
        assert tool_outputs(database_url, run_id) == [f"{version}:alpha", f"{version}:bravo"]
        assert of_type(database_url, run_id, "AgentVersionUpgraded") == []
    listed = versions_json(toren_cli, env)
    assert sorted((v["human_version"], v["runs"]) for v in listed["versions"]) == [
        ("1.0", 3), ("2.0", 3)]


def test_the_version_commands_refuse_bad_input_in_one_line(
        toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    env = env_for(database_url, 0.0)
    directory = write_version(tmp_path / "crew", 1, tools=("alpha",))
    run_id = create_run(toren_cli, directory, AGENT, "one", env)
    empty = tmp_path / "empty"
    empty.mkdir()
    checks = [
        (("agents", "versions", "nobody"), "no agent 'nobody' in this database"),
        (("jobs", "upgrade", "zz-not-an-id", "--dir", str(directory)), "not a run id"),
        (("jobs", "upgrade", run_id, "--dir", str(empty)), "no agent.yaml"),
        (("jobs", "upgrade", run_id, "--dir", str(directory), "--url", "ftp://x"),
         "is not the URL of a Toren API"),
    ]
    for args, message in checks:
        done = toren_cli(*args, env=env)
        assert done.returncode != 0, args
        assert message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    other = write_version(tmp_path / "other", 1, tools=("alpha",))
    (other / "agent.yaml").write_text("name: other\nmodel: toren/scripted\n")
    served = toren_cli("jobs", "upgrade", run_id, "--dir", str(other), env=env)
    assert served.returncode == 1 and "agent 'crew' is not served here" in served.stderr
