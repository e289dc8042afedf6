"""Without bubblewrap the plugin refuses to load, naming the package, unless the user opts into
the unsafe mode, where commands run unisolated (with a loud warning) but still in a cleared
environment, with limits and a timeout."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from toren_sandbox import tools
from toren_sandbox.config import SandboxConfig, SandboxUnavailable, check_available
from toren_sandbox.jail import run_isolated

from toren.errors import TorenError
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
def test_without_bubblewrap_loading_the_plugin_fails_naming_the_package() -> None:
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        check_available()
    with pytest.raises(TorenError) as caught:
        PluginHost(load=("toren-sandbox",))
    assert "apt-get install bubblewrap" in str(caught.value)
    assert "TOREN_SANDBOX_UNSAFE=1" in str(caught.value)


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
