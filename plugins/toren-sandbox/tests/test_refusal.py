"""Without bubblewrap the plugin registers nothing and says why, naming the package (an agent
enabling its tools fails to load with that message), unless the user opts into the unsafe
mode, where commands run unisolated (with a loud warning) but still in a cleared environment,
with limits and a timeout."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from toren_sandbox import tools
from toren_sandbox.config import SandboxConfig, SandboxUnavailable, check_available
from toren_sandbox.jail import run_isolated

from toren.agents import load_agent
from toren.errors import AgentDefinitionError
from toren.seams.plugins import PluginHost


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH where bwrap is not installed (bash and prlimit still are)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("bash", "prlimit", "setpriv", "env"):
        for folder in ("/usr/bin", "/bin"):
            if Path(folder, program).exists():
                (bin_dir / program).symlink_to(Path(folder, program))
                break
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("TOREN_SANDBOX_UNSAFE", raising=False)


@pytest.mark.usefixtures("no_bwrap")
def test_without_bubblewrap_the_plugin_registers_nothing_and_says_why(
        make_agent_dir: Callable[..., Path], caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        check_available()
    with caplog.at_level(logging.WARNING):
        host = PluginHost(load=("toren-sandbox",))
    assert not {"bash", "read_file", "write_file", "edit_file"} & set(host.tools)
    reason = host.info["sandbox"].unavailable
    assert reason is not None and "apt-get install bubblewrap" in reason
    assert "TOREN_SANDBOX_UNSAFE=1" in reason and "apt-get install bubblewrap" in caplog.text
    assert host.info["sandbox"].to_json()["unavailable"] == reason
    # an agent that enables the sandbox fails to load, with the reason and its line
    for tools_line in ("tools: [sandbox]", "tools: [read_file]"):
        directory = make_agent_dir(agent_yaml=f"model: toren/scripted\n{tools_line}\n")
        with pytest.raises(AgentDefinitionError) as caught:
            load_agent(directory, host.tools, unavailable=host.unavailable_tools)
        assert caught.value.line == 2
        assert "cannot be used on this machine" in caught.value.message
        assert "apt-get install bubblewrap" in caught.value.message


@pytest.mark.usefixtures("no_bwrap")
def test_the_unsafe_mode_registers_with_a_loud_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TOREN_SANDBOX_UNSAFE", "1")
    try:
        with caplog.at_level(logging.WARNING):
            host = PluginHost(load=("toren-sandbox",))
        assert {"bash", "read_file", "write_file", "edit_file"} <= set(host.tools)
        assert {host.tools[name].group for name in ("bash", "edit_file")} == {"sandbox"}
        assert tools.ISOLATED is False
        assert "WITHOUT ISOLATION" in caplog.text
    finally:
        tools.ISOLATED = True


async def test_unsafe_commands_still_get_a_cleared_environment_and_a_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET_OF_THE_WORKER", "s3cret")
    config = SandboxConfig(env={"GREETING": "hi"}, timeout_s=1)
    result = await run_isolated("env; echo $GREETING > out.txt", tmp_path, config,
                                {"SECRET_OF_THE_WORKER": "s3cret"}, uid=None, isolate=False)
    assert result.exit_code == 0
    assert b"SECRET_OF_THE_WORKER" not in result.stdout
    assert (tmp_path / "out.txt").read_text() == "hi\n"
    slow = await run_isolated("sleep 30", tmp_path, config, {}, uid=None, isolate=False)
    assert slow.timed_out
    assert "did not finish within 1 s" in slow.render(config.timeout_s)
