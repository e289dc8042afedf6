#!/usr/bin/env python3
"""What tracing costs: durable operations/s with the otel tracer on (the real OpenTelemetry SDK,
a BatchSpanProcessor, an exporter that drops the batches) against off (the no-op seam), in
interleaved repetitions (off, on, on, off, ...), reported as the median of per-pair ratios.

    python bench/tracing_overhead.py --server-url URL [--smoke] [--reps N] [--encode]
                                     [--encoder toren|sdk]

With ``--encode`` the exporter also encodes each batch to OTLP protobuf (what the OTLP/HTTP
exporter's thread does before it posts): the exporter's cost short of the network. The
encoder is toren-otel's own (``toren_otel.encoding``, what ``TorenSpanExporter`` sends) or,
with ``--encoder sdk``, the SDK's (``encode_spans(...).SerializePartialToString()``).

One JSON line on stdout; logs on stderr. Metrics (prometheus-client counters) are on in both
arms: they are always on. Needs toren-otel (requirements/test.txt installs it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from toren_bench import TERMINAL, BenchDatabase, bench_crew, create_runs, log, settings
from toren_otel.encoding import SpanEncoder
from toren_otel.tracer import OtelTracer

from toren.config import Settings
from toren.core.events import NewEvent
from toren.host.runtime import Runtime
from toren.seams.shapes import QueueMessage
from toren.seams.telemetry import Tracer


class DroppingExporter(SpanExporter):
    """Takes every batch and throws it away (counting spans): the SDK's whole cost, no I/O."""

    def __init__(self, encoder: str | None = None) -> None:
        self.spans = 0
        self.encoder = encoder
        self.toren = SpanEncoder()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        # the OTLP exporter's work short of the HTTP post
        if self.encoder == "sdk":
            encode_spans(spans).SerializePartialToString()
        elif self.encoder == "toren":
            self.toren.encode(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


async def one_arm(server_url: str, traced: bool, runs: int, steps: int,
                  concurrency: int, encoder: str | None = None) -> dict[str, Any]:
    """``runs`` runs of ``steps`` agent steps worked by one worker with ``concurrency``
    pollers, timed from the worker's start to the last run's end (runs created before)."""
    db = BenchDatabase(server_url, "tracing")
    try:
        with tempfile.TemporaryDirectory(prefix="toren-bench-") as work:
            crew = bench_crew(Path(work), steps)
            await create_runs(db.url, crew, runs, callers=4)
            worker = Runtime([crew], settings=settings(db.url, concurrency=concurrency))
            exporter = DroppingExporter(encoder)
            if traced:
                worker.tracer = OtelTracer(worker.settings,
                                           processor=BatchSpanProcessor(exporter))
            else:
                worker.tracer = Tracer()
            started = time.perf_counter()
            cpu0 = time.process_time()
            await worker.start(workers=True)
            while await asyncio.to_thread(
                    db.scalar, "SELECT count(*) FROM agent_bench.runs WHERE status = ANY(%s)",
                    [list(TERMINAL)]) < runs:
                await asyncio.sleep(0.02)
            seconds = time.perf_counter() - started
            cpu = time.process_time() - cpu0
            await worker.stop()  # flushes the batch processor (outside the window)
    finally:
        db.close()
    operations = runs * (2 * steps + 1)
    return {"traced": traced, "seconds": round(seconds, 3),
            "operations_per_s": round(operations / seconds, 1),
            "cpu_ms_per_operation": round(1000 * cpu / operations, 3),
            "spans_exported": exporter.spans}


def tracer_cpu(traced: bool, messages: int, encoder: str | None = None) -> float:
    """CPU microseconds the tracer itself costs per durable operation, in isolation: for each
    message, the work span plus one model call and one tool call appended (2 operations).
    Load-proof where the end-to-end ratio is not (other work on the machine moves it). The
    queue holds every span (none dropped while the batch thread waits for the GIL)."""
    exporter = DroppingExporter(encoder)
    processor = BatchSpanProcessor(exporter, max_queue_size=4 * messages + 2048)
    tracer: Tracer = (OtelTracer(Settings(), processor=processor) if traced else Tracer())
    message = QueueMessage(1, "bench", "0e73dd0e-4db7-4cfa-a70f-51bfbd484e69", "task",
                           {"task_id": "main"}, 1, 0.01)
    model = [NewEvent("ModelCallCompleted", {
        "model": "toren/scripted", "step": 1, "latency_ms": 3.0, "cost_usd": 0.0,
        "usage": {"input_tokens": 100, "output_tokens": 20}, "stop_reason": "tool_use"})]
    tool = [NewEvent("ToolCallCompleted", {"name": "noop", "call_id": "c1", "step": 1,
                                           "duration_ms": 1.0})]
    started = time.process_time()
    for _ in range(messages):
        with tracer.handling(message, "bench-worker"):
            if tracer.enabled:
                tracer.appended("bench", message.run_id or "", "task:main", model, 0.001)
                tracer.appended("bench", message.run_id or "", "task:main", tool, 0.001)
    tracer.shutdown()
    return 1e6 * (time.process_time() - started) / (2 * messages)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-url", required=True)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks it runs")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3, help="pairs (off+on) to run")
    parser.add_argument("--encode", action="store_true",
                        help="the exporter encodes each batch to OTLP protobuf (then drops it)")
    parser.add_argument("--encoder", choices=("toren", "sdk"), default="toren",
                        help="with --encode: toren-otel's encoder (default) or the SDK's")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.steps, args.reps = 10, 2, 1
    return args


