"""docs/quickstart.md, walked: every ``$ `` command of its examples runs in a copy of the
checkout on the test database, and its output must have the shape the page shows.

Shape, not text: ids, numbers, times, paths and the database's description are placeholders;
table borders may be wider or narrower; a line ``...`` on the page stands for any lines; a
JSON document must have the same keys. Commands that need what a test cannot have (a second
Postgres server with a TLS certificate, ``psql``) are the ones in ``SKIPPED``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TOREN, clean_env

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart.md"
#: Commands the walk leaves out, by how they start: they need a database administrator,
#: TLS material or a wrong password on a second server.
SKIPPED = ("psql ", "export ", "DATABASE_URL=", "python3 -m venv", "kill -INT")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: A database as ``toren`` describes it: embedded on the page, the test's server here.
DATABASE = re.compile(r"(?:embedded )?Postgres \S+.*?\((?:data in [^)]*|DATABASE_URL)\)")
BOX_RUNS = re.compile(r"([━─ ])\1+")


@dataclass
class Example:
    """One ``$ command`` of the page and the output lines shown under it."""

    section: str
    command: str
    output: list[str] = field(default_factory=list)


def examples() -> list[Example]:
    found: list[Example] = []
    section = ""
    in_block = False
    current: Example | None = None  # the command whose output the block goes on showing
    for line in QUICKSTART.read_text().splitlines():
        if line.startswith("## "):
            section = line
        if line.startswith("```"):
            in_block = not in_block
            current = None
            continue
        if not in_block:
            continue
        if line.startswith("$ "):
            current = Example(section, line[2:])
            found.append(current)
        elif current is not None:
            current.output.append(line)
    return found


def normalise(line: str) -> str:
    """A line's shape: volatile parts replaced, table borders and padding collapsed."""
    line = DATABASE.sub("<database>", line.rstrip())
    line = re.sub(r"TOREN_HOME=\S+ ", "", line)  # printed for the embedded database only
    line = UUID.sub("<id>", line)
    line = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?(\+00:00)?", "<time>", line)
    line = re.sub(r"(?<![\w:/.])/[\w.\-/]+", "<path>", line)
    line = re.sub(r"\d+(\.\d+)?", "<n>", line)
    return BOX_RUNS.sub(r"\1", line)


