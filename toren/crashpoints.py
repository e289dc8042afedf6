"""Named crash points: a worker that kills itself at a chosen moment, for reliability tests.

``TOREN_CRASH_AT=after_model_response`` (several: comma-separated; ``point@N`` for the N-th
time the point is reached) makes the process SIGKILL itself there: no cleanup, no flush, no
release, exactly as a power cut or the OOM killer would. With ``TOREN_CRASH_ONCE=FILE`` it
does so only if FILE does not exist yet, and creates it first, so that a restarted worker with
the same environment gets past the point. Never set these in production.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from toren.errors import ConfigError

#: Every point, and where it is in the durable loop.
POINTS = {
    "after_model_response": "a model answered; its response is not appended yet",
    "after_append": "an append committed; the task's message is not acknowledged yet",
    "after_tool": "tool calls ran; their results are not appended yet",
    "mid_compaction": "the summary of a compaction came back; it is not appended yet",
    "before_output_check": "a final answer is appended; it is not checked against output: "
                           "yet",
    "mid_wave_dispatch": "a workflow started a wave; its tasks are not scheduled yet",
    "after_approval": "a worker read an approval's decision; it is not recorded (nor the "
                      "approved call run) yet",
    "after_memory_write": "a memory tool call wrote to the store; its result is not recorded "
                          "yet",
    "after_question_answer": "a worker read a question's answer (or expiry); it is not "
                             "recorded yet",
    "after_child_run": "a peer call or background run created its run; the task has not "
                       "recorded it yet",
    "after_policy_decided": "the policies' decisions on a model response and its tool calls "
                            "are appended; no tool call of it has run yet",
    "after_channel_files_stored": "a chat message's files are stored; its turn is not started "
                                  "yet",
    "after_signal_consumed": "a workflow took a signal (SignalConsumed committed with what it "
                             "did next); the run tick is not acknowledged yet",
    "after_tool_wait_ended": "a tool's wait for a signal ended (ToolWaitEnded committed); "
                             "the tool has not run again yet",
    "after_webhook_sent": "a webhook's receiver answered; the attempt is not recorded yet",
}
_reached: Counter[str] = Counter()


def parse(value: str | None) -> dict[str, int]:
    """``TOREN_CRASH_AT`` as point -> the time it is reached that crashes (1 = the first)."""
    points: dict[str, int] = {}
    for item in (value or "").split(","):
        if not item.strip():
            continue
        name, _, nth = item.strip().partition("@")
        if name not in POINTS:
            raise ConfigError(f"TOREN_CRASH_AT names an unknown crash point {name!r}; "
                              f"points: {', '.join(POINTS)}")
        if nth and (not nth.isdigit() or int(nth) < 1):
            raise ConfigError(f"TOREN_CRASH_AT={value!r}: {item.strip()!r} needs a count of "
                              "at least 1 after '@'")
        points[name] = int(nth or 1)
    return points


def reach(crash_at: Mapping[str, int], once_file: Path | None, name: str) -> None:
    """Called at each point; kills this process if ``crash_at`` says so."""
    if name not in crash_at:
        return
    _reached[name] += 1
    if _reached[name] != crash_at[name]:
        return
    if once_file is not None:
        try:
            os.close(os.open(once_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)
