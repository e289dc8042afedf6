"""``RunReader.get_run_and_events``: what an event stream reads when a notice says a run has
new events, one round trip on the Postgres store, the same answer as its two reads."""

from __future__ import annotations

from pathlib import Path

from toren.seams.store import RunReader
from toren.testing import write_agent_dir


async def test_the_row_and_the_events_after_a_position_in_one_read(make_runtime,
                                                                    tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "reader")])
    store = runtime.store
    run_id = await runtime.start_run("reader", "hello")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    every = await store.load_events("reader", run_id)
    assert every[-1].type == "RunFinished"

    found, events = await store.get_run_and_events("reader", run_id)
    assert found is not None and found.id == run_id and found.status == "completed"
    assert [(e.stream, e.seq) for e in events] == [(e.stream, e.seq) for e in every]

    # after a position: only what a reader at it has not seen, the run's end among them
    position = {"run": 1}
    found, events = await store.get_run_and_events("reader", run_id, position)
    assert found is not None and found.status == "completed"
    assert [(e.stream, e.seq) for e in events] == [
        (e.stream, e.seq) for e in every if not (e.stream == "run" and e.seq <= 1)]
    # the same answer as the two reads a store without the method makes (the default)
    default = await RunReader.get_run_and_events(store, "reader", run_id, position)
    assert default[0] == found and default[1] == events

    latest = {e.stream: e.seq for e in every}
    assert await store.get_run_and_events("reader", run_id, latest) == (found, [])


async def test_a_run_that_does_not_exist_reads_as_none(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "reader")], workers=False)
    missing = "00000000-0000-4000-8000-000000000000"
    assert await runtime.store.get_run_and_events("reader", missing) == (None, [])
    assert await RunReader.get_run_and_events(runtime.store, "reader", missing) == (None, [])
    # the connection it used still works (a failed pipeline would have closed it)
    assert await runtime.store.get_run(missing, "reader") is None


async def test_several_runs_rows_and_events_after_their_positions_in_one_read(
        make_runtime, tmp_path: Path) -> None:
    """``get_runs_and_events``: what the stream hub reads for the runs a batch of notices
    announced; each run as ``get_run_and_events`` reads it, a missing run as ``None``."""
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "reader")])
    store = runtime.store
    first = await runtime.start_run("reader", "hello")
    second = await runtime.start_run("reader", "again")
    for run_id in (first, second):
        assert (await runtime.wait_for_run(run_id, timeout_s=30)).status == "completed"
    missing = "00000000-0000-4000-8000-000000000000"
    positions = {first: {"run": 1}, second: {}, missing: {}}

    found = await store.get_runs_and_events("reader", positions)
    assert set(found) == {first, second, missing}
    assert found[missing] == (None, [])
    for run_id, after in positions.items():
        assert found[run_id] == await store.get_run_and_events("reader", run_id, after)
    assert next(e.seq for e in found[first][1] if e.stream == "run") == 2
    assert found[second][1] == await store.load_events("reader", second)
    # the same answer as the default, one run after the other
    assert await RunReader.get_runs_and_events(store, "reader", positions) == found
    assert await store.get_runs_and_events("reader", {}) == {}
    # a run id in another spelling is answered under the caller's spelling, its position too
    shouted = first.upper()
    assert await store.get_runs_and_events("reader", {shouted: {"run": 1}}) == {
        shouted: found[first]}
