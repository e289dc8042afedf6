"""Faults below Toren, through a user-space TCP proxy in front of Postgres (``LinkProxy``): a
worker cut off from the database for longer than its lease, and a database slowed by added
round-trip latency. The invariants are checked from evidence kept outside the database (the
tools' effects file, the offline model's call log, the workers' own log lines) against the
event log."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.chaos.effects import executions, recording_tools_source
from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.chaos.proxy import LinkProxy
from tests.conftest import wait_until
from tests.durable import (
    check_log,
    model_call_violations,
    read_call_log,
    tool_execution_violations,
)
from toren.testing import write_agent_dir

T = TypeVar("T")
AGENT = "cutoff"
SCHEMA = f"agent_{AGENT}"


class ProxyThread:
    """A ``LinkProxy`` served by an event loop of its own in a thread, so that a synchronous
    test can send ``toren worker`` processes through it while it waits on them."""

    def __init__(self, upstream_url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="link-proxy")
        self._thread.start()
        self.proxy = LinkProxy(upstream_url)
        self._call(self.proxy.start())

    @property
    def url(self) -> str:
        return self.proxy.url

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    def cut(self) -> None:
        self._loop.call_soon_threadsafe(self.proxy.cut)

    def heal(self) -> None:
        self._loop.call_soon_threadsafe(self.proxy.heal)

    def close(self) -> None:
        self._call(self.proxy.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def link(database_url: str) -> Iterator[ProxyThread]:
    proxy = ProxyThread(database_url)
    yield proxy
    proxy.close()


def task_epochs(url: str, run_id: str) -> list[int]:
    """The lease epoch of each event of the run's task stream, in sequence order."""
    return [e.data["epoch"] for e in run_events(url, SCHEMA, run_id)
            if e.stream == "task:main" and "epoch" in e.data]


# -- a partition longer than the lease -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_cut_off_past_its_lease_is_fenced_when_the_link_heals(
        start_toren, toren_cli, database_url: str, link: ProxyThread, tmp_path: Path) -> None:
    n_tools = 6
    effects = tmp_path / "effects.log"
    calls = tmp_path / "model-calls.jsonl"
    directory = write_agent_dir(tmp_path, AGENT, tools_py=recording_tools_source(
        [f"step_{i:02d}" for i in range(n_tools)], effects))
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.5",
           "TOREN_SCRIPTED_CALL_LOG": str(calls), "TOREN_LEASE_TTL": "2",
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_LOG_LEVEL": "INFO",
           "COLUMNS": "1000"}  # one log record, one line
    run_id = create_run(toren_cli, directory, AGENT, "cut me off", env)
    cut_off = start_worker(start_toren, directory, env | {"DATABASE_URL": link.url})

    def calls_done() -> int:
        return sum(e.type == "ModelCallCompleted"
                   for e in run_events(database_url, SCHEMA, run_id))

    assert wait_until(lambda: calls_done() >= 2, 30)
    # the link goes dark both ways, mid-run: no FIN, no RST, the worker's sockets stay open
    link.cut()
    cut_at = time.monotonic()
    try:
        other = start_worker(start_toren, directory, env)
        # the lease runs out by the database's clock and the other worker takes the task over
        assert wait_until(lambda: max(task_epochs(database_url, run_id)) >= 2, 30)
        took_over_s = time.monotonic() - cut_at
        # both live now: the cut-off worker still holds its open statements
        assert cut_off.proc.poll() is None
    finally:
        link.heal()
    healed_at = time.monotonic()
    # what the cut-off worker sent meanwhile reaches the database now: its append is refused
    lost = re.compile(rf"lost the lease on stream task:main of run {run_id} \(epoch 1\); "
                      r"it is now held by \S+ at epoch (\d+)")
    assert wait_until(lambda: lost.search(cut_off.stderr) is not None, 30), cut_off.stderr
    noticed_s = time.monotonic() - healed_at
    match = lost.search(cut_off.stderr)
    assert match is not None and int(match.group(1)) >= 2
    assert wait_until(lambda: run_row(database_url, SCHEMA, run_id)[0] == "completed", 60)
    assert cut_off.proc.poll() is None, "losing a lease must not take the worker down"
    cut_off.stop()
    other.stop()
    print(f"taken over {took_over_s:.1f}s after the cut (lease TTL 2s); the cut-off worker "
          f"learnt it had lost the lease {noticed_s:.1f}s after the link healed")

    events = run_events(database_url, SCHEMA, run_id)
    check_log(events)  # each stream's seqs exactly 1..n: nothing recorded twice or lost
    task = [e for e in events if e.stream == "task:main"]
    epochs = [e.data["epoch"] for e in task if "epoch" in e.data]
    # the late appends of epoch 1 were refused: epochs only grow along the stream
    assert epochs == sorted(epochs), f"a stale epoch appended after the takeover: {epochs}"
    assert epochs[0] == 1 and max(epochs) >= 2
    kinds = Counter(e.type for e in events)
    assert (kinds["TaskStarted"], kinds["TaskFinished"], kinds["RunFinished"]) == (1, 1, 1)
    steps = [e.data["step"] for e in task if e.type == "ModelCallCompleted"]
    assert steps == list(range(1, n_tools + 2))
    assert sorted(e.data["name"] for e in task if e.type == "ToolCallCompleted") == [
        f"step_{i:02d}" for i in range(n_tools)]

    # Tools: a call runs at most once per lease holder, and again only if its result was
    # not recorded under the epoch that started it (tool_execution_violations). Only the call
    # in flight at the cut can have run in both workers.
    done = executions(effects)
    assert len(done) == len(set(done)), f"a worker ran the same tool call twice: {done}"
    assert {pid for _key, pid in done} <= {cut_off.proc.pid, other.proc.pid}
    per_key = Counter(key for key, _pid in done)
    assert len(per_key) == n_tools
    assert sum(count - 1 for count in per_key.values()) <= 1, per_key
    assert tool_execution_violations(events, [key for key, _pid in done]) == []
    # Model: each call made inside an announced attempt whose answer was not yet recorded,
    # and at most the one in flight at the cut paid twice (its answer's append was refused)
    made = read_call_log(calls)
    assert model_call_violations(events, made) == []
    assert len(steps) <= len(made) <= len(steps) + 1
    assert sum(bool(e.data.get("repeated")) for e in task
               if e.type == "ModelCallCompleted") == len(made) - len(steps)

