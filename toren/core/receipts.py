"""Receipts: what a run did and what it cost, computed from its events (a pure read model)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from toren.core import events as ev
from toren.core.approvals import waiting_text
from toren.core.events import Event
from toren.core.messages import Usage
from toren.core.pricing import Pricing
from toren.core.runs import RunRecord, RunTotals

STOP_REASON_TEXT = {
    "end_turn": "the model gave its final answer",
    "max_steps": "the step cap (limits.maxSteps) was reached",
    "max_waves": "the wave cap (limits.maxWaves) was reached",
    "budget_exhausted": "the budget (limits.maxBudgetUsd or limits.dailyBudgetUsd) had no room "
                        "for the next model call",
    "cancelled": "the run was cancelled",
    "error": "an error stopped it",
}


#: Events after which a task parks on purpose (a peer run, a person, a signal, a retry's
#: delay, a session's next message): the next epoch resumes it; nothing was taken over.
_PARKING = frozenset({ev.PEER_CALL_STARTED, ev.APPROVAL_REQUESTED, ev.QUESTION_ASKED,
                      ev.TOOL_WAIT_STARTED, ev.RETRY_SCHEDULED, ev.TURN_ENDED})


def _takeovers(events: Sequence[Event], fork_at: int) -> list[int]:
    """The epochs of a task (after a fork's copy) that began by taking the task over: the
    epoch before did not park after its last model call started (it crashed, lost its lease,
    or handed the task back at shutdown). An epoch after a park (a peer call, an approval,
    ...) is a planned resume: the calls before it were not "replayed" after a failure."""
    taken: list[int] = []
    epoch: int | None = None
    parked = True  # the first epoch takes over nothing
    for event in events:
        if event.seq <= fork_at or "epoch" not in event.data:
            continue
        if epoch is not None and event.data["epoch"] > epoch:
            if not parked:
                taken.append(event.data["epoch"])
            parked = False
        if epoch is None or event.data["epoch"] > epoch:
            epoch = event.data["epoch"]
        if event.type == ev.MODEL_CALL_STARTED:
            parked = False
        elif event.type in _PARKING:
            parked = True
    return taken


def _task_receipt(task_id: str, events: Sequence[Event]) -> dict[str, Any]:
    started = next((e.data for e in events if e.type == ev.TASK_STARTED), {})
    finished = next((e.data for e in events if e.type == ev.TASK_FINISHED), None)
    # a fork's events before its (latest) TaskForked were copied from the source run: made
    # and paid for there, so they cost nothing here and say so
    fork_at = max((e.seq for e in events if e.type == ev.TASK_FORKED), default=0)
    epochs = sorted({e.data["epoch"] for e in events if "epoch" in e.data and e.seq > fork_at})
    # what a call of an epoch before it was read from the log by a worker that took the task
    # over (a crash, a lost lease, a shutdown's hand-back), not after a pause of its own
    last_takeover = max(_takeovers(events, fork_at), default=None)
    model_calls: list[dict[str, Any]] = []
    fallbacks = [{"step": e.data["step"], "from_model": e.data["from_model"],
                  "to_model": e.data["to_model"], "reason": e.data["reason"],
                  "message": e.data["error"].get("message")}
                 for e in events if e.type == ev.MODEL_FELL_BACK]
    fell_back: dict[str, Any] | None = None
    for e in events:
        if e.type == ev.MODEL_FELL_BACK:
            fell_back = e.data
            continue
        if e.type == ev.BUDGET_SETTLED and model_calls and e.data.get("settled_usd") is not None \
                and model_calls[-1]["step"] == e.data["step"] \
                and model_calls[-1]["purpose"] == e.data.get("purpose", "step"):
            model_calls[-1]["reserved_usd"] = e.data["reserved_usd"]
            model_calls[-1]["settled_usd"] = e.data["settled_usd"]
            continue
        if e.type != ev.MODEL_CALL_COMPLETED:
            continue
        usage = e.data["usage"]
        copied = e.seq < fork_at
        model_calls.append({
            "step": e.data["step"], "model": e.data["model"],
            "provider": e.data["model"].partition("/")[0],
            "purpose": e.data.get("purpose", "step"),
            "input_tokens": usage.get("input_tokens", 0),
            "output_tokens": usage.get("output_tokens", 0),
            "cache_read_tokens": usage.get("cache_read_tokens", 0),
            "cache_write_tokens": usage.get("cache_write_tokens", 0),
            # of input_tokens, those the request's images and PDF pages took (an estimate)
            "image_tokens": e.data.get("image_tokens", 0),
            "cost_usd": 0.0 if e.seq < fork_at else e.data["cost_usd"],
            "latency_ms": e.data["latency_ms"],
            "repeated": e.data.get("repeated", False),
            # paid once by an earlier worker; the worker that resumed read it from the log
            "replayed": e.seq > fork_at and last_takeover is not None
                        and e.data["epoch"] < last_takeover,
            "at": e.created_at.isoformat() if e.created_at else None,
            # the model that answered took over from a failed one (``ModelFellBack``)
            "fell_back_from": fell_back["from_model"] if fell_back else None,
            "fallback_reason": fell_back["reason"] if fell_back else None,
            # copied from the source run by a fork (no call made): its cost there
            "copied": e.seq < fork_at,
            "source_cost_usd": e.data["cost_usd"] if e.seq < fork_at else None,
            # USD per million tokens of each kind (absent when the price was unknown)
            "pricing": e.data.get("pricing"),
        } | cache_costs(usage, e.data.get("pricing"), 0.0 if copied else e.data["cost_usd"],
                        copied=copied))
        fell_back = None
    tool_calls = [{
        "step": e.data["step"], "name": e.data["name"], "call_id": e.data["call_id"],
        "is_error": e.data["is_error"], "error_kind": e.data.get("error_kind"),
        "truncated": e.data.get("truncated", False), "duration_ms": e.data["duration_ms"],
        "copied": e.seq < fork_at,
    } for e in events if e.type == ev.TOOL_CALL_COMPLETED]
    keys = {e.data["call_id"]: e.data["idempotency_key"] for e in events
            if e.type == ev.TOOL_CALL_STARTED}
    for call in tool_calls:
        call["idempotency_key"] = keys.get(call["call_id"])
    decisions = {e.data["approval_id"]: e.data for e in events
                 if e.type == ev.APPROVAL_DECIDED}
    escalations = {e.data["approval_id"]: e.data["approvers"] for e in events
                   if e.type == ev.APPROVAL_ESCALATED}
    approvals = [{
        "approval_id": e.data["approval_id"], "step": e.data["step"], "name": e.data["name"],
        "call_id": e.data["call_id"],
        "outcome": decisions.get(e.data["approval_id"], {}).get("outcome", "pending"),
        "decided_by": decisions.get(e.data["approval_id"], {}).get("decided_by"),
        "decided_at": decisions.get(e.data["approval_id"], {}).get("decided_at"),
        "reason": decisions.get(e.data["approval_id"], {}).get("reason"),
        "digest": e.data.get("digest"),
        "scope": decisions.get(e.data["approval_id"], {}).get("scope", "call"),
        "granted_by": decisions.get(e.data["approval_id"], {}).get("granted_by"),
        "escalated_to": escalations.get(e.data["approval_id"]),
    } for e in events if e.type == ev.APPROVAL_REQUESTED]
    policies = [{
        "step": e.data["step"], "hook": e.data["hook"], "call_id": e.data.get("call_id"),
        "name": e.data.get("name"), "decision": e.data["decision"],
        "plugin": e.data.get("plugin"), "reason": e.data.get("reason"),
        "verdicts": e.data["verdicts"], "digest_before": e.data["digest_before"],
        "digest_after": e.data["digest_after"],
        # decided by an earlier worker and replayed from the log, not asked again
        "replayed": last_takeover is not None and e.data["epoch"] < last_takeover,
    } for e in events if e.type == ev.POLICY_DECIDED]
    waits_ended = {(e.data["call_id"], e.data["wait"]): e.data for e in events
                   if e.type == ev.TOOL_WAIT_ENDED}
    signal_waits = [_tool_wait(e.data, waits_ended.get((e.data["call_id"], e.data["wait"])))
                    for e in events if e.type == ev.TOOL_WAIT_STARTED]
    retries = [{"step": e.data["step"], "attempt": e.data["attempt"], "error": e.data["error"],
                "delay_s": e.data["delay_s"]} for e in events if e.type == ev.RETRY_SCHEDULED]
    known = [c["cost_usd"] for c in model_calls if c["cost_usd"] is not None]
    forked = next((e.data for e in reversed(events) if e.type == ev.TASK_FORKED), {})
    if not any(e.seq > fork_at for e in events):
        forked = {}  # copied whole: it never ran on the fork's model
    return {
        "task_id": task_id, "subagent": started.get("subagent"),
        # a fork's live steps run on its model (the copied TaskStarted names the source's)
        "model": forked.get("model") or started.get("model"),
        "prompt_sha256": started.get("prompt_sha256"),
        "status": finished["status"] if finished else "running",
        "stop_reason": finished["stop_reason"] if finished else None,
        "error": finished.get("error") if finished else None,
        "steps": sum(1 for c in model_calls if c["purpose"] == "step"),
        "compactions": sum(1 for e in events if e.type == ev.COMPACTED),
        "resumes": max(0, len(epochs) - 1),
        "model_calls": model_calls, "tool_calls": tool_calls, "retries": retries,
        "approvals": approvals, "fallbacks": fallbacks, "budget": _task_budget(events),
        # the waits of its tools for signals (toren.wait_for_signal)
        "signal_waits": signal_waits,
        "policies": policies,
        "totals": {
            "model_calls": len(model_calls), "tool_calls": len(tool_calls),
            "input_tokens": sum(c["input_tokens"] for c in model_calls),
            "output_tokens": sum(c["output_tokens"] for c in model_calls),
            **{key: sum(c[key] for c in model_calls) for key in CACHE_TOKENS},
            "image_tokens": sum(c["image_tokens"] for c in model_calls),
            **{key: round(sum(c[key] for c in model_calls if c[key] is not None), 10)
               for key in CACHE_COSTS},
            "cost_usd": round(sum(known), 10),
            "cost_unknown_calls": len(model_calls) - len(known),
            "repeated_calls": sum(1 for c in model_calls if c["repeated"]),
            "copied_calls": sum(1 for c in model_calls if c["copied"]),
            # decisions that changed something: a denial, rewrite, approval, redaction, block
            "policy_interventions": sum(1 for p in policies
                                        if p["decision"] not in ("allow", "keep")),
        },
    }


#: Token counts of prompt caching in a receipt's totals.
CACHE_TOKENS = ("cache_read_tokens", "cache_write_tokens")
#: What prompt caching cost and saved, in a receipt's calls and totals (totals count the calls
#: whose prices are known).
CACHE_COSTS = ("cache_read_cost_usd", "cache_write_cost_usd", "uncached_cost_usd",
               "cache_saved_usd")


def cache_costs(usage: Mapping[str, int], pricing: Mapping[str, float] | None,
                cost_usd: float | None, *, copied: bool = False) -> dict[str, float | None]:
    """A call's cache reads and writes in dollars, what it would have cost without caching
    (every cached token billed as plain input) and what caching saved (that minus
    ``cost_usd``, negative when it wrote more than it read); ``None`` without prices."""
    if copied:  # made and paid for by the run a fork copied it from
        return dict.fromkeys(CACHE_COSTS, 0.0)
    if pricing is None or cost_usd is None:
        return dict.fromkeys(CACHE_COSTS)
    prices = Pricing(pricing["input_per_mtok"], pricing["output_per_mtok"],
                     pricing["cache_read_per_mtok"], pricing["cache_write_per_mtok"])
    counts = Usage(input_tokens=usage.get("input_tokens", 0),
                   output_tokens=usage.get("output_tokens", 0),
                   cache_read_tokens=usage.get("cache_read_tokens", 0),
                   cache_write_tokens=usage.get("cache_write_tokens", 0))
    uncached = prices.uncached_cost(counts)
    return {"cache_read_cost_usd": round(counts.cache_read_tokens * prices.cache_read / 1e6, 10),
            "cache_write_cost_usd": round(counts.cache_write_tokens * prices.cache_write / 1e6,
                                          10),
            "uncached_cost_usd": uncached, "cache_saved_usd": round(uncached - cost_usd, 10)}


def _task_budget(events: Sequence[Event]) -> dict[str, Any]:
    """What the task reserved and settled in the budget ledger, from its events."""
    reserved = [e.data for e in events if e.type == ev.BUDGET_RESERVED]
    settled = [e.data for e in events if e.type == ev.BUDGET_SETTLED]
    done = {s["reservation_id"] for s in settled}
    return {
        "reservations": len(reserved),
        "reserved_usd": round(sum(r["reserved_usd"] for r in reserved), 10),
        "settled_usd": round(sum(s["settled_usd"] or 0.0 for s in settled), 10),
        "released": sum(1 for s in settled if s["settled_usd"] is None),
        # reserved by a worker that stopped before settling: the ledger reconciles them
        "unsettled": sum(1 for r in reserved if r["reservation_id"] not in done),
        "warnings": [{"scope": e.data["scope"], "spent_usd": e.data["spent_usd"],
                      "budget_usd": e.data["budget_usd"]}
                     for e in events if e.type == ev.BUDGET_WARNING],
    }


def _task_order(task_id: str) -> tuple[int, str]:
    """w2-10 after w2-9: order wave tasks by their index, not as strings."""
    index = task_id.rpartition("-")[2]
    return (int(index), task_id) if index.isdigit() else (0, task_id)


def prompt_hashes(events: Iterable[Event]) -> list[str]:
    """The SHA-256 of every system prompt the run's tasks started with (or a fork gave them,
    or, after an upgrade, continued with), each once."""
    return list(dict.fromkeys(e.data["prompt_sha256"] for e in events
                              if e.type in (ev.TASK_STARTED, ev.TASK_PROMPT_CHANGED)
                              or (e.type == ev.TASK_FORKED and e.data.get("prompt_sha256"))))


def build_receipt(record: RunRecord, events: Sequence[Event],
                  prompts: Mapping[str, str] | None = None,
                  budget: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The receipt of a run from its row, every event of every stream, the text of its
    prompts (SHA-256 -> text, as the store keeps them) and its budget status as the ledger
    has it (``BudgetLedger.spend``; ``None`` for an agent without a budget)."""
    by_stream: dict[str, list[Event]] = {}
    for event in events:
        by_stream.setdefault(event.stream, []).append(event)
    waves = {e.data["task_id"]: e.data.get("wave") for e in by_stream.get(ev.RUN_STREAM, [])
             if e.type == ev.TASK_SCHEDULED}
    tasks = [_task_receipt(stream.removeprefix("task:"), sorted(items, key=lambda e: e.seq))
             | {"wave": waves.get(stream.removeprefix("task:"))}
             for stream, items in sorted(by_stream.items()) if stream.startswith("task:")]
    tasks.sort(key=lambda task: (task["wave"] or 0, _task_order(task["task_id"])))
    totals = {key: sum(task["totals"][key] for task in tasks)
              for key in ("model_calls", "tool_calls", "input_tokens", "output_tokens",
                          "cost_unknown_calls", "repeated_calls", *CACHE_TOKENS,
                          "image_tokens")}
    totals["cost_usd"] = round(sum(task["totals"]["cost_usd"] for task in tasks), 10)
    for key in CACHE_COSTS:
        totals[key] = round(sum(task["totals"][key] for task in tasks), 10)
    totals["retries"] = sum(len(task["retries"]) for task in tasks)
    totals["copied_calls"] = sum(task["totals"]["copied_calls"] for task in tasks)
    totals["policy_interventions"] = sum(task["totals"]["policy_interventions"]
                                         for task in tasks)
    by_subagent: dict[str, dict[str, Any]] = {}
    for task in tasks:
        who = by_subagent.setdefault(task["subagent"] or "(agent)", {
            "tasks": 0, "model_calls": 0, "input_tokens": 0, "output_tokens": 0,
            "cost_usd": 0.0, "cost_unknown_calls": 0})
        who["tasks"] += 1
        for key in ("model_calls", "input_tokens", "output_tokens", "cost_unknown_calls"):
            who[key] += task["totals"][key]
        who["cost_usd"] = round(who["cost_usd"] + task["totals"]["cost_usd"], 10)
    peer_calls = _peer_calls(events)
    totals["peer_cost_usd"] = round(sum(c["cost_usd"] or 0.0 for c in peer_calls), 10)
    reason = record.stop_reason
    why = STOP_REASON_TEXT.get(reason or "", "it has not stopped yet")
    asked = _open_questions(events)
    if record.status == "awaiting_input" and asked:
        why = "; ".join(f"waiting for an answer to the question {q!r} (id {i})"
                        for i, q in asked)
    elif record.status == "awaiting_input":
        why = "the session is waiting for the user's next message"
    elif record.status == "awaiting_approval":
        waiting = [waiting_text(a["name"], a["approval_id"]) for task in tasks
                   for a in task["approvals"] if a["outcome"] == "pending"]
        why = "; ".join(waiting) or "waiting for approval of a tool call"
    elif record.kind == "session" and reason == "end_turn":
        why = "the session was closed"
    elif record.status not in ev.TERMINAL_STATUSES and (tool_waits := [
            (task["task_id"], wait) for task in tasks for wait in task["signal_waits"]
            if wait["outcome"] == "waiting"]):
        why = "; ".join(tool_wait_text(record.id, task_id, wait) for task_id, wait in tool_waits)
    elif record.status not in ev.TERMINAL_STATUSES and (waits := _open_signal_waits(events)):
        why = "; ".join(
            f"the workflow is waiting for the signal {name!r}"
            + (f" until {fire_at}" if fire_at else "")
            + f" (send it: toren jobs signal {record.id} {name} --data JSON)"
            for name, fire_at in waits)
    if reason == "end_turn" and any(e.type == ev.WAVE_STARTED for e in events):
        why = "the workflow returned"
    if record.error and record.error.get("message"):
        why = f"{why}: {record.error['message']}"
    return {"run": record.to_json(), "status": record.status, "stop_reason": reason,
            "why": why, "tasks": tasks, "totals": totals, "by_subagent": by_subagent,
            "peer_calls": peer_calls, "prompts": dict(prompts or {}),
            "budget": dict(budget) if budget else None,
            "fork": next((e.data for e in by_stream.get(ev.RUN_STREAM, [])
                          if e.type == ev.RUN_FORKED), None)}


