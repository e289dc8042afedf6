"""Approvals, complete (issue 39 §1) against real Postgres: every decision is bound to the
digest of the arguments it saw; a person may edit the arguments (checked against the tool's
schema) or answer instead of running the tool; "approve always" covers the same call for the
rest of the run; an approval nobody decides escalates once to a second list and reminds the
session's channel."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.durable import check_log, types
from toren import hookimpl
from toren.core.approvals import arguments_digest
from toren.errors import (
    ApprovalAlreadyDecided,
    ApprovalStale,
    ConfigError,
    InvalidApprovalArguments,
    NotAnApprover,
)
from toren.seams.channels import Channel
from toren.seams.model import ModelRequest, ModelResponse, ToolCall
from toren.testing import ScriptedModel, write_agent_dir

TOOLS = '''
import pathlib

EFFECTS = pathlib.Path(__file__).parent / "effects"


def refund(order: str, amount: int) -> str:
    """Refund an order (irreversible)."""
    with EFFECTS.open("a") as handle:
        handle.write(f"refund {order} {amount}\\n")
    return f"refunded {amount} EUR on {order}"
'''
ASKED = {"order": "A7", "amount": 40}


def refunder(request: ModelRequest) -> ModelResponse:
    """A user's message "refund N" calls refund(A7, N); a tool result is answered with it."""
    last = request.messages[-1]
    if last.role == "user":
        turn = sum(1 for m in request.messages if m.role == "user")
        amount = int(match.group(1)) if (match := re.search(r"(\d+)", last.text)) else 40
        return ModelResponse(text="Refunding.", stop_reason="tool_use", tool_calls=(
            ToolCall(id=f"r{turn}", name="refund", arguments={"order": "A7", "amount": amount}),))
    return ModelResponse(text="Done: " + last.text)


def desk(tmp_path: Path, **policy: object) -> Path:
    return write_agent_dir(tmp_path, "desk", tools_py=TOOLS, model="test/desk",
                           approvals={"refund": policy or {"approvers": ["cli:alice", "cli:bob"]}})


def effects(directory: Path) -> list[str]:
    path = directory / "effects"
    return path.read_text().splitlines() if path.exists() else []


async def parked(runtime, run_id: str):
    """The run's one pending approval, once the run waits for it."""
    for _ in range(600):
        found = await runtime.list_approvals(run_id=run_id, status="pending")
        if found and (await runtime.get_run(run_id)).status == "awaiting_approval":
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never waited for an approval")


@pytest.fixture
async def desk_runtime(make_runtime, tmp_path: Path):
    directory = desk(tmp_path)
    runtime = await make_runtime(dirs=[directory],
                                 models={"desk": ScriptedModel(script=refunder)})
    return runtime, directory


async def test_an_edit_is_checked_then_runs_once_with_the_new_arguments(desk_runtime) -> None:
    runtime, directory = desk_runtime
    run_id = await runtime.start_run("desk", "refund 40")
    approval = await parked(runtime, run_id)
    assert approval.digest == arguments_digest(ASKED) and len(approval.digest) == 64
    assert approval.parameters is not None and approval.to_json()["digest"] == approval.digest

    with pytest.raises(ApprovalStale) as stale:  # decided on other arguments than these
        await runtime.decide_approval(approval.id, "approved", decided_by="cli:alice",
                                      digest=arguments_digest({"order": "A7", "amount": 4}))
    assert stale.value.digest == approval.digest
    with pytest.raises(InvalidApprovalArguments, match="amount") as bad:
        await runtime.decide_approval(approval.id, "edited", decided_by="cli:alice",
                                      digest=approval.digest,
                                      arguments={"order": "A7", "amount": "lots"})
    assert bad.value.field == "amount"
    with pytest.raises(InvalidApprovalArguments, match="'amount' is a required property"):
        await runtime.decide_approval(approval.id, "edited", decided_by="cli:alice",
                                      digest=approval.digest, arguments={"order": "A7"})
    with pytest.raises(NotAnApprover):
        await runtime.decide_approval(approval.id, "edited", decided_by="cli:mallory",
                                      digest=approval.digest, arguments={"order": "A7",
                                                                         "amount": 1})
    assert (await runtime.get_approval(approval.id)).pending

    edited = {"order": "A7", "amount": 25}
    decided = await runtime.decide_approval(approval.id, "edited", decided_by="cli:alice",
                                            digest=approval.digest, arguments=edited)
    assert decided.status == "edited" and decided.edited_arguments == edited
    with pytest.raises(ApprovalAlreadyDecided, match="edited by cli:alice"):
        await runtime.approve(approval.id, decided_by="cli:bob")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    assert effects(directory) == ["refund A7 25"]
    events = await runtime.events(run_id)
    check_log(events)
    decision = next(e.data for e in events if e.type == "ApprovalDecided")
    assert (decision["outcome"], decision["decided_by"], decision["digest"],
            decision["arguments"], decision["edited_digest"]) == (
        "edited", "cli:alice", approval.digest, edited, arguments_digest(edited))
    started = [e.data for e in events if e.type == "ToolCallStarted"]
    assert [s["arguments"] for s in started] == [edited]
    result = next(e.data["output"] for e in events if e.type == "ToolCallCompleted")
    # the model is told who changed what before it reads the result
    assert result.startswith("[cli:alice edited the arguments of this call to refund before it "
                             "ran; changed: amount;")
    assert result.endswith("refunded 25 EUR on A7")