def main() -> int:
    args = parse_args()
    pairs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        order = (False, True) if rep % 2 == 0 else (True, False)  # ABAB: off-on, on-off, ...
        arms = {}
        for traced in order:
            log(f"rep {rep + 1}: tracing {'on' if traced else 'off'}")
            arms[traced] = asyncio.run(one_arm(args.server_url, traced, args.runs, args.steps,
                                               args.concurrency,
                                               args.encoder if args.encode else None))
        pairs.append({"off": arms[False], "on": arms[True],
                      "ratio_on_over_off": round(arms[True]["operations_per_s"]
                                                 / arms[False]["operations_per_s"], 3)})
    ratios = [pair["ratio_on_over_off"] for pair in pairs]
    messages = 200 if args.smoke else 5000
    isolated = {"off_cpu_us_per_operation": round(tracer_cpu(False, messages), 2),
                "on_cpu_us_per_operation": round(tracer_cpu(True, messages), 2),
                "on_encoding_cpu_us_per_operation": round(tracer_cpu(True, messages,
                                                                     args.encoder), 2),
                "on_sdk_encoding_cpu_us_per_operation": round(tracer_cpu(True, messages, "sdk"),
                                                              2)}
    result = {"bench": "toren_tracing_overhead", "smoke": args.smoke, "encode": args.encode,
              "encoder": args.encoder if args.encode else None,
              "load_average": [round(x, 2) for x in os.getloadavg()], "runs": args.runs,
              "steps_per_run": args.steps, "operations_per_run": 2 * args.steps + 1,
              "concurrency": args.concurrency, "pairs": pairs,
              "median_ratio_on_over_off": round(statistics.median(ratios), 3),
              "ratio_spread": [min(ratios), max(ratios)],
              "slowdown_percent": round(100 * (1 - statistics.median(ratios)), 1),
              "off_cpu_ms_per_operation": statistics.median(
                  pair["off"]["cpu_ms_per_operation"] for pair in pairs),
              "on_cpu_ms_per_operation": statistics.median(
                  pair["on"]["cpu_ms_per_operation"] for pair in pairs),
              "tracer_alone": isolated}
    if any(pair["on"]["spans_exported"] == 0 for pair in pairs):
        result["error"] = "the traced arm exported no spans"
        print(json.dumps(result), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
