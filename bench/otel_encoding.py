#!/usr/bin/env python3
"""CPU microseconds per span to encode batches of Toren's spans into OTLP protobuf bytes: the
SDK's encoder (``encode_spans(spans).SerializePartialToString()``, what ``OTLPSpanExporter``
does) against toren-otel's (``toren_otel.encoding.SpanEncoder``, what ``TorenSpanExporter``
does), on the same spans: the ones the tracer makes for a message with a model call and a tool
call (as bench/tracing_overhead.py's ``tracer_alone``), in batches of 512 (the batch span
processor's default). Checks first that both give the same bytes.

    python bench/otel_encoding.py [--spans N] [--repeats N]

One JSON line on stdout. No database needed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from toren_otel.encoding import SpanEncoder
from toren_otel.tracer import OtelTracer

from toren.config import Settings
from toren.core.events import NewEvent
from toren.seams.shapes import QueueMessage

BATCH = 512


def tracer_spans(count: int) -> list[ReadableSpan]:
    """At least ``count`` spans as the tracer makes them (4 per message, 2 runs' worth)."""
    exporter = InMemorySpanExporter()
    tracer = OtelTracer(Settings(), processor=SimpleSpanProcessor(exporter))
    model = [NewEvent("ModelCallCompleted", {
        "model": "anthropic/claude-sonnet-4-6", "step": 1, "latency_ms": 3.0,
        "cost_usd": 0.001, "usage": {"input_tokens": 100, "output_tokens": 20},
        "stop_reason": "tool_use"})]
    tool = [NewEvent("ToolCallCompleted", {"name": "noop", "call_id": "c1", "step": 1,
                                           "duration_ms": 1.0})]
    runs = ("0e73dd0e-4db7-4cfa-a70f-51bfbd484e69", "5f0c3a2e-9b1d-4c8e-8f7a-2d6b9e1c4a70")
    for i in range(count // 4 + 1):
        run_id = runs[i % 2]
        message = QueueMessage(i, "bench", run_id, "task", {"task_id": "main"}, 1, 0.01)
        with tracer.handling(message, "bench-worker"):
            tracer.appended("bench", run_id, "task:main", model, 0.001)
            tracer.appended("bench", run_id, "task:main", tool, 0.001)
    spans = list(exporter.get_finished_spans())
    tracer.shutdown()
    return spans


def per_span(encode: Callable[[Sequence[ReadableSpan]], bytes],
             batches: list[list[ReadableSpan]], repeats: int) -> list[float]:
    """CPU µs per span of each of ``repeats`` passes over ``batches``."""
    spans = sum(len(batch) for batch in batches)
    passes = []
    for _ in range(repeats):
        started = time.process_time()
        for batch in batches:
            encode(batch)
        passes.append(1e6 * (time.process_time() - started) / spans)
    return passes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=20480)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    spans = tracer_spans(args.spans)
    batches = [spans[i:i + BATCH] for i in range(0, len(spans), BATCH)]
    encoder = SpanEncoder()

    def sdk(batch: Sequence[ReadableSpan]) -> bytes:
        return encode_spans(batch).SerializePartialToString()

    same = all(encoder.encode(batch) == sdk(batch) for batch in batches)
    result: dict[str, object] = {"bench": "toren_otel_encoding", "spans": len(spans),
                                 "batch": BATCH, "same_bytes": same,
                                 "load_average": [round(x, 2) for x in os.getloadavg()]}
    # interleaved, so a burst of load on the machine hits both
    sdk_passes: list[float] = []
    toren_passes: list[float] = []
    for _ in range(args.repeats):
        sdk_passes += per_span(sdk, batches, 1)
        toren_passes += per_span(encoder.encode, batches, 1)
    result |= {"sdk_us_per_span": round(statistics.median(sdk_passes), 2),
               "toren_us_per_span": round(statistics.median(toren_passes), 2),
               "sdk_passes": [round(x, 2) for x in sdk_passes],
               "toren_passes": [round(x, 2) for x in toren_passes]}
    result["speedup"] = round(result["sdk_us_per_span"] / result["toren_us_per_span"], 2)
    result["bytes_per_span"] = round(sum(len(encoder.encode(b)) for b in batches) / len(spans), 1)
    print(json.dumps(result), flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
