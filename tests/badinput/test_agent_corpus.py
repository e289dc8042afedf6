"""Malformed and hostile agent directories: each is one clear error, and the process goes on.

Every directory under ``agents/`` is a case: an agent directory plus ``expect.json`` (the error
class and code, the file the message must name, its line or ``null``, and words the message
must contain). Each case must fail fast, in bounded memory, with a one-line ``TorenError`` that
starts with ``file:line:``; and ``good-agent/`` must still load beside it and after it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import TorenCli, one_line
from toren import errors
from toren.agents import load_agent, load_agents
from toren.errors import TorenError
from toren.seams.plugins import PluginHost
from toren.seams.tools import tool_from_function

HERE = Path(__file__).parent
CORPUS = HERE / "agents"
GOOD = HERE / "good-agent"
CASES = sorted(path.name for path in CORPUS.iterdir() if (path / "expect.json").is_file())

#: Per case: loading must finish in this time and allocate at most this much memory at peak.
MAX_SECONDS = 10.0  # generous: tracemalloc slows the pure-Python YAML scanner several times
MAX_PEAK_BYTES = 64 * 1024 * 1024
#: Longer messages are not read; a repr of a whole huge value is a bug.
MAX_MESSAGE_CHARS = 400

#: Seconds an import of tools.py or workflow.py may take while the corpus loads (the
#: default, 10 s, is longer than a case may take to fail).
IMPORT_TIMEOUT = "1"


def link(name: str, target: str | Path, outside: str | None = None
         ) -> Callable[[Path], object]:
    """Make ``name`` in the case's copy a symbolic link to ``target``; with ``outside``, first
    write a file of that name beside the directory (a relative ``target`` can then reach it)."""

    def make(directory: Path) -> None:
        if outside is not None:
            (directory.parent / outside).write_text(
                "async def workflow(ctx):\n    return None\n" if outside.endswith(".py")
                else "secret text from outside the agent directory\n")
        (directory / name).parent.mkdir(exist_ok=True)
        (directory / name).symlink_to(target)

    return make


def write_file(path: Path, text: str) -> None:
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)


# Files too large to keep in git, and symbolic links (whose targets lie outside the case),
# written into the case's copy before it is loaded.
GENERATED: dict[str, Callable[[Path], object]] = {
    "huge-agent-yaml": lambda directory: (directory / "agent.yaml").write_text(
        "model: toren/scripted\ndescription: " + "x" * 3_000_000 + "\n"),
    # an explicit key ("? "): PyYAML takes plain keys of at most 1024 characters
    "enormous-unknown-key": lambda directory: (directory / "agent.yaml").write_text(
        "model: toren/scripted\n? " + "k" * 200_000 + "\n: 1\n"),
    "enormous-wrong-type-value": lambda directory: (directory / "agent.yaml").write_text(
        "model: toren/scripted\nlimits:\n  maxSteps: " + "9x" * 100_000 + "\n"),
    "prompt-too-large": lambda directory: (directory / "prompt.md").write_bytes(
        b"x" * (1024 * 1024 + 1)),
    "subagent-too-large": lambda directory: write_file(
        directory / "subagents" / "helper.md", "x" * 2_000_000),
    "prompt-symlink-etc-passwd": link("prompt.md", "/etc/passwd"),
    "prompt-symlink-parent": link("prompt.md", "../outside-secret.md", "outside-secret.md"),
    "prompt-symlink-loop": link("prompt.md", "prompt.md"),
    "subagent-symlink-outside": link("subagents/helper.md", "../../outside-secret.md",
                                     "outside-secret.md"),
    "tools-py-symlink-outside": link("tools.py", "../outside-tools.py", "outside-tools.py"),
    "workflow-py-symlink-outside": link("workflow.py", "../outside-workflow.py",
                                        "outside-workflow.py"),
}


@pytest.fixture(autouse=True)
def short_import_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_IMPORT_TIMEOUT", IMPORT_TIMEOUT)


def web_search(query: str) -> str:
    """Search the web."""
    return query


PLUGIN_TOOLS = {"web_search": tool_from_function(web_search, source="plugin web")}
HOST = PluginHost(entry_points=False)


def known_model(model_id: str) -> object:
    """What ``toren dev`` checks model ids with: the built-in providers only."""
    return HOST.provider_for(model_id).get_model(model_id)


@dataclass(frozen=True)
class Expectation:
    about: str
    error: str
    code: str
    file: str
    line: int | None
    contains: list[str]

    @classmethod
    def of(cls, case: str) -> Expectation:
        return cls(**json.loads((CORPUS / case / "expect.json").read_text()))


def copy_case(case: str, parent: Path) -> Path:
    """The case as a fresh agent directory under ``parent`` (importing tools.py writes
    ``__pycache__``, and the generated files are big: neither belongs in the repository)."""
    directory = parent / case
    shutil.copytree(CORPUS / case, directory, ignore=shutil.ignore_patterns("expect.json"))
    if case in GENERATED:
        GENERATED[case](directory)
    return directory


def load_error(directory: Path) -> TorenError:
    """The error loading ``directory`` raises; a crash or a successful load fails the test."""
    try:
        load_agent(directory, PLUGIN_TOOLS, known_model)
    except TorenError as exc:
        return exc
    except BaseException as exc:  # KeyError, RecursionError, SystemExit...: a bug in the loader
        pytest.fail(f"expected a TorenError, got {type(exc).__name__}: {exc}")
    pytest.fail(f"{directory} loaded without error")


def expected_prefix(directory: Path, expect: Expectation) -> str:
    where = directory / expect.file
    return f"{where}: " if expect.line is None else f"{where}:{expect.line}: "


def test_the_corpus_is_all_there() -> None:
    assert len(CASES) >= 30
    # a case directory without expect.json would be skipped silently
    assert sorted(path.name for path in CORPUS.iterdir()) == CASES
    assert set(GENERATED) <= set(CASES)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", CASES)
def test_each_case_is_one_clear_error(case: str, tmp_path: Path) -> None:
    expect = Expectation.of(case)
    directory = copy_case(case, tmp_path)

    tracemalloc.start()
    started = time.monotonic()
    try:
        error = load_error(directory)
    finally:
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()

    assert type(error) is getattr(errors, expect.error), error
    assert error.code == expect.code
    message = error.message
    assert message.startswith(expected_prefix(directory, expect)), message
    assert getattr(error, "path", None) == str(directory / expect.file)
    assert getattr(error, "line", None) == expect.line
    for words in expect.contains:
        assert words in message, f"{words!r} not in {message!r}"
    assert "\n" not in message and "\r" not in message
    assert len(message) - len(str(directory)) <= MAX_MESSAGE_CHARS, message
    assert elapsed < MAX_SECONDS, f"{case} took {elapsed:.1f} s to fail"
    assert peak < MAX_PEAK_BYTES, f"{case} allocated {peak / 2**20:.0f} MiB at peak"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", CASES)
def test_a_good_agent_loads_beside_and_after_each_case(case: str, tmp_path: Path) -> None:
    bad = copy_case(case, tmp_path / "bad")
    good = shutil.copytree(GOOD, tmp_path / "good-agent")
    cwd, recursion_limit = os.getcwd(), sys.getrecursionlimit()

    # loaded together, the bad agent is the one named, whichever comes first
    for order in ([good, bad], [bad, good]):
        with pytest.raises(TorenError) as info:
            load_agents(order, PLUGIN_TOOLS, known_model)
        assert info.value.message.startswith(str(bad)), info.value.message

    agent = load_agent(good, PLUGIN_TOOLS, known_model)
    assert agent.name == "good-agent"
    assert list(agent.tools) == ["word_count", "web_search"]
    assert agent.tools["word_count"].function("one two three") == 3
    assert agent.subagents["helper"].prompt == "You help count words.\n"
    assert (os.getcwd(), sys.getrecursionlimit()) == (cwd, recursion_limit)


# -- the real CLI ----------------------------------------------------------------------------


CLI_CASES = ["yaml-billion-laughs", "tools-py-sys-exit", "encoding-latin1",
             "tools-py-raises-multiline", "subagent-unclosed-front-matter",
             "tools-py-os-exit", "tools-py-keyboard-interrupt", "tools-py-loops-forever",
             "prompt-symlink-etc-passwd"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CLI_CASES)
def test_toren_dev_exits_with_the_one_line_error(case: str, toren_cli: TorenCli,
                                                 tmp_path: Path) -> None:
    expect = Expectation.of(case)
    directory = copy_case(case, tmp_path / "crews")

    result = toren_cli("dev", "--dir", str(directory), "--port", "0",
                       env={"TOREN_IMPORT_TIMEOUT": IMPORT_TIMEOUT})

    assert result.returncode == 1, result.stderr
    line = one_line(result.stderr)
    assert line.startswith("Error: " + expected_prefix(directory, expect)), line
    for words in expect.contains:
        assert words in line
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.timeout(120)
def test_toren_dev_json_names_the_bad_agent_among_good_ones(toren_cli: TorenCli,
                                                            tmp_path: Path) -> None:
    crews = tmp_path / "crews"
    good = shutil.copytree(GOOD, crews / "good-agent")
    yaml_path = good / "agent.yaml"  # the CLI here loads no plugin, so no web_search
    yaml_path.write_text(yaml_path.read_text().replace("tools: [web_search]\n", ""))
    bad = copy_case("tools-py-sys-exit", crews)

    result = toren_cli("dev", "--dir", str(crews), "--port", "0", "--json")

    assert result.returncode == 1, result.stderr
    error = json.loads(one_line(result.stdout))["error"]
    assert error["code"] == "agent_definition_error"
    assert error["message"].startswith(f"{bad / 'tools.py'}:8: importing it called sys.exit(3)")
    assert "Traceback" not in result.stderr
