"""Agent versions without a database: what the content hash covers, restoring a version from
its files, agent.yaml's version: and onChange:, and workflows that replay differently."""

from __future__ import annotations

from pathlib import Path

import pytest

from toren.agents import load_agent
from toren.agents.versions import AgentVersion, materialize, snapshot
from toren.core import events as ev
from toren.core.fold import fold_run
from toren.errors import AgentDefinitionError
from toren.execution.workflow import execute
from toren.testing import write_agent_dir

TOOLS = '''
def stamp(text: str) -> str:
    """Stamp it."""
    return "v1:" + text
'''
WORKFLOW = '''
async def workflow(ctx):
    result = await ctx.task("echo", ctx.input)
    return result.output
'''
ECHO = {"echo": "---\ndescription: echoes\n---\nEcho the input.\n"}


def crew(tmp_path: Path, **fields: object) -> Path:
    directory = write_agent_dir(tmp_path, "crew", tools_py=TOOLS, subagents=ECHO, **fields)
    (directory / "workflow.py").write_text(WORKFLOW)
    return directory


def version_of(directory: Path) -> AgentVersion:
    spec = load_agent(directory)
    assert spec.version is not None
    return spec.version


def test_the_hash_covers_every_definition_file_and_nothing_else(tmp_path: Path) -> None:
    directory = crew(tmp_path, version="1.0")
    first = version_of(directory)
    assert first.human == "1.0" and len(first.hash) == 64
    assert set(first.files) == {"agent.yaml", "prompt.md", "tools.py", "workflow.py",
                                "subagents/echo.md"}
    assert version_of(directory) == first  # loading again: the same version
    (directory / "README.md").write_text("notes that are not part of the definition\n")
    (directory / "data.csv").write_text("a,b\n")
    assert version_of(directory).hash == first.hash
    seen = [first.hash]
    for path, text in (("prompt.md", "You are changed.\n"),
                       ("tools.py", TOOLS.replace("v1:", "v2:")),
                       ("workflow.py", WORKFLOW.replace("ctx.input", "ctx.input + '!'")),
                       ("subagents/echo.md", ECHO["echo"] + "Politely.\n"),
                       ("agent.yaml", "model: toren/scripted\nversion: '1.1'\n"),
                       ("subagents/other.md", "Another.\n")):
        (directory / path).write_text(text)
        changed = version_of(directory).hash
        assert changed not in seen, f"changing {path} did not change the hash"
        seen.append(changed)
    # removing the file added last changes it back: the same files are the same version
    (directory / "subagents" / "other.md").unlink()
    assert version_of(directory).hash == seen[-2]


def test_a_prompt_named_in_agent_yaml_is_the_one_hashed(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "crew", prompt=None,
                                agent_yaml="model: toren/scripted\nprompt: system.md\n")
    (directory / "system.md").write_text("You are the system.\n")
    version = version_of(directory)
    assert "system.md" in version.files and "prompt.md" not in version.files


def test_a_version_restored_from_its_files_loads_as_the_same_agent(tmp_path: Path) -> None:
    directory = crew(tmp_path / "live", version="1.0")
    original = load_agent(directory)
    assert original.version is not None
    # the directory moves on; the stored bytes are all that is left of version 1
    (directory / "tools.py").write_text(TOOLS.replace("v1:", "v2:"))
    restored_dir = materialize(AgentVersion.of(dict(original.version.files), "1.0"),
                               tmp_path / "cache", "crew")
    assert materialize(original.version, tmp_path / "cache", "crew") == restored_dir  # once
    restored = load_agent(restored_dir)
    assert restored.name == "crew" and restored.version == original.version
    assert restored.prompt == original.prompt and set(restored.subagents) == {"echo"}
    assert restored.tools["stamp"].function("x") == "v1:x"
    assert restored.workflow is not None
    assert load_agent(directory).tools["stamp"].function("x") == "v2:x"


def test_a_stored_version_cannot_write_outside_its_directory(tmp_path: Path) -> None:
    for bad in ("../escape.md", "/etc/passwd", ""):
        version = AgentVersion.of({"agent.yaml": b"model: toren/scripted\n", bad: b"x"}, None)
        with pytest.raises(AgentDefinitionError, match="not inside an agent directory"):
            materialize(version, tmp_path / "cache", "crew")
    assert not (tmp_path / "escape.md").exists()


