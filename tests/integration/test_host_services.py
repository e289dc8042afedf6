"""The host services the server and the CLI share (``toren.host.services``), on real Postgres:
the files' pages and storage quota, keys created only when none is active, migrations, the
fleet's health, runs' pages, and approvals and sessions seen only by a runtime serving their
agent. The surfaces' own tests check the same through HTTP and the CLI.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from toren.errors import ApprovalNotFound, ConfigError, NotAnApprover, SessionNotFound
from toren.files import StorageQuotaExceeded, StoredFile, UploadSpool
from toren.host.runtime import Runtime
from toren.seams.model import ModelRequest, ModelResponse, ToolCall
from toren.testing import ScriptedModel, write_agent_dir

MakeRuntime = Callable[..., Awaitable[Runtime]]


async def add_text(runtime: Runtime, name: str, text: bytes) -> StoredFile:
    async with UploadSpool(name, 1024 * 1024) as spool:
        await spool.write(text)
        return await runtime.files.add(await spool.check(), uploaded_by="test")


async def test_files_come_in_pages_that_miss_and_repeat_nothing(toren_runtime: MakeRuntime,
                                                                tmp_path: Path) -> None:
    runtime = await toren_runtime([write_agent_dir(tmp_path, "reader")])
    added = [await add_text(runtime, f"note-{n}.txt", f"note {n}\n".encode()) for n in range(5)]

    seen: list[str] = []
    page = await runtime.files.page(limit=2)
    while True:
        assert len(page.items) <= 2
        seen += [stored.id for stored in page.items]
        if page.after is None:
            break
        assert page.after == (page.items[-1].created_at, page.items[-1].id)
        page = await runtime.files.page(limit=2, before=page.after)
    assert seen == [stored.id for stored in reversed(added)]  # newest first, each once

    exact = await runtime.files.page(limit=5)  # a full last page says there is no next one
    assert len(exact.items) == 5 and exact.after is None

    found = await runtime.files.read(added[0].id)
    assert found is not None and found[1] == b"note 0\n"
    deleted = await runtime.files.delete(added[0].id)
    assert deleted is not None and deleted.id == added[0].id
    assert await runtime.files.get(added[0].id) is None
    assert await runtime.files.delete(added[0].id) is None


async def test_the_storage_quota_refuses_new_content_before_and_when_storing(
        toren_runtime: MakeRuntime, tmp_path: Path) -> None:
    runtime = await toren_runtime([write_agent_dir(tmp_path, "reader")],
                                  max_total_file_bytes=16)
    await runtime.files.check_room()  # nothing stored: room
    first = await add_text(runtime, "a.txt", b"sixteen bytes!!\n")
    assert await runtime.files.stored_bytes() == 16

    with pytest.raises(StorageQuotaExceeded) as full:
        await runtime.files.check_room("the upload")
    assert full.value.http_status == 507
    assert "TOREN_MAX_TOTAL_FILE_BYTES" in full.value.message
    with pytest.raises(StorageQuotaExceeded):
        await add_text(runtime, "b.txt", b"other content\n")
    # content already stored costs nothing: accepted however full the quota is
    again = await add_text(runtime, "copy.txt", b"sixteen bytes!!\n")
    assert again.sha256 == first.sha256 and again.id != first.id


async def test_a_key_is_created_if_none_is_active_and_only_then(toren_runtime: MakeRuntime,
                                                                  tmp_path: Path) -> None:
    runtime = await toren_runtime([write_agent_dir(tmp_path, "reader")])
    created = await runtime.keys.create_if_none("first")
    assert isinstance(created, tuple)
    key, token = created
    verified = await runtime.keys.verify(token)
    assert verified is not None and verified.id == key.id

    active = await runtime.keys.create_if_none("second")  # nothing created
    assert isinstance(active, list) and [k.id for k in active] == [key.id]
    assert [k.name for k in await runtime.keys.list_keys()] == ["first"]

    revoked = await runtime.keys.revoke(key.prefix)
    assert revoked is not None and not revoked.active
    assert await runtime.keys.active() == []
    assert await runtime.keys.verify(token) is None
    again = await runtime.keys.create_if_none("second")
    assert isinstance(again, tuple) and again[0].name == "second"
    assert await runtime.keys.revoke("tk_nothing") is None


async def test_database_fleet_and_runs_services_of_a_started_runtime(
        toren_runtime: MakeRuntime, tmp_path: Path) -> None:
    runtime = await toren_runtime([write_agent_dir(tmp_path, "reader")])
    assert await runtime.database.pending_migrations() == []
    assert await runtime.database.migrate() == []  # current already: nothing applied
    assert runtime.database.description == runtime.describe()["database"]
    assert "password" not in runtime.database.description

    assert (await runtime.fleet.health())["reachable"] is True
    workers = await runtime.fleet.live_workers()
    assert len(workers) == 1 and list(workers[0]["agents"]) == ["reader"]
    snapshot = await runtime.fleet.snapshot()
    assert "reader" in snapshot["agents"] and len(snapshot["workers"]) == 1
    assert set(await runtime.fleet.hot_table_sizes()) == {"reader"}

    empty = await runtime.runs.page(limit=10)
    assert empty.items == [] and empty.after is None
    archived = await runtime.runs.archived_page(limit=10)
    assert archived.items == [] and archived.after is None
    assert [page async for page in runtime.runs.every_run()] == [[]]


REFUND = '''
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"
'''


def refund_then_answer(request: ModelRequest) -> ModelResponse:
    if not any(m.role == "tool" for m in request.messages):
        return ModelResponse(text="Refunding.", stop_reason="tool_use",
                             tool_calls=(ToolCall(id="c1", name="refund",
                                                  arguments={"order": "A7"}),))
    return ModelResponse(text="Done.")


async def test_approvals_and_sessions_are_seen_only_by_a_runtime_serving_their_agent(
        make_runtime: Callable[..., Awaitable[Runtime]], tmp_path: Path) -> None:
    desk = write_agent_dir(tmp_path, "desk", tools_py=REFUND, model="test/desk",
                           approvals={"refund": {"approvers": ["cli:alice"]}})
    serving = await make_runtime(dirs=[desk],
                                 models={"desk": ScriptedModel(script=refund_then_answer)})
    elsewhere = await make_runtime(dirs=[write_agent_dir(tmp_path, "other")], workers=False)
    operator = await make_runtime(agents=[], workers=False)  # as `toren approvals` is

    run_id = await serving.start_run("desk", "refund A7")
    session_id = await serving.sessions.start("desk")
    async with asyncio.timeout(30):  # the task parks on the approval
        while not (pending := await serving.approvals.pending(run_id)):
            await asyncio.sleep(0.05)
    (approval,) = await operator.approvals.list(status="pending")
    assert [approval.id] == [a["id"] for a in pending]
    assert (await serving.approvals.get(approval.id)).tool == "refund"

    # another agent's runtime sees none of it: not listed, not found, not decided
    assert await elsewhere.approvals.list(status="pending") == []
    with pytest.raises(ApprovalNotFound):
        await elsewhere.approvals.get(approval.id)
    with pytest.raises(ApprovalNotFound):
        await elsewhere.approvals.approve(approval.id, decided_by="cli:alice")
    with pytest.raises(ConfigError, match="not served here"):
        await elsewhere.approvals.list(agent="desk")
    with pytest.raises(SessionNotFound):
        await elsewhere.sessions.get(session_id)
    with pytest.raises(SessionNotFound):
        await elsewhere.sessions.send(session_id, "hello")
    with pytest.raises(NotAnApprover):
        await operator.approvals.approve(approval.id, decided_by="cli:mallory")

    decided = await operator.approvals.approve(approval.id, decided_by="cli:alice")
    assert decided.status == "approved" and decided.decided_by == "cli:alice"
    finished = await serving.wait_for_run(run_id, timeout_s=30)
    assert finished.status == "completed" and finished.output == "Done."
    assert await serving.approvals.pending(run_id) == []
    session = await serving.sessions.get(session_id)
    assert (session["status"], session["pending_approvals"]) == ("awaiting_input", [])
