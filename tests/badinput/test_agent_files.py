"""Agent directories beyond the corpus: what ``allowOutsideFiles`` allows, where the prompt cap
sits, and an import that spins forever in a real ``toren`` process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import TorenCli, one_line
from toren.agents import (
    DEFAULT_IMPORT_TIMEOUT_S,
    MAX_PROMPT_BYTES,
    import_timeout,
    load_agent,
)
from toren.errors import AgentDefinitionError, ConfigError
from toren.testing import write_agent_dir


def linked_agent(tmp_path: Path, allow: bool) -> tuple[Path, Path]:
    """An agent whose prompt, subagent, tools.py and workflow.py are all symbolic links to
    files in ``tmp_path/shared`` (outside the agent directory)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "prompt.md").write_text("The shared system prompt.\n")
    (shared / "helper.md").write_text("---\ndescription: helps\n---\nYou help.\n")
    (shared / "tools.py").write_text('def shout(text: str) -> str:\n    """Shout."""\n'
                                     "    return text.upper()\n")
    (shared / "workflow.py").write_text("async def workflow(ctx):\n    return None\n")
    directory = tmp_path / "agents" / "linked"
    directory.mkdir(parents=True)
    (directory / "agent.yaml").write_text(
        "model: toren/scripted\n" + ("allowOutsideFiles: true\n" if allow else ""))
    (directory / "subagents").mkdir()
    (directory / "prompt.md").symlink_to(shared / "prompt.md")
    (directory / "subagents" / "helper.md").symlink_to(shared / "helper.md")
    (directory / "tools.py").symlink_to(shared / "tools.py")
    (directory / "workflow.py").symlink_to(shared / "workflow.py")
    return directory, shared


def test_allow_outside_files_lets_every_definition_file_be_a_link_out(tmp_path: Path) -> None:
    directory, _shared = linked_agent(tmp_path, allow=True)

    agent = load_agent(directory)

    assert agent.allow_outside_files
    assert agent.prompt == "The shared system prompt.\n"
    assert agent.subagents["helper"].prompt == "You help.\n"
    assert agent.tools["shout"].function("hi") == "HI"
    assert agent.workflow is not None


def test_without_the_key_the_first_link_out_is_refused(tmp_path: Path) -> None:
    directory, shared = linked_agent(tmp_path, allow=False)

    with pytest.raises(AgentDefinitionError) as info:
        load_agent(directory)

    assert info.value.path == str(directory / "prompt.md")
    assert f"resolves to {shared / 'prompt.md'}, outside the agent directory" in info.value.message
    (directory / "prompt.md").unlink()
    (directory / "prompt.md").write_text("Local prompt.\n")
    for name in ("tools.py", "workflow.py", "subagents/helper.md"):
        with pytest.raises(AgentDefinitionError) as info:
            load_agent(directory)
        assert info.value.path == str(directory / name)
        assert "allowOutsideFiles: true" in info.value.message
        (directory / name).unlink()
    assert load_agent(directory).prompt == "Local prompt.\n"


def test_links_that_stay_inside_the_directory_need_no_key(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "inside")
    (directory / "prompts").mkdir()
    (directory / "prompts" / "v2.md").write_text("Version two.\n")
    (directory / "prompt.md").unlink()
    (directory / "prompt.md").symlink_to("prompts/v2.md")

    assert load_agent(directory).prompt == "Version two.\n"


def test_a_prompt_of_exactly_the_cap_loads(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "big")
    (directory / "prompt.md").write_bytes(b"x" * MAX_PROMPT_BYTES)

    assert len(load_agent(directory).prompt) == MAX_PROMPT_BYTES


def test_the_import_timeout_setting() -> None:
    assert import_timeout({}) == DEFAULT_IMPORT_TIMEOUT_S == 10.0
    assert import_timeout({"TOREN_IMPORT_TIMEOUT": "2.5"}) == 2.5
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(ConfigError, match="TOREN_IMPORT_TIMEOUT"):
            import_timeout({"TOREN_IMPORT_TIMEOUT": bad})


def test_os_exit_is_itself_again_after_imports(tmp_path: Path) -> None:
    original = os._exit
    exits = write_agent_dir(tmp_path, "exits", tools_py="import os\nos._exit(3)\n")
    hangs = write_agent_dir(tmp_path, "hangs",
                            tools_py="import time\nwhile True: time.sleep(0.05)\n")

    with pytest.raises(AgentDefinitionError, match=r"called os\._exit\(3\)"):
        load_agent(exits)
    with pytest.raises(AgentDefinitionError, match=r"did not finish within 0\.5 s"):
        load_agent(hangs, import_timeout_s=0.5)

    assert os._exit is original


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["dev", "worker"])
def test_a_busy_loop_at_import_ends_the_process_with_the_error(
        command: str, toren_cli: TorenCli, tmp_path: Path) -> None:
    # a loop that never sleeps: the abandoned import thread competes for the interpreter
    directory = write_agent_dir(tmp_path, "spins", tools_py=(
        "def f(x: str) -> str:\n    return x\n\n\ncount = 0\nwhile True:\n    count += 1\n"))
    args = ["--port", "0"] if command == "dev" else []

    result = toren_cli(command, "--dir", str(directory), *args,
                       env={"TOREN_IMPORT_TIMEOUT": "2"})

    assert result.returncode == 1, result.stderr
    line = one_line(result.stderr)
    assert line.startswith(f"Error: {directory / 'tools.py'}:"), line
    assert "importing it did not finish within 2 s (TOREN_IMPORT_TIMEOUT)" in line
    assert "Traceback" not in result.stderr
