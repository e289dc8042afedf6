"""Provider rate limits through the real task loop and Postgres: two fleets on one database take
from one budget and never past it, the calls that do not fit wait (parked, in line) and a wait
shows on the run's timeline; a cancelled run leaves the line at once."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from tests.durable import check_log
from toren.cli.top import render
from toren.core.rate_limits import RateLimit, RateLimits
from toren.default_plugins.scripted import ScriptedModel
from toren.seams.model import ModelRequest, ModelResponse, Usage
from toren.seams.store.rate_limits import BucketState
from toren.testing import write_agent_dir
from toren.testing.contracts.support import eventually

#: Parked calls keep their leases for the whole test: a lease of the tests' usual 1 s is lost
#: when one heartbeat comes late on a loaded machine, and the call would then leave the line.
SLOW_LEASE = 3.0


def quick() -> ScriptedModel:
    def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=f"done: {request.messages[-1].text}",
                             usage=Usage(input_tokens=40, output_tokens=8))

    return ScriptedModel("test/quick", script=answer)


def bucket(states: list[BucketState], name: str) -> BucketState | None:
    return next((state for state in states if state.name == name), None)


async def test_two_fleets_share_one_window_and_the_calls_past_it_wait_in_line(
        make_runtime, tmp_path: Path) -> None:
    limits = RateLimits({"test": RateLimit(requests=5)})  # 5 calls a minute, fleet-wide
    model = quick()
    first_dir = write_agent_dir(tmp_path / "a", "limited-a", model="test/quick")
    second_dir = write_agent_dir(tmp_path / "b", "limited-b", model="test/quick")
    first = await make_runtime(dirs=[first_dir], models={"quick": model}, rate_limits=limits,
                               lease_ttl_s=SLOW_LEASE)
    second = await make_runtime(dirs=[second_dir], models={"quick": model}, rate_limits=limits,
                                lease_ttl_s=SLOW_LEASE)
    runs = ([("limited-a", await first.start_run("limited-a", f"a{i}")) for i in range(6)]
            + [("limited-b", await second.start_run("limited-b", f"b{i}")) for i in range(6)])

    async def parked() -> BucketState | None:
        state = bucket(await first.store.rate_limit_state(), "test")
        return state if state is not None and state.waiting == 7 else None

    state = await eventually(parked, "seven calls parked behind the window")
    assert model.calls == 5  # never more than the window holds, across both fleets
    assert (state.requests, state.requests_limit) == (5, 5)
    records = {run_id: await (first if agent == "limited-a" else second).get_run(run_id)
               for agent, run_id in runs}
    done = [run_id for run_id, record in records.items() if record.status == "completed"]
    waiting = [(agent, run_id) for agent, run_id in runs if run_id not in done]
    assert len(done) == 5 and len(waiting) == 7

    # cancelling a parked run ends its wait: it leaves the line, the others keep their places
    agent, run_id = waiting[0]
    runtime = first if agent == "limited-a" else second
    await runtime.cancel_run(run_id)

    async def left() -> BucketState | None:
        state = bucket(await first.store.rate_limit_state(), "test")
        return state if state is not None and state.waiting == 6 else None

    await eventually(left, "the cancelled run's call to leave the line")
    assert model.calls == 5
    assert (await runtime.get_run(run_id)).status == "cancelled"
    for agent, run_id in waiting[1:]:
        record = await (first if agent == "limited-a" else second).get_run(run_id)
        assert record.status == "queued"  # parked before its first call


async def test_a_call_that_waited_says_so_on_its_timeline(make_runtime, tmp_path: Path) -> None:
    # one call a second (a window scaled down for the test), three runs at once
    limits = RateLimits({"test/quick": RateLimit(requests=60)}, window_s=1.0)
    model = quick()
    directory = write_agent_dir(tmp_path, "paced", model="test/quick")
    runtime = await make_runtime(dirs=[directory], models={"quick": model}, rate_limits=limits)
    run_ids = [await runtime.start_run("paced", f"go {i}") for i in range(3)]
    waits = []
    for run_id in run_ids:
        record = await runtime.wait_for_run(run_id, timeout_s=60)
        assert record.status == "completed", record.error
        events = await runtime.events(run_id)
        check_log(events)
        started = [e.data for e in events if e.type == "ModelCallStarted"]
        assert len(started) == 1
        waits.append(started[0].get("rate_limit_wait_s"))
        if waits[-1] is not None:
            assert waits[-1] > 0 and started[0]["rate_limited_by"] == "test/quick"
    assert model.calls == 3
    assert sum(wait is not None for wait in waits) == 2  # the first went at once
    state = bucket(await runtime.store.rate_limit_state(), "test/quick")
    assert state is not None and state.waits_total == 2 and state.waiting == 0
    assert state.wait_seconds_total > 0

    # what operators see: /fleet and toren top, /metrics
    snapshot = await runtime.fleet.snapshot()
    shown = next(b for b in snapshot["rate_limits"] if b["name"] == "test/quick")
    assert shown["limits"] == {"requests": 1, "input_tokens": None, "output_tokens": None}
    assert (shown["waits_total"], shown["waiting"], shown["paused_until"]) == (2, 0, None)
    console = Console(width=200, record=True)
    console.print(render(snapshot))
    assert "provider rate limits" in console.export_text()
    metrics = (await runtime.metrics.exposition()).decode()
    assert 'toren_rate_limit_waits_total{bucket="test/quick"} 2.0' in metrics
    assert 'toren_rate_limit_limit{bucket="test/quick",kind="requests"} 1.0' in metrics
    assert 'toren_rate_limit_paused{bucket="test/quick"} 0.0' in metrics


async def test_an_agent_s_own_limit_is_tighter_than_the_deployment_s(
        make_runtime, tmp_path: Path) -> None:
    limits = RateLimits({"test": RateLimit(requests=100)})
    model = quick()
    tight = write_agent_dir(tmp_path / "t", "tight", model="test/quick",
                            limits={"rate": {"test": {"requestsPerMinute": 2}}})
    loose = write_agent_dir(tmp_path / "l", "loose", model="test/quick")
    runtime = await make_runtime(dirs=[tight, loose], models={"quick": model},
                                 rate_limits=limits, lease_ttl_s=SLOW_LEASE)
    tight_runs = [await runtime.start_run("tight", f"t{i}") for i in range(4)]
    loose_runs = [await runtime.start_run("loose", f"l{i}") for i in range(4)]
    for run_id in loose_runs:  # the other agent is not held by the tight one's budget
        assert (await runtime.wait_for_run(run_id, timeout_s=30)).status == "completed"

    async def parked() -> BucketState | None:
        state = bucket(await runtime.store.rate_limit_state(), "agent:tight:test")
        return state if state is not None and state.waiting == 2 else None

    state = await eventually(parked, "two of the tight agent's calls parked")
    assert state.requests == 2
    statuses = [(await runtime.get_run(run_id)).status for run_id in tight_runs]
    # a run whose first call is parked has not started: it is still queued
    assert sorted(statuses) == ["completed", "completed", "queued", "queued"]
    deployment = bucket(await runtime.store.rate_limit_state(), "test")
    assert deployment is not None and deployment.requests == 6


async def test_without_a_limits_file_only_agents_with_their_own_limits_take_from_the_store(
        make_runtime, tmp_path: Path) -> None:
    model = quick()
    free = write_agent_dir(tmp_path / "f", "free", model="test/quick")
    own = write_agent_dir(tmp_path / "o", "own", model="test/quick",
                          limits={"rate": {"test": {"requestsPerMinute": 1}}})
    runtime = await make_runtime(dirs=[free, own], models={"quick": model},
                                 lease_ttl_s=SLOW_LEASE)
    assert runtime.settings.rate_limits is None
    for index in range(2):
        run_id = await runtime.start_run("free", f"go {index}")
        assert (await runtime.wait_for_run(run_id, timeout_s=30)).status == "completed"
    # the free agent's calls reached no rate-limit store: not a bucket, not a reservation
    assert await runtime.store.rate_limit_state() == []
    for index in range(2):
        await runtime.start_run("own", f"go {index}")

    async def parked() -> BucketState | None:
        state = bucket(await runtime.store.rate_limit_state(), "agent:own:test")
        return state if state is not None and state.waiting == 1 else None

    await eventually(parked, "the own agent's second call parked")
    assert [b.name for b in await runtime.store.rate_limit_state()] == ["agent:own:test"]
    assert model.calls == 3


async def test_calls_parked_for_the_rate_limit_are_served_by_run_priority(
        make_runtime, tmp_path: Path) -> None:
    order: list[str] = []

    def answer(request: ModelRequest) -> ModelResponse:
        order.append(request.messages[-1].text)
        return ModelResponse(text="done", usage=Usage(input_tokens=10, output_tokens=2))

    model = ScriptedModel("test/quick", script=answer)
    # one call a second: the first run's call takes the window, the rest park in line
    limits = RateLimits({"test": RateLimit(requests=60)}, window_s=1.0)
    directory = write_agent_dir(tmp_path, "ranked", model="test/quick")
    runtime = await make_runtime(dirs=[directory], models={"quick": model},
                                 rate_limits=limits, lease_ttl_s=SLOW_LEASE)
    first = await runtime.start_run("ranked", "first")
    assert (await runtime.wait_for_run(first, timeout_s=30)).status == "completed"
    runs = [await runtime.start_run("ranked", name, priority=priority)
            for name, priority in (("low", 0), ("high", 5), ("mid", 1))]

    async def all_parked() -> BucketState | None:
        state = bucket(await runtime.store.rate_limit_state(), "test")
        return state if state is not None and state.waiting + len(order) >= 4 else None

    await eventually(all_parked, "the three runs' calls in line")
    for run_id in runs:
        assert (await runtime.wait_for_run(run_id, timeout_s=60)).status == "completed"
    # one call a window: at most one of the three went at once (if the window had freed);
    # the two after it were parked together and were served by priority, higher first
    rank = {"high": 0, "mid": 1, "low": 2}
    assert sorted(order[1:]) == ["high", "low", "mid"]
    assert order[2:] == sorted(order[2:], key=rank.__getitem__)
    if order[1] == "high":  # the usual case: all three parked behind the first run's call
        assert order[1:] == ["high", "mid", "low"]