async def test_an_answer_is_the_result_and_the_tool_never_runs(desk_runtime) -> None:
    runtime, directory = desk_runtime
    run_id = await runtime.start_run("desk", "refund 40")
    approval = await parked(runtime, run_id)
    for bad, match in ((dict(answer=""), "may not be empty"),
                       (dict(answer="x", arguments={"a": 1}), "edited arguments come"),
                       (dict(answer="x", scope="run"), "only an approval"),
                       (dict(answer="x", digest="not hex"), "64 lowercase hex")):
        with pytest.raises(ConfigError, match=match):
            await runtime.decide_approval(approval.id, "answered", decided_by="cli:bob",
                                          **bad)  # type: ignore[arg-type]
    text = "Already refunded by phone on Monday (ticket 88)."
    decided = await runtime.decide_approval(approval.id, "answered", decided_by="cli:bob",
                                            digest=approval.digest, answer=text)
    assert decided.status == "answered" and decided.answer == text
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed" and record.output == "Done: " + text
    assert effects(directory) == []
    events = await runtime.events(run_id)
    check_log(events)
    assert "ToolCallStarted" not in types(events)
    decision = next(e.data for e in events if e.type == "ApprovalDecided")
    assert (decision["outcome"], decision["decided_by"], decision["answer"]) == (
        "answered", "cli:bob", text)
    result = next(e.data for e in events if e.type == "ToolCallCompleted")
    assert (result["output"], result["is_error"]) == (text, False)


async def test_racing_deciders_of_every_kind_decide_once(desk_runtime) -> None:
    runtime, directory = desk_runtime
    run_id = await runtime.start_run("desk", "refund 40")
    approval = await parked(runtime, run_id)
    kinds = [dict(outcome="approved"), dict(outcome="denied"),
             dict(outcome="edited", arguments={"order": "A7", "amount": 1}),
             dict(outcome="answered", answer="no need")]
    results = await asyncio.gather(
        *(runtime.decide_approval(approval.id, decided_by="cli:alice", digest=approval.digest,
                                  **kinds[i % 4]) for i in range(12)),  # type: ignore[arg-type]
        return_exceptions=True)
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1, results
    losers = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(r, ApprovalAlreadyDecided)
               and r.approval["status"] == winners[0].status for r in losers)
    await runtime.wait_for_run(run_id, timeout_s=30)
    events = await runtime.events(run_id)
    check_log(events)
    assert types(events).count("ApprovalDecided") == 1
    expected = {"approved": ["refund A7 40"], "edited": ["refund A7 1"]}
    assert effects(directory) == expected.get(winners[0].status, [])


