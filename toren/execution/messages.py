"""The queue messages that drive execution: what wakes a task, a run, or a durable timer.

Made by execution (and by the host when it starts a run or takes a session's message); read by
the worker, which hands each to ``work_task`` or ``tick_run`` by its ``kind``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from toren.core.attachments import Attachment
from toren.seams.shapes import OutgoingMessage

#: The task of a single-task run (and of a session): the agent itself.
MAIN_TASK = "main"


def task_message(task_id: str, subagent: str | None, task_input: Any,
                 delay_s: float = 0.0, *, output: dict[str, Any] | None = None,
                 attachments: tuple[Attachment, ...] = ()) -> OutgoingMessage:
    """The queue message that makes a worker work on a task; ``output``: the schema a
    workflow gave the task, ``attachments``: the files shown with its input (``TaskStarted``
    records both, so later messages need not carry them)."""
    payload = {"task_id": task_id, "subagent": subagent, "input": task_input,
               "key": f"task:{task_id}"}
    if output is not None:
        payload["output"] = output
    if attachments:
        payload["attachments"] = msgspec.to_builtins(attachments)
    return OutgoingMessage("task", payload, delay_s)


def run_tick(reason: str) -> OutgoingMessage:
    """The queue message that makes the orchestrator look at a run."""
    return OutgoingMessage("run", {"reason": reason})


def timer_message(number: int, seconds: float) -> OutgoingMessage:
    """The run tick that fires durable timer ``number`` after ``seconds``."""
    return OutgoingMessage("run", {"reason": f"timer {number}", "timer": number,
                                   "key": f"timer:{number}"}, seconds)


def signal_timeout_message(wait: int, seconds: float) -> OutgoingMessage:
    """The run tick that ends signal wait ``wait`` (``ctx.wait_for_signal(..., timeout=)``)
    after ``seconds``, unless a signal came first."""
    return OutgoingMessage("run", {"reason": f"signal wait {wait}", "signal_wait": wait,
                                   "key": f"signal_wait:{wait}"}, max(0.0, seconds))


def signal_tick(name: str) -> OutgoingMessage:
    """The run tick sent with a signal, in the same transaction: it wakes a workflow that
    waits for it."""
    return OutgoingMessage("run", {"reason": "signal", "signal": name})
