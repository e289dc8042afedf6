"""Agent directories whose files are not plain files: the corpus cases git cannot hold.

agent.yaml that is a symbolic link out of its directory is refused whatever it says
(``allowOutsideFiles`` lives in agent.yaml, so it cannot vouch for agent.yaml itself); and a
FIFO, a socket or a device in place of agent.yaml, the prompt, tools.py, workflow.py or a
subagent is one clear error naming the file, never a hang (opening a FIFO for reading waits for
a writer) and never an endless read (``/dev/zero``). Each case is checked as the corpus checks
its own (``test_agent_corpus.py``): one line starting with the file, quickly, in bounded
memory, and the good agent loads beside it and after it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.badinput.test_agent_corpus import GOOD, PLUGIN_TOOLS, known_model
from tests.conftest import TorenCli, one_line
from toren.agents import discover_agent_dirs, load_agent, load_agents
from toren.errors import AgentDefinitionError, TorenError
from toren.testing import writers_for_fifos

#: A load that takes longer than this has hung (FIFOs get a writer after it, to end a hang).
HANG_S = 8.0
MAX_MESSAGE_CHARS = 400
DEVICE_ONLY_AS_ROOT = "mknod needs root"


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_socket(path: Path) -> None:
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:  # bound through /proc/self/fd: a deep test path is longer than a socket address
        server = socket.socket(socket.AF_UNIX)
        server.bind(f"/proc/self/fd/{fd}/{path.name}")
        server.close()  # the socket file stays
    finally:
        os.close(fd)


def make_device(path: Path) -> None:
    """A character device like /dev/zero (reading it never ends)."""
    if os.geteuid() != 0:
        pytest.skip(DEVICE_ONLY_AS_ROOT)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 5))


SPECIAL = {"fifo": (make_fifo, "a FIFO (named pipe)"), "socket": (make_socket, "a socket"),
           "device": (make_device, "a character device")}
FILES = ["agent.yaml", "prompt.md", "tools.py", "workflow.py", "subagents/helper.md"]


@dataclass(frozen=True)
class Case:
    """An agent directory made by ``make`` (from a copy of the good agent): loading it must
    fail naming ``file``, with these words."""

    make: Callable[[Path], object]
    file: str
    contains: tuple[str, ...]


def replace_with(name: str, kind: str) -> Callable[[Path], object]:
    make, _ = SPECIAL[kind]

    def build(directory: Path) -> None:
        path = directory / name
        path.parent.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        make(path)

    return build


def link_agent_yaml_out(directory: Path) -> None:
    """agent.yaml a link to a copy beside the directory, one that even allows outside files."""
    shared = directory.parent / "shared-agent.yaml"
    shared.write_text((directory / "agent.yaml").read_text() + "allowOutsideFiles: true\n")
    (directory / "agent.yaml").unlink()
    (directory / "agent.yaml").symlink_to(shared)


def prompt_links_to_dev_zero(directory: Path) -> None:
    """allowOutsideFiles lets prompt.md be a link out, but not to a device."""
    with (directory / "agent.yaml").open("a") as handle:
        handle.write("allowOutsideFiles: true\n")
    (directory / "prompt.md").unlink()
    (directory / "prompt.md").symlink_to("/dev/zero")


def dangling_agent_yaml(directory: Path) -> None:
    (directory / "agent.yaml").unlink()
    (directory / "agent.yaml").symlink_to("nowhere.yaml")


def tools_py_link_loop(directory: Path) -> None:
    (directory / "tools.py").unlink()
    (directory / "tools.py").symlink_to("tools.py")


CASES: dict[str, Case] = {
    f"{name.replace('/', '-')}-is-a-{kind}": Case(
        replace_with(name, kind), name, (f"is {words}, not a regular file",))
    for name in FILES for kind, (_, words) in SPECIAL.items()
} | {
    "agent-yaml-symlink-outside": Case(
        link_agent_yaml_out, "agent.yaml",
        ("shared-agent.yaml, outside the agent directory",
         "allowOutsideFiles, which it holds, cannot allow it")),
    "prompt-symlink-dev-zero-allowed-outside": Case(
        prompt_links_to_dev_zero, "prompt.md", ("is a character device, not a regular file",)),
    "agent-yaml-dangling-symlink": Case(
        dangling_agent_yaml, "agent.yaml", ("cannot be read: No such file or directory",)),
    "tools-py-symlink-loop": Case(tools_py_link_loop, "tools.py", ("cannot be resolved",)),
}


def load_in_time(directory: Path) -> tuple[float, BaseException | None]:
    """Load ``directory`` in a thread; how long it took and what it raised (``None``: it
    loaded). A load still running after ``4 * HANG_S`` is reported as a ``TimeoutError``."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            load_agent(directory, PLUGIN_TOOLS, known_model)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    started = time.monotonic()
    with writers_for_fifos(lambda: directory.rglob("*"), HANG_S):
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(HANG_S * 4)
    return time.monotonic() - started, (outcome or [TimeoutError("the load never ended")])[0]


