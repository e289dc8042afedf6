"""Sessions: durable conversations with an agent, one turn at a time.

A session is a run of kind ``session`` whose single task (``main``) takes turns instead of
finishing. The run row's status is the turn token: ``awaiting_input`` while the user may
speak, ``running`` while the agent answers. A message is accepted only while the session
awaits input (``Store.session_input`` checks and takes the turn in one statement), so two
senders can never both start a turn. The transcript is the task's event log, so a session
survives restarts of every process: nothing about it lives in memory.

The functions here are pure: they turn a task stream's events into the transcript.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from toren.core import events as ev
from toren.core.events import Event

#: What a message to a session may be at most (characters); larger bodies are refused
#: before they reach the log.
MAX_MESSAGE_CHARS = 200_000


def _attachments(data: dict[str, Any]) -> dict[str, Any]:
    """The files shown with a message or tool result (``attachments``), when there are any."""
    return {"attachments": data["attachments"]} if data.get("attachments") else {}


def transcript(events: Iterable[Event]) -> dict[str, Any]:
    """The conversation recorded on a session's task stream: every user message, every
    assistant reply (with its tool calls), every tool result, in order, by turn; plus totals.

    Compaction does not shorten it: the log keeps every message, whatever the model was sent.
    """
    entries: list[dict[str, Any]] = []
    turn = 0
    turns_ended = 0
    cost = 0.0
    input_tokens = output_tokens = 0
    for event in events:
        data = event.data
        at = event.created_at.isoformat() if event.created_at else None
        if event.type == ev.USER_MESSAGE:
            turn = data["turn"]
            entries.append({"role": "user", "turn": turn, "text": data["text"], "at": at}
                           | _attachments(data))
        elif event.type == ev.MODEL_CALL_COMPLETED:
            usage = data["usage"]
            input_tokens += usage.get("input_tokens", 0)
            output_tokens += usage.get("output_tokens", 0)
            cost += data["cost_usd"] or 0.0
            if data.get("purpose") is None:
                entries.append({"role": "assistant", "turn": turn, "text": data["text"],
                                "tool_calls": data["tool_calls"], "at": at})
        elif (event.type == ev.POLICY_DECIDED and data["hook"] == "after_model_response"
              and data.get("text") is not None):
            # a policy redacted the reply: the transcript shows what the policy left of it
            for entry in reversed(entries):
                if entry["role"] == "assistant":
                    entry["text"] = data["text"]
                    break
        elif event.type == ev.TOOL_CALL_COMPLETED:
            entries.append({"role": "tool", "turn": turn, "call_id": data["call_id"],
                            "name": data["name"], "output": data["output"],
                            "is_error": data["is_error"], "at": at} | _attachments(data))
        elif event.type == ev.BACKGROUND_RUN_FINISHED:
            entries.append({"role": "background", "turn": turn, "agent": data["agent"],
                            "run_id": data["run_id"], "status": data["status"],
                            "text": ev.background_notice(data["agent"], data["run_id"],
                                                         data["status"], data.get("output"),
                                                         data.get("error")),
                            "at": at})
        elif event.type == ev.TURN_ENDED:
            turns_ended += 1
    return {"transcript": entries, "turns": turn, "turns_ended": turns_ended,
            "totals": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                       "cost_usd": round(cost, 10)}}