async def test_approve_always_covers_the_same_call_for_the_rest_of_the_run(
        desk_runtime) -> None:
    runtime, directory = desk_runtime
    session_id = await runtime.start_session("desk")
    await runtime.send_message(session_id, "refund 40")
    first = await parked(runtime, session_id)
    with pytest.raises(ConfigError, match="only an approval"):
        await runtime.decide_approval(first.id, "denied", decided_by="cli:alice", scope="run")
    decided = await runtime.approve(first.id, decided_by="cli:alice", digest=first.digest,
                                    scope="run")
    assert decided.scope == "run"
    assert (await runtime.wait_for_turn(session_id, timeout_s=30))["status"] == "awaiting_input"

    # the task is taken up again from its log for the next turn: the same call is not asked
    await runtime.send_message(session_id, "refund 40")
    turn = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert turn["status"] == "awaiting_input" and turn["pending_approvals"] == []
    assert effects(directory) == ["refund A7 40", "refund A7 40"]
    second = next(a for a in await runtime.list_approvals(run_id=session_id)
                  if a.id != first.id)
    assert (second.status, second.decided_by, second.granted_by) == (
        "approved", "cli:alice", first.id)

    # other arguments are another call: asked again
    await runtime.send_message(session_id, "refund 41")
    third = await parked(runtime, session_id)
    assert third.arguments == {"order": "A7", "amount": 41}
    await runtime.deny(third.id, decided_by="cli:alice", digest=third.digest)
    await runtime.wait_for_turn(session_id, timeout_s=30)
    events = await runtime.events(session_id)
    check_log(events)
    decisions = [e.data for e in events if e.type == "ApprovalDecided"]
    assert [(d["outcome"], d.get("scope", "call"), d.get("granted_by")) for d in decisions] == [
        ("approved", "run", None), ("approved", "call", first.id), ("denied", "call", None)]
    receipt = (await runtime.receipt(session_id))["tasks"][0]["approvals"]
    assert [(a["outcome"], a["scope"], a["granted_by"]) for a in receipt] == [
        ("approved", "run", None), ("approved", "call", first.id), ("denied", "call", None)]
    assert effects(directory) == ["refund A7 40", "refund A7 40"]


class Inbox(Channel):
    """A channel that keeps the notices it is handed."""

    name = "inbox"
    description = "collects notices"

    def __init__(self) -> None:
        self.notices: list[str] = []

    async def start(self, context: object) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def notify(self, session_id: str, agent: str, text: str) -> None:
        self.notices.append(text)


async def test_an_unanswered_approval_reminds_escalates_once_then_expires(
        make_runtime, tmp_path: Path) -> None:
    directory = desk(tmp_path, approvers=["cli:alice"], expiresAfter="1s", onExpiry="escalate",
                     escalateTo=["cli:carol"], remindAfter="0.3s")
    runtime = await make_runtime(dirs=[directory],
                                 models={"desk": ScriptedModel(script=refunder)})
    inbox = Inbox()

    class Plugin:
        @hookimpl
        def register_channels(self, register) -> None:
            register(inbox)

    runtime.plugins.add_plugin(Plugin(), "inbox")
    runtime.agents["desk"].channels.update({"inbox": {}})
    await runtime.start_channels()
    session_id = await runtime.start_session("desk")
    await runtime.send_message(session_id, "refund 40")
    run_id = await runtime.start_run("desk", "refund 40")  # nobody decides this one
    approval = await parked(runtime, session_id)
    assert approval.approvers == ("cli:alice",) and approval.remind_at is not None

    async def moved():
        for _ in range(600):
            found = await runtime.get_approval(approval.id)
            if found.escalation_level == 1 and found.reminded_at is not None:
                return found
            await asyncio.sleep(0.05)
        raise AssertionError("the approval never escalated")

    escalated = await moved()
    assert escalated.pending and escalated.approvers == ("cli:carol",)
    assert escalated.expires_at is not None and escalated.escalated_at is not None
    with pytest.raises(NotAnApprover, match="alice may not decide"):
        await runtime.approve(approval.id, decided_by="cli:alice")
    for _ in range(200):  # the escalation's notice follows its commit
        if any("now waits for cli:carol" in n for n in inbox.notices):
            break
        await asyncio.sleep(0.05)
    assert any(n.startswith("Reminder: the call to refund") and "cli:alice" in n
               for n in inbox.notices), inbox.notices
    assert any("now waits for cli:carol" in n for n in inbox.notices), inbox.notices
    await runtime.approve(approval.id, decided_by="cli:carol", digest=approval.digest)
    assert (await runtime.wait_for_turn(session_id, timeout_s=30))["status"] == "awaiting_input"
    events = await runtime.events(session_id)
    check_log(events)
    [moved_event] = [e.data for e in events if e.type == "ApprovalEscalated"]
    assert moved_event["approvers"] == ["cli:carol"] and moved_event["approval_id"] == approval.id
    [receipt] = (await runtime.receipt(session_id))["tasks"][0]["approvals"]
    assert (receipt["outcome"], receipt["escalated_to"]) == ("approved", ["cli:carol"])
    assert effects(directory) == ["refund A7 40"]

    # the run nobody decided: escalated once, then expired after the second wait
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed" and "its approval expired" in record.output
    [lapsed] = await runtime.list_approvals(run_id=run_id)
    assert (lapsed.status, lapsed.escalation_level, lapsed.approvers) == (
        "expired", 1, ("cli:carol",))
    assert types(await runtime.events(run_id)).count("ApprovalEscalated") == 1
    await runtime.stop_channels()