@pytest.mark.parametrize(("line", "problem"), [
    ("version: 1.0", "version: expected string"),
    ("version: ''", "version"),
    ("onChange: sideways", "onChange: 'sideways' is not one of"),
    ("onchange: upgrade", "onchange"),
])
def test_version_and_on_change_are_validated(tmp_path: Path, line: str, problem: str) -> None:
    directory = write_agent_dir(tmp_path, "crew", agent_yaml=f"model: toren/scripted\n{line}\n")
    with pytest.raises(AgentDefinitionError) as raised:
        load_agent(directory)
    assert problem in str(raised.value) and "agent.yaml:2" in str(raised.value)


def test_on_change_defaults_to_continue(tmp_path: Path) -> None:
    assert load_agent(write_agent_dir(tmp_path, "a")).on_change == "continue"
    upgrading = load_agent(write_agent_dir(tmp_path, "b", onChange="upgrade"))
    assert upgrading.on_change == "upgrade"
    assert upgrading.to_json()["onChange"] == "upgrade"


def test_snapshot_reads_what_the_directory_holds_now(tmp_path: Path) -> None:
    directory = crew(tmp_path)
    before = snapshot(directory, "prompt.md", None)
    (directory / "prompt.md").write_text("Changed.\n")
    after = snapshot(directory, "prompt.md", None)
    assert after.hash != before.hash and after.files["prompt.md"] == b"Changed.\n"


def _recorded_run(waves: int) -> list[ev.EventData]:
    """A workflow run's log with ``waves`` waves of one echo task, all finished."""
    events: list[ev.EventData] = [ev.RunCreated(agent="crew", input="go",
                                                idempotency_key=None)]
    for number in range(1, waves + 1):
        task_id = f"w{number}-0"
        events += [ev.WaveStarted(wave=number, tasks=(ev.WaveTask(task_id=task_id,
                                                                  subagent="echo",
                                                                  input="go"),)),
                   ev.TaskScheduled(task_id=task_id, subagent="echo", input="go", wave=number),
                   ev.TaskAbsorbed(task_id=task_id, status="completed",
                                   stop_reason="end_turn", output="go", error=None,
                                   cost_usd=0.0)]
    return events


async def test_a_workflow_that_now_returns_before_a_recorded_wave_is_a_divergence(
        tmp_path: Path) -> None:
    agent = load_agent(crew(tmp_path))

    async def shorter(ctx):  # type: ignore[no-untyped-def]
        await ctx.task("echo", "go")
        return "done early"

    outcome = await execute(shorter, fold_run(_recorded_run(2)), "run-1", agent)
    assert outcome.finished is not None and outcome.finished.status == "failed"
    assert outcome.finished.error is not None
    assert outcome.finished.error["code"] == "non_determinism"
    assert "returned after 1 wave(s), but wave 2 (echo) was recorded" in (
        outcome.finished.error["message"])

    async def same(ctx):  # type: ignore[no-untyped-def]
        await ctx.task("echo", "go")
        await ctx.task("echo", "go")
        return "done"

    replayed = await execute(same, fold_run(_recorded_run(2)), "run-1", agent)
    assert replayed.finished is not None and replayed.finished.status == "completed"


async def test_a_workflow_that_skips_a_recorded_value_is_a_divergence(tmp_path: Path) -> None:
    agent = load_agent(crew(tmp_path))
    events = [*_recorded_run(0), ev.ValueRecorded(n=0, kind="uuid", value="abc")]

    async def forgetful(ctx):  # type: ignore[no-untyped-def]
        return "no uuid any more"

    outcome = await execute(forgetful, fold_run(events), "run-1", agent)
    assert outcome.finished is not None and outcome.finished.error is not None
    assert "value 0 (ctx.uuid())" in outcome.finished.error["message"]


async def test_a_changed_wave_names_the_line_of_workflow_code(tmp_path: Path) -> None:
    directory = crew(tmp_path)
    (directory / "workflow.py").write_text(
        "async def workflow(ctx):\n"
        "    first = await ctx.task('echo', 'go')\n"
        "    second = await ctx.task('echo', 'something else')\n"
        "    return second.output\n")
    agent = load_agent(directory)
    assert agent.workflow is not None
    outcome = await execute(agent.workflow, fold_run(_recorded_run(2)), "run-1", agent)
    assert outcome.finished is not None and outcome.finished.error is not None
    message = outcome.finished.error["message"]
    assert 'wave 2, task 0: input was "go" when recorded' in message
    assert message.endswith("(workflow.py:3)"), message
