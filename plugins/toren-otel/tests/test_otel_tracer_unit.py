"""The otel tracer on its own (no database): spans built finished keep their parents, status
and events, and the sampler's decision for a message covers everything made inside it."""

from __future__ import annotations

import random
import uuid

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from toren_otel.tracer import OtelTracer

from toren.config import Settings
from toren.core.events import NewEvent
from toren.seams.shapes import QueueMessage
from toren.seams.telemetry import parse_traceparent, trace_ids

RUN_ID = "0e73dd0e-4db7-4cfa-a70f-51bfbd484e69"
MESSAGE = QueueMessage(1, "calc", RUN_ID, "task", {"task_id": "main"}, 2, 0.25)
MODEL = NewEvent("ModelCallCompleted", {
    "model": "anthropic/claude-sonnet-4-6", "step": 1, "latency_ms": 40.0, "cost_usd": 0.01,
    "usage": {"input_tokens": 100, "output_tokens": 20}, "stop_reason": "tool_use"})
TOOL = NewEvent("ToolCallCompleted", {"name": "add", "call_id": "c1", "step": 1,
                                      "duration_ms": 3.0, "is_error": True,
                                      "error_kind": "tool_error"})
RETRY = NewEvent("RetryScheduled", {"attempt": 1, "delay_s": 0.5, "error": {"code": "429"}})


def make() -> tuple[OtelTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return OtelTracer(Settings(), processor=SimpleSpanProcessor(exporter)), exporter


def test_spans_made_inside_a_message_are_its_children() -> None:
    tracer, exporter = make()
    with tracer.handling(MESSAGE, "w-1"):
        tracer.appended("calc", RUN_ID, "task:main", [MODEL, TOOL, RETRY], 0.002)
        tracer.took_over("calc", RUN_ID, "task:main", 2, "w-1")
    tracer.run_finished("calc", RUN_ID, "failed", None)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    trace_id, root_id = trace_ids(RUN_ID)
    assert {span.context.trace_id for span in spans.values()} == {trace_id}
    task = spans["toren.task main"]
    assert task.parent.span_id == root_id and task.attributes["toren.message.attempts"] == 2
    assert [event.name for event in task.events] == ["toren.retry_scheduled",
                                                     "toren.lease_takeover"]
    wait = spans["toren.queue_wait"]
    assert wait.parent.span_id == root_id
    assert wait.end_time - wait.start_time == pytest.approx(0.25e9, rel=0.01)
    chat = spans["chat anthropic/claude-sonnet-4-6"]
    assert chat.parent.span_id == task.context.span_id
    assert chat.attributes["gen_ai.provider.name"] == "anthropic"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 100
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert chat.end_time - chat.start_time == pytest.approx(40e6, rel=0.01)
    tool = spans["execute_tool add"]
    assert tool.parent.span_id == task.context.span_id
    assert not tool.status.is_ok and tool.status.description == "tool_error"
    assert spans["toren.lease_takeover"].attributes["toren.lease.epoch"] == 2
    root = spans["toren.run calc"]
    assert root.context.span_id == root_id and root.parent is None
    assert not root.status.is_ok
    tracer.shutdown()


def test_an_exception_in_a_message_marks_its_span() -> None:
    tracer, exporter = make()
    with pytest.raises(RuntimeError), tracer.handling(MESSAGE, "w-1"):
        raise RuntimeError("boom")
    [task] = [s for s in exporter.get_finished_spans() if s.name.startswith("toren.task")]
    assert task.status.description == "RuntimeError"
    [event] = task.events
    assert event.name == "exception" and event.attributes["exception.message"] == "boom"


def test_an_append_outside_a_message_parents_to_the_run_root() -> None:
    tracer, exporter = make()
    tracer.appended("calc", RUN_ID, "task:main", [TOOL], 0.001)
    [tool] = exporter.get_finished_spans()
    assert (tool.context.trace_id, tool.parent.span_id) == trace_ids(RUN_ID)


def test_a_sampled_out_message_makes_no_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    tracer, exporter = make()
    with tracer.handling(MESSAGE, "w-1"):
        tracer.appended("calc", RUN_ID, "task:main", [MODEL, TOOL, RETRY], 0.002)
        tracer.took_over("calc", RUN_ID, "task:main", 2, "w-1")
    tracer.run_finished("calc", RUN_ID, "completed", None)
    assert exporter.get_finished_spans() == ()


def test_traceparents_are_validated_as_w3c_says() -> None:
    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert parse_traceparent(f" {good.upper()} ") == good
    for bad in (None, "", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                f"00-{'0' * 32}-00f067aa0ba902b7-01",
                f"00-4bf92f3577b34da6a3ce929d0e0e4736-{'0' * 16}-01",
                "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", good + "-x"):
        assert parse_traceparent(bad) is None, bad


def test_a_joined_message_moves_its_spans_to_the_callers_trace() -> None:
    tracer, exporter = make()
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with tracer.handling(MESSAGE, "w-1"):
        tracer.joined(RUN_ID, caller)
        tracer.appended("calc", RUN_ID, "task:main", [MODEL], 0.002)
    tracer.run_finished("calc", RUN_ID, "completed", None, caller)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert {span.context.trace_id for span in spans.values()} == {
        0x4bf92f3577b34da6a3ce929d0e0e4736}
    root = spans["toren.run calc"]
    assert root.parent.span_id == 0x00f067aa0ba902b7
    assert spans["toren.task main"].parent.span_id == root.context.span_id
    assert spans["toren.queue_wait"].parent.span_id == root.context.span_id
    assert spans["chat anthropic/claude-sonnet-4-6"].parent.span_id == spans[
        "toren.task main"].context.span_id


def test_a_ratio_sampler_keeps_or_drops_whole_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
    tracer, exporter = make()
    run_ids = [str(uuid.UUID(int=random.Random(n).getrandbits(128))) for n in range(40)]
    for run_id in run_ids:
        for attempt in (1, 2):  # two messages of the run, as two workers would work them
            message = QueueMessage(attempt, "calc", run_id, "task", {"task_id": "main"},
                                   attempt, 0.01)
            with tracer.handling(message, f"w-{attempt}"):
                tracer.appended("calc", run_id, "task:main", [MODEL], 0.002)
        tracer.run_finished("calc", run_id, "completed", None)
    by_run: dict[str, set[str]] = {}
    for span in exporter.get_finished_spans():
        by_run.setdefault(span.attributes["toren.run_id"], set()).add(span.name)
    whole = {"toren.task main", "toren.queue_wait", "chat anthropic/claude-sonnet-4-6",
             "toren.run calc"}
    assert all(names == whole for names in by_run.values())  # never part of a run
    assert 0 < len(by_run) < len(run_ids)


def test_a_caller_that_sampled_its_trace_out_has_the_run_sampled_out() -> None:
    tracer, exporter = make()
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
    with tracer.handling(MESSAGE, "w-1"):
        tracer.joined(RUN_ID, caller)
        tracer.appended("calc", RUN_ID, "task:main", [MODEL], 0.002)
        assert tracer.traceparent() is not None and tracer.traceparent().endswith("-00")
    tracer.run_finished("calc", RUN_ID, "completed", None, caller)
    assert exporter.get_finished_spans() == ()
