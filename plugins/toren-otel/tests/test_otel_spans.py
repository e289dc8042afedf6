"""The otel tracer in a real runtime on real Postgres, spans caught by the SDK's in-memory
exporter: one trace per run, GenAI attributes on model calls, tool calls, the run's root."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from toren_otel.tracer import OtelTracer

from toren.config import Settings
from toren.host.runtime import Runtime
from toren.seams.drivers import driver_class
from toren.seams.telemetry import Tracer, trace_ids
from toren.testing import write_agent_dir

TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: first
        b: second
    """
    return a + b
'''


@pytest.fixture
async def traced(database_url: str, tmp_path: Path
                 ) -> AsyncIterator[Callable[..., Any]]:
    """``await traced(agent_dir)`` -> (runtime, exporter): a started runtime whose tracer is
    the otel driver writing to an in-memory exporter."""
    made: list[Runtime] = []

    async def make(directory: Path, **overrides: Any) -> tuple[Runtime, InMemorySpanExporter]:
        settings = Settings(database_url=database_url, home=tmp_path / "home",
                            load_plugins=(), lease_ttl_s=1.0, poll_interval_s=0.2, **overrides)
        runtime = Runtime([directory], settings=settings)
        exporter = InMemorySpanExporter()
        runtime.tracer = OtelTracer(settings, processor=SimpleSpanProcessor(exporter))
        made.append(runtime)
        await runtime.start()
        return runtime, exporter

    yield make
    for runtime in made:
        await runtime.stop()


def by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


async def wait_for_root(exporter: InMemorySpanExporter) -> tuple[ReadableSpan, ...]:
    import asyncio

    for _ in range(100):  # the root span ends after one read of the run's row
        spans = exporter.get_finished_spans()
        if by_name(spans, "toren.run "):
            return spans
        await asyncio.sleep(0.05)
    raise AssertionError(f"no root span among {[s.name for s in spans]}")


async def test_a_run_is_one_trace_with_model_tool_and_task_spans(traced, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "calc", tools_py=TOOLS, model="toren/scripted")
    runtime, exporter = await traced(directory)
    run_id = await runtime.start_run("calc", "add please")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    spans = await wait_for_root(exporter)

    trace_id, root_id = trace_ids(run_id)
    assert trace_id == uuid.UUID(run_id).int
    assert {span.context.trace_id for span in spans} == {trace_id}
    [root] = by_name(spans, "toren.run ")
    assert root.name == "toren.run calc"
    assert root.context.span_id == root_id and root.parent is None
    assert root.attributes["toren.status"] == "completed"
    assert root.start_time < min(span.start_time for span in spans if span is not root)
    # from the RunCreated the worker loaded with the run stream (the run row's own time)
    assert root.start_time == int(record.created_at.timestamp() * 1e9)

    tasks = by_name(spans, "toren.task ")
    assert tasks and all(span.parent.span_id == root_id for span in tasks)
    assert {span.attributes["toren.task_id"] for span in tasks} == {"main"}
    assert all(span.attributes["toren.run_id"] == run_id for span in tasks)
    task_ids = {span.context.span_id for span in tasks}

    chats = by_name(spans, "chat ")
    events = await runtime.events(run_id)
    completed = [e for e in events if e.type == "ModelCallCompleted"]
    assert len(chats) == len(completed) >= 2
    for span, event in zip(sorted(chats, key=lambda s: s.attributes["toren.step"]),
                           completed, strict=True):
        assert span.parent.span_id in task_ids
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.request.model"] == event.data["model"]
        assert span.attributes["gen_ai.usage.input_tokens"] == event.data["usage"][
            "input_tokens"]
        assert span.attributes["gen_ai.usage.output_tokens"] == event.data["usage"][
            "output_tokens"]
        assert span.attributes["toren.step"] == event.data["step"]
        assert span.end_time - span.start_time == pytest.approx(
            event.data["latency_ms"] * 1e6, rel=0.01, abs=2e6)

    [tool] = by_name(spans, "execute_tool ")
    assert tool.name == "execute_tool add"
    assert tool.attributes["gen_ai.tool.name"] == "add"
    assert tool.parent.span_id in task_ids
    assert by_name(spans, "toren.queue_wait")
    # nothing of the run's input or the model's text is in any attribute
    for span in spans:
        assert "add please" not in repr(dict(span.attributes or {}))


async def test_the_cost_of_a_call_is_an_attribute(traced, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_SCRIPTED_COST_USD", "0.25")
    directory = write_agent_dir(tmp_path, "paid", model="toren/scripted")
    runtime, exporter = await traced(directory)
    run_id = await runtime.start_run("paid", "hi")
    await runtime.wait_for_run(run_id, timeout_s=30)
    spans = await wait_for_root(exporter)
    assert [span.attributes["toren.cost_usd"] for span in by_name(spans, "chat ")] == [0.25]


def test_the_driver_is_found_by_name_and_tracing_is_off_without_an_endpoint() -> None:
    assert driver_class("tracer", "otel") is OtelTracer
    assert Settings.from_env({}).tracer is None
    assert Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}).tracer == "otel"
    assert Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                              "TOREN_TRACER": "none"}).tracer is None
    assert Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                              "OTEL_SDK_DISABLED": "true"}).tracer is None
    assert Tracer.enabled is False and OtelTracer.enabled is True


def test_a_missing_tracer_driver_is_a_warning_unless_asked_for_by_name(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from toren.errors import DriverNotFound

    monkeypatch.delenv("TOREN_TRACER", raising=False)
    # what OTEL_EXPORTER_OTLP_ENDPOINT does without toren-otel: a driver that is not there
    runtime = Runtime(agents=[], settings=Settings(load_plugins=(), tracer="jaeger"))
    assert type(runtime.tracer) is Tracer
    assert "toren-otel is not installed" in caplog.text
    monkeypatch.setenv("TOREN_TRACER", "jaeger")
    with pytest.raises(DriverNotFound, match="no tracer driver named 'jaeger'"):
        Runtime(agents=[], settings=Settings(load_plugins=(), tracer="jaeger"))


CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


async def test_a_run_started_with_a_traceparent_joins_the_callers_trace(
        traced, tmp_path: Path) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from toren.server.app import create_app

    directory = write_agent_dir(tmp_path, "calc", tools_py=TOOLS, model="toren/scripted")
    runtime, exporter = await traced(directory)
    async with TestClient(TestServer(create_app(runtime, require_keys=False))) as client:
        response = await client.post(
            "/runs", json={"agent": "calc", "input": "add please"},
            headers={"traceparent": f"00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-01"})
        assert response.status == 201, await response.text()
        run_id = (await response.json())["id"]
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    spans = await wait_for_root(exporter)
    # kept with the run: every worker that loads it (any stream) joins the caller's trace
    assert {span.context.trace_id for span in spans} == {int(CALLER_TRACE, 16)}
    [root] = by_name(spans, "toren.run ")
    assert root.parent.span_id == int(CALLER_SPAN, 16)
    assert root.context.span_id == trace_ids(run_id)[1]
    worked = by_name(spans, "toren.task ") + by_name(spans, "toren.queue_wait")
    assert worked and {span.parent.span_id for span in worked} == {root.context.span_id}
    task_ids = {span.context.span_id for span in by_name(spans, "toren.task ")}
    calls = by_name(spans, "chat ") + by_name(spans, "execute_tool ")
    assert calls and all(span.parent.span_id in task_ids for span in calls)
    events = await runtime.events(run_id)
    assert events[0].data["traceparent"] == f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


async def test_an_invalid_traceparent_is_ignored(traced, tmp_path: Path) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from toren.server.app import create_app

    directory = write_agent_dir(tmp_path, "chat", model="toren/scripted")
    runtime, _exporter = await traced(directory)
    async with TestClient(TestServer(create_app(runtime, require_keys=False))) as client:
        response = await client.post(
            "/sessions", json={"agent": "chat"},
            headers={"traceparent": f"00-{'0' * 32}-{CALLER_SPAN}-01"})
        assert response.status == 201, await response.text()
        session_id = (await response.json())["id"]
    events = await runtime.events(session_id)
    assert "traceparent" not in events[0].data


async def test_a_peer_run_joins_its_callers_trace(traced, tmp_path: Path) -> None:
    desk_dir = write_agent_dir(tmp_path / "fleet-a", "desk", peers=["writer"],
                               model="toren/scripted")
    writer_dir = write_agent_dir(tmp_path / "fleet-b", "writer", tools_py=TOOLS,
                                 model="toren/scripted", acceptsFrom=["desk"])
    writer_fleet, writer_spans = await traced(writer_dir)
    desk_fleet, desk_spans = await traced(desk_dir)
    run_id = await desk_fleet.start_run("desk", "tides")
    done = await desk_fleet.wait_for_run(run_id, timeout_s=60)
    assert done.status == "completed", done
    (child,) = await desk_fleet.children(run_id)
    await writer_fleet.wait_for_run(child.id, timeout_s=30)
    caller = await wait_for_root(desk_spans)
    called = await wait_for_root(writer_spans)
    # the peer's spans (another fleet, another process in production) are in the caller's
    # trace, its root under the caller's task span that made the call
    trace_id = trace_ids(run_id)[0]
    assert {span.context.trace_id for span in called} == {trace_id}
    [child_root] = by_name(called, "toren.run writer")
    assert child_root.context.span_id == trace_ids(child.id)[1]
    caller_tasks = {span.context.span_id for span in by_name(caller, "toren.task ")}
    assert child_root.parent.span_id in caller_tasks
