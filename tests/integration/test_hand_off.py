"""Hand-off: the messages a worker's own appends send (a run tick's task message, a task's
result for its run) are claimed for it in the append's transaction, so it works them without
a claim of its own and without waking other workers; what it has no room for is sent as
usual."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import psycopg

from toren.host.worker import Worker
from toren.seams.shapes import QueueMessage
from toren.testing import write_agent_dir

TOOLS = '''
def echo(text: str) -> str:
    """Say it back."""
    return text
'''


def record_starts(worker: Worker) -> tuple[list[QueueMessage], list[QueueMessage]]:
    """Record the messages the worker starts: those handed over by an append, and the rest
    (claimed). Recorded where the worker starts a handler rather than around ``Queue.claim``:
    the worker's first claim may already be under way when the test begins, with the
    unwrapped ``claim`` in hand, and it would see a message sent after that without the test
    knowing."""
    handed: list[QueueMessage] = []
    claimed: list[QueueMessage] = []
    handing: list[bool] = []
    hand, start = worker.handed, worker._start

    def record_handed(messages: Sequence[QueueMessage]) -> None:
        handing.append(True)
        try:
            hand(messages)
        finally:
            handing.pop()

    def record_start(message: QueueMessage) -> None:
        (handed if handing else claimed).append(message)
        start(message)

    worker.handed = record_handed  # type: ignore[method-assign]
    worker._start = record_start  # type: ignore[method-assign]
    return handed, claimed


async def test_a_workers_own_appends_hand_it_their_messages(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "handy", tools_py=TOOLS)])
    api = await make_runtime(dirs=[write_agent_dir(tmp_path, "handy", tools_py=TOOLS)],
                             workers=False)
    worker = runtime.workers.worker
    assert worker is not None
    handed, claimed = record_starts(worker)

    # a run created by another process (an API server): its first message (its task's) is
    # claimed; the task's result for its run is handed over, claimed once
    elsewhere = await api.start_run("handy", "go")
    record = await runtime.wait_for_run(elsewhere, timeout_s=60)
    assert record.status == "completed"
    assert [m.kind for m in claimed if m.run_id == elsewhere] == ["task"]
    assert [m.kind for m in handed if m.run_id == elsewhere] == ["run"]
    # a run created in the worker's own process: every message is handed over
    here = await runtime.start_run("handy", "go")
    record = await runtime.wait_for_run(here, timeout_s=60)
    assert record.status == "completed"
    assert [m.kind for m in claimed if m.run_id == here] == []
    assert [m.kind for m in handed if m.run_id == here] == ["task", "run"]
    assert all(m.attempts == 1 for m in handed)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cursor = await conn.execute("SELECT count(*) FROM toren_control.queue "
                                    "WHERE run_id = ANY(%s)", [[elsewhere, here]])
        assert await cursor.fetchone() == (0,)  # every message acknowledged


async def test_a_worker_without_room_gets_its_messages_by_claim(
        make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "full", tools_py=TOOLS)])
    worker = runtime.workers.worker
    assert worker is not None
    worker.room = lambda agent, holder, releasing: 0  # type: ignore[method-assign]
    handed, claimed = record_starts(worker)
    run_id = await runtime.start_run("full", "go")
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    assert record.status == "completed"
    assert handed == []
    assert sorted(m.kind for m in claimed if m.run_id == run_id) == ["run", "task"]