def build(case: str, parent: Path) -> Path:
    directory = shutil.copytree(GOOD, parent / case)
    CASES[case].make(directory)
    return directory


@pytest.fixture(autouse=True)
def short_import_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_IMPORT_TIMEOUT", "1")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_case_is_one_clear_error_at_once(case: str, tmp_path: Path) -> None:
    directory = build(case, tmp_path)
    expect = CASES[case]

    took, error = load_in_time(directory)

    assert took < HANG_S / 2, f"{case}: the load took {took:.1f} s"
    assert isinstance(error, AgentDefinitionError), f"{case}: {error!r}"
    message = error.message
    assert error.path == str(directory / expect.file), message
    assert message.startswith(f"{directory / expect.file}: "), message
    for words in expect.contains:
        assert words in message, f"{words!r} not in {message!r}"
    assert "\n" not in message
    assert len(message) - len(str(directory)) <= MAX_MESSAGE_CHARS, message


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["agent.yaml-is-a-fifo", "prompt.md-is-a-fifo",
                                  "tools.py-is-a-fifo", "agent-yaml-symlink-outside"])
def test_a_good_agent_loads_beside_and_after(case: str, tmp_path: Path) -> None:
    bad = build(case, tmp_path / "bad")
    good = shutil.copytree(GOOD, tmp_path / "good-agent")
    for order in ([good, bad], [bad, good]):
        with writers_for_fifos(lambda: bad.rglob("*"), HANG_S), pytest.raises(TorenError) as info:
            load_agents(order, PLUGIN_TOOLS, known_model)
        assert info.value.message.startswith(str(bad)), info.value.message
    assert load_agent(good, PLUGIN_TOOLS, known_model).name == "good-agent"


def test_an_agent_yaml_linked_inside_its_directory_loads(tmp_path: Path) -> None:
    directory = shutil.copytree(GOOD, tmp_path / "good-agent")
    (directory / "config").mkdir()
    (directory / "agent.yaml").rename(directory / "config" / "agent.yaml")
    (directory / "agent.yaml").symlink_to("config/agent.yaml")

    assert load_agent(directory, PLUGIN_TOOLS, known_model).name == "good-agent"


def test_a_fifo_in_place_of_cached_bytecode_does_not_stop_the_import(tmp_path: Path) -> None:
    """tools.py's cached bytecode is read by the import itself: one that is not a regular
    file is passed over (the source is compiled instead), not waited on."""
    directory = shutil.copytree(GOOD, tmp_path / "good-agent")
    cached = Path(importlib.util.cache_from_source(str(directory / "tools.py")))
    cached.parent.mkdir()
    os.mkfifo(cached)

    took, error = load_in_time(directory)

    assert error is None and took < HANG_S / 2, (took, error)


def test_discovery_finds_an_agent_yaml_that_is_not_a_file_and_the_load_names_it(
        tmp_path: Path) -> None:
    crews = tmp_path / "crews"
    shutil.copytree(GOOD, crews / "good-agent")
    bad = build("agent.yaml-is-a-fifo", crews)

    found = discover_agent_dirs([crews])

    assert found == [bad, crews / "good-agent"]
    with writers_for_fifos(lambda: bad.rglob("*"), HANG_S), \
            pytest.raises(AgentDefinitionError, match="FIFO"):
        load_agents(found, PLUGIN_TOOLS, known_model)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["prompt.md-is-a-fifo", "agent-yaml-symlink-outside"])
def test_toren_dev_exits_with_the_one_line_error(case: str, toren_cli: TorenCli,
                                                 tmp_path: Path) -> None:
    directory = build(case, tmp_path / "crews")
    yaml_text = (directory / "agent.yaml").read_text()  # the CLI loads no web_search plugin
    target = (directory / "agent.yaml").resolve()
    target.write_text(yaml_text.replace("tools: [web_search]\n", ""))

    with writers_for_fifos(lambda: directory.rglob("*"), HANG_S):
        result = toren_cli("dev", "--dir", str(directory), "--port", "0", timeout=60)

    assert result.returncode == 1, result.stderr
    line = one_line(result.stderr)
    expect = CASES[case]
    assert line.startswith(f"Error: {directory / expect.file}: "), line
    for words in expect.contains:
        assert words in line
    assert "Traceback" not in result.stderr
