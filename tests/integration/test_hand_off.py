"""Hand-off: the messages a worker's own appends send (a run tick's task message, a task's
result for its run) are claimed for it in the append's transaction, so it works them without
a claim of its own and without waking other workers; what it has no room for is sent as
usual."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import psycopg

from toren.seams.shapes import QueueMessage
from toren.testing import write_agent_dir

TOOLS = '''
def echo(text: str) -> str:
    """Say it back."""
    return text
'''


async def test_a_workers_own_appends_hand_it_their_messages(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "handy", tools_py=TOOLS)])
    api = await make_runtime(dirs=[write_agent_dir(tmp_path, "handy", tools_py=TOOLS)],
                             workers=False)
    worker = runtime.workers.worker
    assert worker is not None
    handed: list[QueueMessage] = []
    claimed: list[QueueMessage] = []
    hand, claim = worker.handed, runtime.queue.claim

    def record_handed(messages: Sequence[QueueMessage]) -> None:
        handed.extend(messages)
        hand(messages)

    async def record_claimed(*args, **kwargs):  # type: ignore[no-untyped-def]
        got, dead = await claim(*args, **kwargs)
        claimed.extend(got)
        return got, dead

    worker.handed = record_handed  # type: ignore[method-assign]
    runtime.queue.claim = record_claimed  # type: ignore[method-assign]

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
    handed: list[QueueMessage] = []
    claimed: list[QueueMessage] = []
    claim = worker.queue.claim

    async def record_claimed(*args, **kwargs):  # type: ignore[no-untyped-def]
        got, dead = await claim(*args, **kwargs)
        claimed.extend(got)
        return got, dead

    worker.room = lambda agent, holder, releasing: 0  # type: ignore[method-assign]
    worker.handed = handed.extend  # type: ignore[method-assign]
    worker.queue.claim = record_claimed  # type: ignore[method-assign]
    run_id = await runtime.start_run("full", "go")
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    assert record.status == "completed"
    assert handed == []
    assert sorted(m.kind for m in claimed if m.run_id == run_id) == ["run", "task"]
