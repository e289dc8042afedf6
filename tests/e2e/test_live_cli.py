"""`toren run` prints the model's text as it is generated, before the step's line."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import TorenCli
from toren.testing import write_agent_dir


def test_toren_run_prints_the_text_as_it_arrives_then_the_step(toren_cli: TorenCli,
                                                               database_url: str,
                                                               tmp_path: Path) -> None:
    write_agent_dir(tmp_path / "crews", "echo")
    done = toren_cli("run", "echo", "streams <b>words</b>", "--dir", str(tmp_path / "crews"),
                     env={"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.4"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    streamed = next(i for i, line in enumerate(lines)
                    if line.startswith("  You said: streams <b>words</b>"))
    step = next(i for i, line in enumerate(lines) if line.lstrip().startswith("step 1 ·"))
    assert streamed < step
    # the output is printed once more at the end, as before
    assert lines.count("You said: streams <b>words</b>") == 1
