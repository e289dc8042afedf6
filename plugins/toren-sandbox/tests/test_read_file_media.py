"""``read_file`` on an image or a PDF a command made in the workspace (a screenshot) shows it to
the model: the file is stored and attached to the tool's result, and the offline model reports
the bytes it received. Other binary files read as before, and the file tools' rules hold (no
links followed). Both without isolation (TOREN_SANDBOX_UNSAFE=1, no bubblewrap on PATH) and
under bubblewrap (``pytest -m bwrap``); real Postgres."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_helpers import RuntimeFactory, plan
from toren_sandbox import tools
from toren_sandbox.config import check_available

from toren.host.runtime import Runtime
from toren.testing import pdf_bytes, png_bytes

PNG = png_bytes(640, 480, (30, 30, 30))
PDF = pdf_bytes("Revenue grew 12%.", "Costs fell.")
BLOB = b"\x7fELF\x02\x01binary\xff\xfe\n"  # no NUL: the log keeps no NUL in text
#: A PNG's signature and then nothing an image has: read as bytes, as any other binary file.
NOT_A_PNG = b"\x89PNG\r\n\x1a\nnot an image at all"


def written(name: str, data: bytes) -> str:
    return f"printf '%s' {base64.b64encode(data).decode()} | base64 -d > {name}"


MAKE_FILES = " && ".join([
    "mkdir shots", written("shots/shot.png", PNG), written("report.pdf", PDF),
    written("blob.bin", BLOB), written("fake.png", NOT_A_PNG),
    "ln -s shots/shot.png link.png", "echo made"])


@pytest.fixture(params=["plain", pytest.param("bwrap", marks=pytest.mark.bwrap)])
def mode(request: pytest.FixtureRequest, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``plain``: bubblewrap is not on PATH and TOREN_SANDBOX_UNSAFE=1 (no isolation);
    ``bwrap``: commands run under bubblewrap."""
    if request.param == "plain":
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for program in ("bash", "prlimit", "setpriv", "env"):
            for folder in ("/usr/bin", "/bin"):
                if Path(folder, program).exists():
                    (bin_dir / program).symlink_to(Path(folder, program))
                    break
        monkeypatch.setenv("PATH", str(bin_dir))
        monkeypatch.setenv("TOREN_SANDBOX_UNSAFE", "1")
    else:
        assert check_available(), "bubblewrap is not installed"
        monkeypatch.delenv("TOREN_SANDBOX_UNSAFE", raising=False)
    yield request.param
    tools.ISOLATED = True


async def run(runtime: Runtime, *calls: tuple[str, dict[str, Any]]
              ) -> tuple[str, str, list[dict[str, Any]]]:
    """``(run id, the model's answer, the tool results)`` of a plan of tool calls."""
    run_id = await runtime.start_run("boxed", plan(*calls))
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    assert record.status == "completed", record
    results = [event.data for event in await runtime.events(run_id)
               if event.type == "ToolCallCompleted"]
    return run_id, str(record.output), results


async def test_read_file_shows_images_and_pdfs_and_reads_other_files_as_before(
        sandbox_runtime: RuntimeFactory, mode: str) -> None:
    runtime, _ = await sandbox_runtime()
    assert tools.ISOLATED is (mode == "bwrap")
    run_id, answer, results = await run(
        runtime, ("bash", {"command": MAKE_FILES}),
        ("read_file", {"path": "shots/shot.png"}),
        ("read_file", {"path": "/workspace/report.pdf"}),
        ("read_file", {"path": "blob.bin"}),
        ("read_file", {"path": "fake.png"}),
        ("read_file", {"path": "link.png"}))
    made, shot, report, blob, fake, link = results
    assert "made" in made["output"], made

    assert not shot["is_error"]
    assert shot["output"] == (f"image shots/shot.png (640x480, image/png), {len(PNG):,} bytes: "
                              "attached to this result")
    [image] = shot["attachments"]
    assert (image["name"], image["content_type"], image["width"], image["height"]) == (
        "shot.png", "image/png", 640, 480)
    found = await runtime.store.read_file(image["file_id"])
    assert found is not None
    stored, content = found
    assert content == PNG and stored.run_id == run_id and stored.uploaded_by == (
        "tool:read_file")

    assert report["output"] == (f"PDF /workspace/report.pdf (2 pages, application/pdf), "
                                f"{len(PDF):,} bytes: attached to this result")
    [pdf] = report["attachments"]
    assert (pdf["name"], pdf["pages"]) == ("report.pdf", 2)

    # other binary files are numbered lines, as they always were
    for result, data in ((blob, BLOB), (fake, NOT_A_PNG)):
        assert not result["is_error"] and "attachments" not in result
        lines = data.decode("utf-8", "replace").splitlines()
        assert result["output"] == "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, 1))
    # and a link is not followed, image or not
    assert link["is_error"] and "is a symbolic link" in link["output"]
    assert "attachments" not in link

    # the model received every byte of both files
    assert f"- shot.png (image/png, 640x480 px): {len(PNG):,} bytes received" in answer
    assert f"- report.pdf (application/pdf): {len(PDF):,} bytes received" in answer


async def test_an_image_over_the_file_limit_is_a_note_and_the_run_goes_on(
        sandbox_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_SANDBOX_UNSAFE", "1")  # loads where bubblewrap is missing
    runtime, _ = await sandbox_runtime(settings={"max_file_bytes": 1000})
    _, answer, results = await run(
        runtime, ("bash", {"command": written("shot.png", PNG)}),
        ("read_file", {"path": "shot.png"}), ("write_file", {"path": "a.txt", "content": "a"}))
    _, shot, after = results
    assert not shot["is_error"] and "attachments" not in shot
    assert shot["output"].endswith(
        f"\n[not shown: 'shot.png' is {len(PNG):,} bytes, over the 1,000 a file may have "
        "(TOREN_MAX_FILE_BYTES)]")
    assert not after["is_error"]
    assert "I was shown" not in answer
