"""read_document through Toren: a file stored in Postgres, read by the example agent offline."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import documents

from toren.files import check_upload
from toren.host.runtime import Runtime

EXAMPLE = Path(__file__).parents[3] / "contrib" / "examples" / "tool-plugins" / "document-reader"


async def test_the_example_agent_reads_an_uploaded_pdf(
        toren_runtime: Callable[..., Awaitable[Runtime]], tmp_path: Path) -> None:
    runtime = await toren_runtime([shutil.copytree(EXAMPLE, tmp_path / "document-reader")],
                                  load_plugins=("toren-files",))
    upload = check_upload("q3.pdf", documents.pdf(["Revenue 12 million", "Costs 7 million"]))
    stored = await runtime.store.add_file(name=upload.name, content_type=upload.content_type,
                                          data=upload.data, sha256=upload.sha256,
                                          uploaded_by="test")
    assert stored.sha256 == hashlib.sha256(upload.data).hexdigest()

    run_id = await runtime.start_run("document-reader", stored.id)
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    (result,) = [e.data for e in await runtime.events(run_id) if e.type == "ToolCallCompleted"]
    assert not result["is_error"]
    header, _, text = result["output"].partition("\n")
    assert json.loads(header)["document"].startswith("q3.pdf (application/pdf), pages 1,2 of 2")
    assert "Revenue 12 million" in text and "Costs 7 million" in text