def _peer_calls(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The run's cross-agent calls: each links to the peer's run (whose own receipt has the
    details) with its status and cost; ``status`` is ``None`` while the caller waits."""
    calls: dict[str, dict[str, Any]] = {}
    for e in sorted(events, key=lambda e: (e.stream, e.seq)):
        if e.type == ev.PEER_CALL_STARTED:
            calls[e.data["run_id"]] = {
                "task_id": e.stream.removeprefix("task:"), "call_id": e.data["call_id"],
                "agent": e.data["peer"], "run_id": e.data["run_id"], "depth": e.data["depth"],
                "status": None, "cost_usd": None}
        elif e.type == ev.PEER_CALL_FINISHED and e.data["run_id"] in calls:
            calls[e.data["run_id"]] |= {"status": e.data["status"],
                                        "cost_usd": e.data["cost_usd"]}
    return list(calls.values())


def tool_wait_text(run_id: str, task_id: str, wait: Mapping[str, Any]) -> str:
    """What a run waits for while a tool of task ``task_id`` waits for a signal (the receipt's
    ``why``, ``toren jobs show``)."""
    return (f"a tool (call {wait['call_id']} of task {task_id}) is waiting for the signal "
            f"{wait['name']!r}" + (f" until {wait['deadline']}" if wait.get("deadline") else "")
            + f" (send it: toren jobs signal {run_id} {wait['name']} --data JSON)")


def _tool_wait(started: dict[str, Any], ended: dict[str, Any] | None) -> dict[str, Any]:
    """A receipt's entry for one wait of a tool for a signal (``toren.wait_for_signal``)."""
    outcome = ("waiting" if ended is None else "timed_out" if ended.get("timed_out")
               else "signal")
    return {"step": started["step"], "call_id": started["call_id"], "wait": started["wait"],
            "name": started["name"], "deadline": started.get("deadline"), "outcome": outcome,
            "signal": ended.get("signal") if ended else None}


def _open_signal_waits(events: Sequence[Event]) -> list[tuple[str, str | None]]:
    """The signal waits of a workflow that neither took a signal nor timed out: each wait's
    signal name and when its timeout fires (``None``: never)."""
    started = {e.data["wait"]: e.data for e in events if e.type == ev.SIGNAL_WAIT_STARTED}
    for e in events:
        if e.type in (ev.SIGNAL_CONSUMED, ev.SIGNAL_WAIT_TIMED_OUT):
            started.pop(e.data["wait"], None)
    return [(data["name"], data.get("fire_at")) for _wait, data in sorted(started.items())]


def _open_questions(events: Sequence[Event]) -> list[tuple[str, str]]:
    """``(question id, question)`` of each ``ask_user`` question asked and not settled."""
    asked = {e.data["question_id"]: e.data["question"] for e in events
             if e.type == ev.QUESTION_ASKED}
    for event in events:
        if event.type == ev.QUESTION_ANSWERED:
            asked.pop(event.data["question_id"], None)
    return list(asked.items())


def run_totals(events: Iterable[Event]) -> RunTotals:
    """A run's ``RunTotals`` from its events (any order): what its receipt's totals say of its
    model calls, steps and cost, without building the receipt. A fork's task copied the calls
    before its ``TaskForked`` (same stream, lower seq): they count as calls and steps, at no
    cost. The runs list shows these (``GET /runs``); ``RunReader.run_totals`` computes them in
    the store."""
    by_stream: dict[str, list[Event]] = {}
    for event in events:
        if event.type in (ev.MODEL_CALL_COMPLETED, ev.TASK_FORKED):
            by_stream.setdefault(event.stream, []).append(event)
    calls = steps = unknown = 0
    cost = 0.0
    for items in by_stream.values():
        fork_at = max((e.seq for e in items if e.type == ev.TASK_FORKED), default=0)
        for e in items:
            if e.type != ev.MODEL_CALL_COMPLETED:
                continue
            calls += 1
            steps += e.data.get("purpose", "step") == "step"
            if e.seq < fork_at:
                continue
            if e.data.get("cost_usd") is None:
                unknown += 1
            else:
                cost += e.data["cost_usd"]
    return RunTotals(calls, steps, cost, unknown)
