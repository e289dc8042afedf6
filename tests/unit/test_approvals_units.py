"""Approvals in the pure core: the fold parks a task on an undecided request, after the step's
other calls; decisions and texts; agent.yaml's approvals: errors with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from toren.agents import load_agent
from toren.core import events as ev
from toren.core.approvals import (
    ApprovalPolicy,
    approval_id,
    arguments_digest,
    decision_text,
    edit_note,
    may_decide,
    parse_duration,
    waiting_text,
)
from toren.core.decisions import AwaitApprovals, CallModel, RunTools, next_task_action
from toren.core.fold import fold_task
from toren.core.limits import Limits
from toren.errors import AgentDefinitionError
from toren.testing import write_agent_dir

KEY = "toren:r:main:1:1"


def step_events() -> list[ev.EventData]:
    return [
        ev.TaskStarted(task_id="main", subagent=None, model="m", input="x", limits={},
                       tools=("lookup", "refund"), prompt_sha256="0", epoch=1),
        ev.ModelCallStarted(step=1, epoch=1),
        ev.ModelCallCompleted(
            step=1, epoch=1, model="m", text="", stop_reason="tool_use", usage=ev.TokenUsage(),
            cost_usd=0.0, latency_ms=1.0, repeated=False, tool_calls=(
                ev.RecordedToolCall(id="a", name="lookup", arguments={}),
                ev.RecordedToolCall(id="b", name="refund", arguments={"n": 1}))),
        ev.ToolCallStarted(step=1, call_id="a", name="lookup", arguments={},
                           idempotency_key="toren:r:main:1:0", epoch=1),
        ev.ApprovalRequested(step=1, approval_id=approval_id(KEY), call_id="b", name="refund",
                             arguments={"n": 1}, idempotency_key=KEY, epoch=1),
    ]


def completed(call_id: str, name: str, **extra: object) -> ev.ToolCallCompleted:
    return ev.ToolCallCompleted(step=1, call_id=call_id, name=name, output="ok", is_error=False,
                                error_kind=None, truncated=False, original_bytes=2,
                                duration_ms=1.0, epoch=1, **extra)  # type: ignore[arg-type]


def test_other_calls_run_first_then_the_task_waits_then_the_decision_lets_it_go_on() -> None:
    events = step_events()
    assert isinstance(next_task_action(fold_task(events), Limits(), 1), RunTools)
    events.append(completed("a", "lookup"))
    action = next_task_action(fold_task(events), Limits(), 1)
    assert isinstance(action, AwaitApprovals)
    assert [r.call_id for r in action.requests] == ["b"]
    events += [ev.ApprovalDecided(approval_id=approval_id(KEY), call_id="b", outcome="approved",
                                  decided_by="alice", decided_at="2026-01-01T00:00:00+00:00",
                                  epoch=2),
               ev.ToolCallStarted(step=1, call_id="b", name="refund", arguments={"n": 1},
                                  idempotency_key=KEY, epoch=2)]
    state = fold_task(events)
    assert state.pending_approvals == []
    assert isinstance(next_task_action(state, Limits(), 2), RunTools)
    events.append(completed("b", "refund"))
    assert isinstance(next_task_action(fold_task(events), Limits(), 2), CallModel)
    # a checkpoint keeps a pending approval
    parked = fold_task([*step_events(), completed("a", "lookup")])
    assert fold_task([parked.snapshot()]).pending_approvals == parked.pending_approvals


def test_ids_texts_and_who_may_decide() -> None:
    assert approval_id(KEY) == approval_id(KEY) != approval_id(KEY + "x")
    assert may_decide((), "anyone") and may_decide(("cli:a",), "cli:a")
    assert not may_decide(("cli:a",), "cli:b") and not may_decide(("a",), "a")
    assert decision_text("refund", "denied", "bob", "no") == (
        "Error: the call to refund was not run: bob denied it: no.")
    assert "approval expired" in decision_text("refund", "expired", "toren", None)
    assert waiting_text("refund", "id1") == "waiting for approval of refund (id id1)"


def test_a_digest_is_of_the_arguments_whatever_their_order_or_spacing() -> None:
    digest = arguments_digest({"order": "A7", "amount": 40, "note": "café"})
    assert digest == arguments_digest({"note": "café", "amount": 40, "order": "A7"})
    assert digest != arguments_digest({"order": "A7", "amount": 41, "note": "café"})
    assert len(digest) == 64 and set(digest) <= set("0123456789abcdef")
    # what anyone can recompute: sha256 of the canonical JSON, UTF-8
    import hashlib
    assert digest == hashlib.sha256('{"amount":40,"note":"café","order":"A7"}'.encode()
                                    ).hexdigest()


def test_durations_escalation_and_what_an_edit_tells_the_model() -> None:
    assert [parse_duration(t) for t in ("45s", "30m", "1h30m", "2d", "0.5s")] == [
        45.0, 1800.0, 5400.0, 172800.0, 0.5]
    for bad in ("", "30", "m", "1x", "0s", "30m5", " 30m", "1h 30m"):
        with pytest.raises(ValueError, match="is not a duration"):
            parse_duration(bad)
    policy = ApprovalPolicy.from_yaml({"approvers": ["cli:a"], "expiresAfter": "30m",
                                       "onExpiry": "escalate", "escalateTo": ["role:admin"],
                                       "remindAfter": "10m"})
    assert (policy.expires_after_s, policy.on_expiry, policy.escalate_to,
            policy.remind_after_s) == (1800.0, "escalate", ("role:admin",), 600.0)
    assert ApprovalPolicy.from_yaml({"expiresAfterSeconds": 5}).expires_after_s == 5
    assert edit_note("refund", "bob", {"a": 1, "b": 2}, {"a": 1, "c": 3}) == (
        '[bob edited the arguments of this call to refund before it ran; changed: b, c; it ran '
        'with {"a": 1, "c": 3}]\n')


TOOLS = 'def refund(o: str) -> str:\n    """Refund."""\n    return o\n'


@pytest.mark.parametrize(("approvals", "message"), [
    ({"refnud": {}}, r"agent.yaml:3: approvals: the agent has no tool 'refnud' \(did you mean "
                     r"'refund'\?\)"),
    ({"refund": {"expiresAfterSeconds": 0}}, r"agent.yaml:4: approvals.refund.expiresAfterSeconds"),
    ({"refund": {"approver": ["a"]}}, r"agent.yaml:4: unknown key 'approvals.refund.approver' "
                                      r"\(did you mean 'approvers'\?\)"),
    ({"refund": {"approvers": "alice"}}, r"agent.yaml:4: approvals.refund.approvers: expected "
                                         r"array"),
    ({"refund": []}, r"agent.yaml:3: approvals.refund: expected"),
    ({"refund": {"approvers": ["finance-lead"]}},
     r"agent.yaml:3: approvals.refund: approvers: approver 'finance-lead' is not a reference: "
     r"name a key as key:<id or prefix>"),
    ({"refund": {"approvers": ["role:boss"]}}, r"approvers: approver 'role:boss': role:<role>"),
    ({"refund": {"onExpiry": "escalate", "expiresAfter": "1h", "escalateTo": ["bob"]}},
     r"agent.yaml:3: approvals.refund: escalateTo: approver 'bob' is not a reference"),
    ({"bad name!": {}}, r"agent.yaml:\d+: approvals"),
    ({"refund": {"expiresAfter": "30 minutes"}}, r"agent.yaml:4: approvals.refund.expiresAfter"),
    ({"refund": {"expiresAfter": "30m", "expiresAfterSeconds": 60}},
     r"agent.yaml:3: approvals.refund: give expiresAfter or expiresAfterSeconds, not both"),
    ({"refund": {"onExpiry": "escalate", "expiresAfter": "1h"}},
     r"agent.yaml:\d+: .*escalateTo"),
    ({"refund": {"onExpiry": "escalate", "escalateTo": ["role:admin"]}},
     r"agent.yaml:3: approvals.refund: onExpiry: escalate needs escalateTo .* and expiresAfter"),
    ({"refund": {"onExpiry": "later", "expiresAfter": "1h"}}, r"approvals.refund.onExpiry"),
    ({"refund": {"remindAfter": "0s"}}, r"agent.yaml:3: approvals.refund: '0s' is not a "
                                        r"duration"),
])
def test_bad_approvals_name_the_file_and_line(tmp_path: Path, approvals: object,
                                              message: str) -> None:
    directory = write_agent_dir(tmp_path, "desk", tools_py=TOOLS, approvals=approvals)
    with pytest.raises(AgentDefinitionError, match=message):
        load_agent(directory)


def test_an_entry_with_no_options_and_the_decorator_mean_anyone_no_expiry(tmp_path: Path
                                                                           ) -> None:
    directory = write_agent_dir(tmp_path, "desk", tools_py=TOOLS, approvals={"refund": None})
    assert load_agent(directory).approvals["refund"].approvers == ()
    decorated = "from toren import tool\n\n@tool(requires_approval=True)\n" + TOOLS
    directory = write_agent_dir(tmp_path, "deco", tools_py=decorated)
    agent = load_agent(directory)
    assert agent.approvals["refund"].expires_after_s is None
    assert agent.to_json()["approvals"] == {"refund": {
        "approvers": [], "expiresAfterSeconds": None, "onExpiry": "deny", "escalateTo": [],
        "remindAfterSeconds": None}}