def keys(value: Any) -> Any:
    """The key structure of a JSON value (dicts by key, lists by their first item)."""
    if isinstance(value, dict):
        return {key: keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [keys(value[0])] if value else []
    return None


def same_shape(shown: list[str], real: list[str]) -> str | None:
    """``None`` if ``real`` output has the shape ``shown`` on the page, else why not."""
    if len(shown) == 1 and shown[0].startswith("{") and len(real) == 1:
        try:
            expected, got = json.loads(shown[0]), json.loads(real[0])
        except json.JSONDecodeError:
            pass
        else:
            return None if keys(expected) == keys(got) else (
                f"keys differ:\n{keys(expected)}\n{keys(got)}")
    wanted = [normalise(line) for line in _trimmed(shown)]
    have = [normalise(line) for line in _trimmed(real)]
    chunks: list[list[str]] = [[]]
    for line in wanted:
        if line.strip() == "...":
            chunks.append([])
        else:
            chunks[-1].append(line)
    at = 0
    for number, chunk in enumerate(chunks):
        if not chunk:
            continue
        anchored = number == 0  # no "..." before it: it starts the output
        starts = [at] if anchored else range(at, len(have) - len(chunk) + 1)
        found = next((start for start in starts if have[start:start + len(chunk)] == chunk), None)
        if found is None:
            return "these lines are not in the output (in order):\n" + "\n".join(chunk)
        at = found + len(chunk)
    if chunks[-1] and at != len(have):
        return "the output goes on after what the page shows:\n" + "\n".join(have[at:])
    return None


def _trimmed(lines: list[str]) -> list[str]:
    lines = list(lines)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


class Walk:
    """The state of the walk: the copy of the checkout, background processes, ids seen."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.background: subprocess.Popen[str] | None = None
        self.background_output: list[str] = []
        self.url = ""
        self.ids: dict[str, str] = {}  # id on the page -> id in this walk

    def words(self, command: str) -> tuple[dict[str, str], list[str]]:
        for shown, real in self.ids.items():
            command = command.replace(shown, real)
        words = shlex.split(command)
        env = {}
        while "=" in words[0]:
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        if words[0] == ".venv/bin/toren":
            words[0] = str(TOREN)
        return env, words

    def run(self, example: Example) -> list[str]:
        command = example.command
        if command.startswith("curl "):
            return self.curl(command)
        if command.startswith("head "):
            count, path = re.fullmatch(r"head -(\d+) (\S+)", command).groups()  # type: ignore[union-attr]
            return (self.root / path).read_text().splitlines()[: int(count)]
        killed = re.fullmatch(r"(.*) & until (.*); do sleep [\d.]+; done; kill -9 \$!", command)
        if killed:
            return self.crash(killed[1], killed[2], len(example.output))
        env, words = self.words(command)
        if words[1:2] in (["dev"], ["worker"]):
            return self.start(env, words, example.output)
        redirect = None
        if ">" in words:
            redirect = self.root / words[words.index(">") + 1]
            words = words[: words.index(">")]
        if redirect is not None:  # `> file`: stdout to the file, the page shows stderr
            with redirect.open("w") as file:
                done = subprocess.run(words, cwd=self.root, env=self.env | env, text=True,
                                      timeout=120, check=False, stdout=file,
                                      stderr=subprocess.PIPE)
            return done.stderr.splitlines()
        done = subprocess.run(words, cwd=self.root, env=self.env | env, text=True,
                              input=self.stdin(example.output), timeout=120, check=False,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return done.stdout.splitlines()

    @staticmethod
    def stdin(output: list[str]) -> str:
        """What the user typed in a ``toren chat`` example: its ``you>`` lines."""
        return "".join(line.removeprefix("you> ") + "\n" for line in output
                       if line.startswith("you> "))

    def curl(self, command: str) -> list[str]:
        path = re.search(r"localhost:8420(\S*)", command)[1]  # type: ignore[index]
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            body = json.loads(response.read())
        if "json.tool" in command:
            return json.dumps(body, indent=4).splitlines()
        return [json.dumps(body)]

    def start(self, env: dict[str, str], words: list[str], shown: list[str]) -> list[str]:
        """A long-running ``toren dev`` or ``toren worker``: its output until it is ready
        (and, if the page shows ``^C``, until it stopped)."""
        self.stop()
        if words[1] == "dev":
            words += ["--port", "0"]
        self.background = subprocess.Popen(words, cwd=self.root, env=self.env | env, text=True,
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.background.stdout is not None
        ready = "Press Ctrl-C to stop." if words[1] == "dev" else "  agents:"
        lines: list[str] = []
        for line in self.background.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith(ready):
                break
        url = re.search(r"serving at (\S+)", "\n".join(lines))
        self.url = url[1] if url else self.url
        if "^C" in shown:
            self.wait_for_runs()
            lines += ["^C", *self.stop()]
        return lines

    def crash(self, command: str, condition: str, lines_shown: int) -> list[str]:
        """``command &``, then the page's ``until CONDITION`` loop in a shell, then
        ``kill -9``; the first lines it printed (as many as the page shows)."""
        self.stop()
        env, words = self.words(command)
        process = subprocess.Popen(words, cwd=self.root, env=self.env | env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert process.stdout is not None
        condition = condition.replace(".venv/bin/toren", shlex.quote(str(TOREN)))
        deadline = time.monotonic() + 120
        while subprocess.run(["bash", "-c", condition], cwd=self.root, env=self.env,
                             timeout=60, check=False).returncode != 0:
            assert process.poll() is None, "the run's process ended before it was killed"
            assert time.monotonic() < deadline, f"`{condition}` never held"
            time.sleep(0.5)
        process.kill()
        lines = [process.stdout.readline().rstrip("\n") for _ in range(lines_shown)]
        process.wait(timeout=30)
        process.stdout.close()
        return lines

    def wait_for_runs(self, timeout: float = 120.0) -> None:
        """Until no run is queued or running: what the page shows was worked to the end."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listed = subprocess.run([str(TOREN), "jobs", "list", "--json"], cwd=self.root,
                                    env=self.env, text=True, capture_output=True, timeout=60,
                                    check=True)
            if all(run["status"] not in ("queued", "running")
                   for run in json.loads(listed.stdout)["runs"]):
                return
            time.sleep(0.5)
        pytest.fail("runs were still working after two minutes")

    def stop(self) -> list[str]:
        """Ctrl-C the background process; its last words."""
        process, self.background = self.background, None
        if process is None:
            return []
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
        assert process.returncode == 0, rest
        return rest.splitlines()

    def learn_ids(self, shown: list[str], real: list[str]) -> None:
        """Map each id on the page to the id at the same place in the real output."""
        shown_ids = [i for line in shown for i in UUID.findall(line)]
        real_ids = [i for line in real for i in UUID.findall(line)]
        for page_id, walk_id in zip(shown_ids, real_ids, strict=False):
            self.ids.setdefault(page_id, walk_id)


def test_the_quickstart_examples_have_the_output_the_page_shows(
        tmp_path: Path, database_url: str, empty_database: tuple[str, str]) -> None:
    root = tmp_path / "toren"
    root.mkdir()
    shutil.copytree(ROOT / "contrib", root / "contrib")
    env = clean_env(tmp_path / "home", DATABASE_URL=database_url, PYTHONUNBUFFERED="1",
                    COLUMNS=None, TOREN_SCRIPTED_DELAY=None)
    # as on the page: the venv is not activated, so `toren` is not on PATH
    env["PATH"] = os.pathsep.join(entry for entry in env.get("PATH", "").split(os.pathsep)
                                  if entry and Path(entry).resolve() != TOREN.parent.resolve())
    walk = Walk(root, env)
    walked = 0
    try:
        for example in examples():
            if example.command.startswith(SKIPPED):
                continue
            if example.section.startswith("## 7."):
                # moving to a Postgres server: a brand-new database, nothing migrated yet
                walk.env = env | {"DATABASE_URL": empty_database[1]}
            real = walk.run(example)
            problem = same_shape(example.output, real)
            assert problem is None, (f"{example.section}\n$ {example.command}\n{problem}\n"
                                     "--- real output ---\n" + "\n".join(real))
            walk.learn_ids(example.output, real)
            walked += 1
    finally:
        walk.stop()
    assert walked >= 15  # the page's examples were walked, not skipped
