"""Toren's OTLP encoding of span batches (toren_otel.encoding) against the SDK's: the same
message for the spans a real run makes and for spans with every field and value type; the
exporter sends it to an OTLP/HTTP receiver."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState
from toren_otel.encoding import EncodingError, SpanEncoder
from toren_otel.exporter import TorenSpanExporter
from toren_otel.testing import OtlpReceiver
from toren_otel.tracer import OtelTracer

from toren.config import Settings
from toren.core.events import NewEvent
from toren.host.runtime import Runtime
from toren.seams.shapes import QueueMessage
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
RUN_ID = "0e73dd0e-4db7-4cfa-a70f-51bfbd484e69"
RESOURCE = Resource({"service.name": "toren", "service.version": "1.0", "host.cpus": 2},
                    schema_url="https://opentelemetry.io/schemas/1.21.0")
SCOPE = InstrumentationScope("toren", "1.0", "https://example.com/scope",
                             {"scope.flag": True, "scope.tags": ("a", "b")})
VALUES: dict[str, Any] = {
    "str": "agent", "unicode": "żółw ☃ 🐢", "empty": "", "long": "x" * 300,
    "true": True, "false": False, "zero": 0, "one": 1, "negative": -1, "big": 2**63 - 1,
    "smallest": -(2**63), "float": 0.25, "negative_float": -1.5e300, "float_zero": 0.0,
    "bytes": b"\x00\xff", "empty_bytes": b"",
    "strs": ("a", "", "ü"), "bools": (True, False), "ints": (0, -5, 2**63 - 1),
    "floats": (1.0, -2.5), "empty_list": (), "list": ["x", "y"], "none": None,
    "map": {"k": "v", "n": 3, "nested": {"deep": (1, 2)}}, "": "an empty key",
}


def ctx(trace_id: int, span_id: int, remote: bool = False,
        state: TraceState | None = None) -> SpanContext:
    return SpanContext(trace_id, span_id, is_remote=remote,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED), trace_state=state)


def synthetic() -> list[ReadableSpan]:
    """Spans with every field the SDK's encoder writes, in two resources and three scopes
    (and an equal resource and scope as other objects)."""
    other = Resource({"service.name": "other"})
    trace_id = 0x0123456789ABCDEF0123456789ABCDEF
    spans = [
        ReadableSpan("every value", context=ctx(trace_id, 1, state=TraceState(
            [("vendor", "v1"), ("other", "x")])), parent=ctx(trace_id, 2, remote=True),
            resource=RESOURCE, attributes=VALUES, kind=SpanKind.CLIENT,
            events=(Event("exception", {"exception.type": "ValueError", "n": 2}, 17),
                    Event("plain", None, 18), Event("", {"x": 1.5}, 0)),
            links=(Link(ctx(trace_id + 1, 3, remote=True), {"link.kind": "follows"}),
                   Link(ctx(7, 2**64 - 1))),
            status=Status(StatusCode.ERROR, "tool_error — ü"), start_time=1, end_time=2**63,
            instrumentation_scope=SCOPE),
        ReadableSpan("no parent", context=ctx(2**128 - 1, 2**64 - 1), parent=None,
                     resource=RESOURCE, attributes={}, kind=SpanKind.SERVER,
                     status=Status(StatusCode.OK), start_time=1_700_000_000_000_000_000,
                     end_time=1_700_000_000_000_000_001, instrumentation_scope=SCOPE),
        ReadableSpan("", context=ctx(1, 1), parent=ctx(1, 5), resource=other,
                     kind=SpanKind.PRODUCER, instrumentation_scope=None),
        ReadableSpan("consumer", context=ctx(1, 2), parent=ctx(1, 5), resource=RESOURCE,
                     kind=SpanKind.CONSUMER, status=Status(StatusCode.ERROR),
                     instrumentation_scope=InstrumentationScope("another")),
        # an equal resource and scope, other objects: grouped with the first ones
        ReadableSpan("equal resource", context=ctx(3, 3), resource=Resource(
            dict(RESOURCE.attributes), RESOURCE.schema_url), attributes={"str": "agent"},
            instrumentation_scope=InstrumentationScope(
                "toren", "1.0", "https://example.com/scope",
                {"scope.flag": True, "scope.tags": ("a", "b")})),
        ReadableSpan("long name " * 30, context=ctx(4, 4), resource=RESOURCE,
                     attributes={f"k{i}": i for i in range(200)},
                     instrumentation_scope=SCOPE),
    ]
    return spans


def sdk(spans: Sequence[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializePartialToString()


def assert_same(spans: Sequence[ReadableSpan], encoder: SpanEncoder | None = None) -> None:
    """Toren's encoding of ``spans`` parses to the SDK's message (and is the same bytes)."""
    ours = (encoder or SpanEncoder()).encode(spans)
    theirs = sdk(spans)
    parsed = ExportTraceServiceRequest.FromString(ours)
    assert parsed == ExportTraceServiceRequest.FromString(theirs)
    assert ours == theirs


def test_spans_with_every_field_and_value_type_encode_as_the_sdk_does() -> None:
    spans = synthetic()
    assert_same(spans)
    encoder = SpanEncoder()
    for _ in range(3):  # from its caches too
        assert_same(spans, encoder)
    for span in spans:
        assert_same([span], encoder)
    request = ExportTraceServiceRequest.FromString(encoder.encode(spans))
    assert [len(r.scope_spans) for r in request.resource_spans] == [2, 1]
    attributes = {a.key: a.value for a in request.resource_spans[0].scope_spans[0].spans[0]
                  .attributes}
    assert attributes["big"].int_value == 2**63 - 1
    assert attributes["unicode"].string_value == "żółw ☃ 🐢"


def test_spans_of_the_tracer_encode_as_the_sdk_does() -> None:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer(Settings(), processor=SimpleSpanProcessor(exporter))
    message = QueueMessage(1, "calc", RUN_ID, "task", {"task_id": "main"}, 2, 0.25)
    model = NewEvent("ModelCallCompleted", {
        "model": "anthropic/claude-sonnet-4-6", "step": 1, "latency_ms": 40.0,
        "cost_usd": 0.01, "usage": {"input_tokens": 100, "output_tokens": 20},
        "stop_reason": "tool_use", "purpose": "summary"})
    tool = NewEvent("ToolCallCompleted", {"name": "add", "call_id": "c1", "step": 1,
                                          "duration_ms": 3.0, "is_error": True,
                                          "error_kind": "tool_error"})
    retry = NewEvent("RetryScheduled", {"attempt": 1, "delay_s": 0.5, "error": {"code": "429"}})
    with pytest.raises(RuntimeError), tracer.handling(message, "w-1"):
        tracer.appended("calc", RUN_ID, "task:main", [model, tool, retry], 0.002)
        tracer.took_over("calc", RUN_ID, "task:main", 2, "w-1")
        raise RuntimeError("boom ü")
    with tracer.handling(message, "w-1"):
        tracer.joined(RUN_ID, "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01")
        tracer.appended("calc", RUN_ID, "task:main", [model], 0.001)
    tracer.run_finished("calc", RUN_ID, "failed", None)
    spans = exporter.get_finished_spans()
    assert len(spans) >= 8
    assert_same(spans)
    tracer.shutdown()


@pytest.fixture
async def runtime(database_url: str, tmp_path: Path
                  ) -> AsyncIterator[tuple[Runtime, InMemorySpanExporter]]:
    settings = Settings(database_url=database_url, home=tmp_path / "home", load_plugins=(),
                        lease_ttl_s=1.0, poll_interval_s=0.2)
    directory = write_agent_dir(tmp_path, "calc", tools_py=TOOLS, model="toren/scripted")
    made = Runtime([directory], settings=settings)
    exporter = InMemorySpanExporter()
    made.tracer = OtelTracer(settings, processor=SimpleSpanProcessor(exporter))
    await made.start()
    yield made, exporter
    await made.stop()


async def test_the_spans_of_a_real_run_encode_as_the_sdk_does(runtime) -> None:
    runtime, exporter = runtime
    run_ids = [await runtime.start_run("calc", "add please") for _ in range(2)]
    for run_id in run_ids:
        assert (await runtime.wait_for_run(run_id, timeout_s=30)).status == "completed"
    for _ in range(100):  # the root spans end after one read of the run's row
        spans = exporter.get_finished_spans()
        if sum(span.name.startswith("toren.run ") for span in spans) == 2:
            break
        await asyncio.sleep(0.05)
    names = {span.name.split(" ")[0] for span in spans}
    assert {"toren.run", "toren.task", "chat", "execute_tool", "toren.queue_wait"} <= names
    encoder = SpanEncoder()
    assert_same(spans, encoder)
    assert_same(spans[: len(spans) // 2], encoder)
    assert_same(spans[len(spans) // 2:], encoder)


def test_a_value_the_sdk_would_skip_is_an_encoding_error_and_the_sdk_encodes_the_batch(
        caplog: pytest.LogCaptureFixture) -> None:
    span = ReadableSpan("big", context=ctx(1, 1), resource=RESOURCE,
                        attributes={"too big": 2**64, "kept": "yes"})
    with pytest.raises(EncodingError, match="64 bits"):
        SpanEncoder().encode([span])
    exporter = TorenSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    with caplog.at_level(logging.DEBUG, logger="toren_otel.exporter"):
        assert exporter.encode([span]) == sdk([span])
    assert "encoded by the SDK's encoder" in caplog.text
    exporter.shutdown()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


def test_the_exporter_sends_the_fast_encoding_to_a_receiver(receiver: OtlpReceiver) -> None:
    exporter = TorenSpanExporter(endpoint=receiver.traces_url)
    assert exporter.fast
    spans = synthetic()
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    [request] = receiver.requests
    assert request == ExportTraceServiceRequest.FromString(sdk(spans))
    assert request.resource_spans[0].scope_spans[0].spans[0].name == "every value"
    exporter.shutdown()
    assert exporter.export(spans) == SpanExportResult.FAILURE  # as the SDK's, once shut down


def test_the_exporter_takes_compression_and_headers_from_the_otel_variables(
        receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.traces_url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme")
    exporter = TorenSpanExporter()
    assert exporter.fast
    spans = synthetic()
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    [request] = receiver.requests
    assert request == ExportTraceServiceRequest.FromString(sdk(spans))
    [headers] = receiver.headers
    assert headers["Content-Encoding"] == "gzip" and headers["x-tenant"] == "acme"
    exporter.shutdown()


def test_the_tracer_exports_through_the_fast_exporter(
        receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.traces_url)
    tracer = OtelTracer(Settings())
    assert isinstance(tracer.processor.span_exporter, TorenSpanExporter)
    tracer.run_finished("calc", RUN_ID, "completed", None)
    tracer.shutdown()  # flushes
    [request] = receiver.requests
    [span] = request.resource_spans[0].scope_spans[0].spans
    assert span.name == "toren.run calc"


def test_an_sdk_without_the_internals_falls_back_to_its_own_export(
        receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    import toren_otel.exporter as module

    # as if the installed SDK's exporter had not one of the internals export() relies on
    monkeypatch.setattr(module, "_PRIVATE", (*module._PRIVATE, "_not_in_this_sdk"))
    exporter = TorenSpanExporter(endpoint=receiver.traces_url)
    assert not exporter.fast
    spans = synthetic()
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    [request] = receiver.requests
    assert request == ExportTraceServiceRequest.FromString(sdk(spans))
    exporter.shutdown()
