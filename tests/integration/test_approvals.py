"""Approvals against real Postgres: a tool call waits for a person, parked with no worker, no
lease and no message; a decision is made once and wakes the task; denial and expiry reach the
model as the tool's result."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.durable import check_log, types
from toren.errors import (
    ApprovalAlreadyDecided,
    ApprovalNotFound,
    ConfigError,
    NotAnApprover,
    SessionBusy,
)
from toren.seams.model import ModelRequest, ModelResponse, ToolCall
from toren.testing import ScriptedModel, write_agent_dir

TOOLS = '''
import pathlib

EFFECTS = pathlib.Path(__file__).parent / "effects"


def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: 40 EUR"


def refund(order: str, amount: int) -> str:
    """Refund an order (irreversible)."""
    with EFFECTS.open("a") as handle:
        handle.write(f"refund {order} {amount}\\n")
    return f"refunded {amount} EUR on {order}"
'''


def both_at_once(request: ModelRequest) -> ModelResponse:
    """One step calls lookup and refund together; then answers with what came back."""
    if not any(m.role == "tool" for m in request.messages):
        return ModelResponse(text="Checking and refunding.", stop_reason="tool_use", tool_calls=(
            ToolCall(id="c1", name="lookup", arguments={"order": "A7"}),
            ToolCall(id="c2", name="refund", arguments={"order": "A7", "amount": 40})))
    results = [m.text for m in request.messages if m.role == "tool"]
    return ModelResponse(text="Done: " + " | ".join(results))


def desk(tmp_path: Path, **fields: object) -> Path:
    fields.setdefault("approvals", {"refund": {"approvers": ["cli:alice", "cli:bob"]}})
    return write_agent_dir(tmp_path, "desk", tools_py=TOOLS, model="test/desk", **fields)


async def wait_status(runtime, run_id: str, status: str, timeout_s: float = 30) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if (await runtime.get_run(run_id)).status == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} is {(await runtime.get_run(run_id)).status}, "
                         f"not {status}")


async def queued_messages(runtime, run_id: str) -> int:
    async with runtime.store.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM toren_control.queue WHERE run_id = %s", (run_id,))
        row = await cursor.fetchone()
    return int(row[0])


async def live_leases(runtime, run_id: str) -> int:
    async with runtime.store.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM toren_control.leases WHERE run_id = %s AND expires_at > now()",
            (run_id,))
        row = await cursor.fetchone()
    return int(row[0])


async def test_an_approved_call_waits_parked_then_runs_once(make_runtime,
                                                             tmp_path: Path) -> None:
    directory = desk(tmp_path)
    runtime = await make_runtime(dirs=[directory],
                                 models={"desk": ScriptedModel(script=both_at_once)})
    run_id = await runtime.start_run("desk", "refund A7")
    await wait_status(runtime, run_id, "awaiting_approval")
    # parked: the other call of the step ran; no message, no lease held while a person decides
    events = await runtime.events(run_id)
    assert types(events) == ["TaskStarted", "ModelCallStarted", "ModelCallCompleted",
                             "ToolCallStarted", "ApprovalRequested", "ToolCallCompleted"]
    assert await queued_messages(runtime, run_id) == 0
    assert await live_leases(runtime, run_id) == 0
    assert not (directory / "effects").exists()
    pending = await runtime.list_approvals(status="pending")
    assert [(a.tool, a.arguments, a.run_id) for a in pending] == [
        ("refund", {"order": "A7", "amount": 40}, run_id)]
    approval = pending[0]
    assert approval.approvers == ("cli:alice", "cli:bob")
    assert [a["id"] for a in await runtime.pending_approvals(run_id)] == [approval.id]
    receipt = await runtime.receipt(run_id)
    assert receipt["why"] == f"waiting for approval of refund (id {approval.id})"

    with pytest.raises(NotAnApprover, match="mallory may not decide"):
        await runtime.approve(approval.id, decided_by="cli:mallory")
    decided = await runtime.approve(approval.id, decided_by="cli:alice", reason="customer is right")
    assert decided.status == "approved" and decided.decided_by == "cli:alice"
    assert decided.reason == "customer is right" and decided.decided_at is not None
    with pytest.raises(ApprovalAlreadyDecided,
                       match="already decided: approved by cli:alice") as err:
        await runtime.deny(approval.id, decided_by="cli:bob")
    assert err.value.approval["status"] == "approved"

    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    assert "refunded 40 EUR on A7" in record.output
    assert (directory / "effects").read_text() == "refund A7 40\n"
    events = await runtime.events(run_id)
    check_log(events)
    decided_event = next(e for e in events if e.type == "ApprovalDecided")
    assert decided_event.data["outcome"] == "approved"
    assert decided_event.data["decided_by"] == "cli:alice"
    receipt = await runtime.receipt(run_id)
    assert receipt["tasks"][0]["approvals"][0]["outcome"] == "approved"
    assert await runtime.pending_approvals(run_id) == []


async def test_a_denial_reaches_the_model_with_its_reason(make_runtime, tmp_path: Path) -> None:
    directory = desk(tmp_path)
    runtime = await make_runtime(dirs=[directory],
                                 models={"desk": ScriptedModel(script=both_at_once)})
    run_id = await runtime.start_run("desk", "refund A7")
    await wait_status(runtime, run_id, "awaiting_approval")
    [approval] = await runtime.list_approvals(run_id=run_id)
    await runtime.deny(approval.id, decided_by="cli:bob", reason="over the limit")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    assert "cli:bob denied it: over the limit" in record.output
    assert not (directory / "effects").exists()
    result = next(e for e in await runtime.events(run_id)
                  if e.type == "ToolCallCompleted" and e.data["name"] == "refund")
    assert result.data["error_kind"] == "approval_denied" and result.data["is_error"]


async def test_an_unanswered_request_expires_and_cannot_be_approved_late(
        make_runtime, tmp_path: Path) -> None:
    directory = desk(tmp_path, approvals={"refund": {"expiresAfterSeconds": 0.5}})
    runtime = await make_runtime(dirs=[directory],
                                 models={"desk": ScriptedModel(script=both_at_once)})
    run_id = await runtime.start_run("desk", "refund A7")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed" and "its approval expired" in record.output
    [approval] = await runtime.list_approvals(run_id=run_id)
    assert approval.status == "expired" and approval.decided_by == "toren"
    with pytest.raises(ApprovalAlreadyDecided, match="expired"):
        await runtime.approve(approval.id, decided_by="anyone")
    assert not (directory / "effects").exists()


async def test_racing_decisions_decide_once(make_runtime, tmp_path: Path) -> None:
    directory = desk(tmp_path, approvals={"refund": {}})
    runtime = await make_runtime(dirs=[directory],
                                 models={"desk": ScriptedModel(script=both_at_once)})
    run_id = await runtime.start_run("desk", "refund A7")
    await wait_status(runtime, run_id, "awaiting_approval")
    [approval] = await runtime.list_approvals(run_id=run_id)
    results = await asyncio.gather(
        *(runtime.decide_approval(approval.id, "approved" if i % 2 else "denied",
                                  decided_by=f"key-{i}") for i in range(10)),
        return_exceptions=True)
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(r, ApprovalAlreadyDecided) and r.approval["status"] ==
               winners[0].status for r in results if isinstance(r, BaseException))
    await runtime.wait_for_run(run_id, timeout_s=30)
    events = await runtime.events(run_id)
    check_log(events)
    assert types(events).count("ApprovalDecided") == 1
    ran = (directory / "effects").read_text().count("refund") if (
        directory / "effects").exists() else 0
    assert ran == (1 if winners[0].status == "approved" else 0)


async def test_a_session_shows_pending_approvals_and_refuses_messages_meanwhile(
        make_runtime, tmp_path: Path) -> None:
    directory = desk(tmp_path)
    runtime = await make_runtime(dirs=[directory],
                                 models={"desk": ScriptedModel(script=both_at_once)})
    session_id = await runtime.start_session("desk")
    await runtime.send_message(session_id, "refund A7")
    waiting = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert waiting["status"] == "awaiting_approval"
    [pending] = waiting["pending_approvals"]
    assert pending["tool"] == "refund" and pending["status"] == "pending"
    with pytest.raises(SessionBusy, match="waiting for approval"):
        await runtime.send_message(session_id, "hello?")
    await runtime.approve(pending["id"], decided_by="cli:alice")
    done = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert done["status"] == "awaiting_input" and done["pending_approvals"] == []
    assert "refunded 40 EUR" in done["transcript"][-1]["text"]


async def test_cancelling_a_parked_run_cancels_its_approvals(make_runtime,
                                                             tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[desk(tmp_path)],
                                 models={"desk": ScriptedModel(script=both_at_once)})
    run_id = await runtime.start_run("desk", "refund A7")
    await wait_status(runtime, run_id, "awaiting_approval")
    await runtime.cancel_run(run_id)
    [approval] = await runtime.list_approvals(run_id=run_id)
    assert approval.status == "cancelled"
    with pytest.raises(ApprovalAlreadyDecided, match="cancelled"):
        await runtime.approve(approval.id, decided_by="cli:alice")


async def test_decorator_marks_a_tool_and_bad_input_is_refused(make_runtime,
                                                                tmp_path: Path) -> None:
    tools = TOOLS.replace("def refund", "@tool(requires_approval=True)\ndef refund")
    directory = write_agent_dir(tmp_path, "deco", tools_py="from toren import tool\n" + tools,
                                model="test/desk")
    runtime = await make_runtime(dirs=[directory],
                                 models={"desk": ScriptedModel(script=both_at_once)})
    assert runtime.agents["deco"].approvals["refund"].approvers == ()
    run_id = await runtime.start_run("deco", "x")
    await wait_status(runtime, run_id, "awaiting_approval")
    for bad in ("nope", "00000000-0000-0000-0000-000000000000", "\x00"):
        with pytest.raises(ApprovalNotFound):
            await runtime.get_approval(bad)
    with pytest.raises(ConfigError, match="unknown approval status"):
        await runtime.list_approvals(status="maybe")
    assert await runtime.list_approvals(run_id="not-a-uuid") == []
    [approval] = await runtime.list_approvals(run_id=run_id)
    with pytest.raises(ConfigError, match="at most"):
        await runtime.deny(approval.id, decided_by="x", reason="y" * 5000)
    assert (await runtime.get_approval(approval.id)).pending

