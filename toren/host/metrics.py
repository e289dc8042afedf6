"""Prometheus metrics of one process: counters fed from committed events, gauges read from the
database at scrape time (one cached read), and the text exposition for ``/metrics``.

Labels hold agent, model, tool and status names only: never prompts, inputs or outputs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from toren.core import events as ev
from toren.core.events import NewEvent
from toren.host.fleet import QueueDepth, with_queue_counts
from toren.seams.store.fleet import FleetGauges, FleetReader
from toren.version import __version__

log = logging.getLogger(__name__)

#: The content type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Seconds a database read of the gauges is reused: scrapes cannot hammer Postgres.
GAUGE_CACHE_S = 5.0
#: Append latency buckets (seconds): a commit is usually milliseconds.
APPEND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_MODEL_CALL_COMPLETED = ev.ModelCallCompleted.__name__
_TOOL_CALL_COMPLETED = ev.ToolCallCompleted.__name__
_RETRY_SCHEDULED = ev.RetryScheduled.__name__
_RUN_ENDS = (ev.RunFinished.__name__, ev.RunDeadLettered.__name__)


class Metrics:
    """The metrics of one process (a ``toren.Runtime``), in a registry of its own.

    The worker tells it about every append (``appended``), dead letter, lease takeover and
    message it handles; ``exposition`` refreshes the database gauges (at most once per
    ``GAUGE_CACHE_S``) and renders the text format.

    Args:
        fleet: where the database gauges are read.
        agents: the agents this process serves (the gauges cover these).
        live_window_s: a worker whose heartbeat is older is not counted as live.
    """

    def __init__(self, fleet: FleetReader, agents: Sequence[str], live_window_s: float) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._fleet = fleet
        self._agents = list(agents)
        self._live_window_s = live_window_s
        self._gauges = FleetGauges()
        self._read_at = float("-inf")
        self._refreshing: asyncio.Lock | None = None
        #: A queue outside the database (SQS: ``Queue.reads_outbox`` false) counts its own
        #: messages; the runtime sets this to its ``Queue.depth`` when it opens one.
        self.queue_depth: QueueDepth | None = None
        registry = self.registry
        self.model_calls = Counter("toren_model_calls", "Model calls completed",
                                   ["agent", "model"], registry=registry)
        self.model_tokens = Counter("toren_model_tokens", "Tokens of completed model calls",
                                    ["agent", "model", "kind"], registry=registry)
        self.model_cost = Counter("toren_model_cost_usd", "Cost of completed model calls (USD; "
                                  "calls of unknown price count 0)", ["agent", "model"],
                                  registry=registry)
        self.model_latency = Histogram("toren_model_call_seconds", "Model call latency",
                                       ["agent", "model"], registry=registry,
                                       buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        self.tool_calls = Counter("toren_tool_calls", "Tool calls completed",
                                  ["agent", "tool", "outcome"], registry=registry)
        self.retries = Counter("toren_retries", "Model call retries scheduled (429, 5xx, "
                               "timeouts)", ["agent"], registry=registry)
        self.runs_finished = Counter("toren_runs_finished", "Runs finished by this process",
                                     ["agent", "status"], registry=registry)
        self.dead_lettered = Counter("toren_dead_lettered", "Messages this process "
                                     "dead-lettered", ["agent"], registry=registry)
        self.takeovers = Counter("toren_lease_takeovers", "Streams taken over from a worker "
                                 "that stopped with work in flight", ["agent"],
                                 registry=registry)
        self.messages = Counter("toren_messages_handled", "Queue messages worked",
                                ["agent", "kind"], registry=registry)
        self.queue_wait = Histogram("toren_queue_wait_seconds", "Time a message waited in the "
                                    "queue once due", ["agent"], registry=registry,
                                    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300))
        self.append_latency = Histogram("toren_append_seconds", "Duration of an append (one "
                                        "transaction)", registry=registry,
                                        buckets=APPEND_BUCKETS)
        self.info = Gauge("toren_process_info", "This process: Toren version",
                          ["version"], registry=registry)
        self.info.labels(version=__version__).set(1)
        registry.register(_FleetCollector(self))
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], Any] = {}

    def child(self, metric: MetricWrapperBase, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: ``labels`` takes a lock and rebuilds the label
        tuple at each call, a measurable share of a busy worker's CPU (several per model
        call). Label values are agent, model, tool and status names: a bounded set."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def appended(self, agent: str, events: Sequence[NewEvent], seconds: float) -> None:
        """Count what ``events`` record; called after each committed append."""
        self.append_latency.observe(seconds)
        for event in events:
            kind = event.type
            if kind == _MODEL_CALL_COMPLETED:
                data = event.data
                model = str(data.get("model", "unknown"))
                self.child(self.model_calls, agent, model).inc()
                usage = data.get("usage") or {}
                for field, label in (("input_tokens", "input"), ("output_tokens", "output"),
                                     ("cache_read_tokens", "cache_read"),
                                     ("cache_write_tokens", "cache_write")):
                    if usage.get(field):
                        self.child(self.model_tokens, agent, model, label).inc(usage[field])
                cost = data.get("cost_usd")
                self.child(self.model_cost, agent, model).inc(cost if cost else 0.0)
                self.child(self.model_latency, agent, model).observe(
                    float(data.get("latency_ms", 0.0)) / 1000)
            elif kind == _TOOL_CALL_COMPLETED:
                outcome = "error" if event.data.get("is_error") else "ok"
                self.child(self.tool_calls, agent, str(event.data.get("name")), outcome).inc()
            elif kind == _RETRY_SCHEDULED:
                self.child(self.retries, agent).inc()
            elif kind in _RUN_ENDS:
                self.child(self.runs_finished, agent, str(event.data.get("status"))).inc()

    async def exposition(self) -> bytes:
        """The text format, with database gauges at most ``GAUGE_CACHE_S`` old (a failed
        read keeps the previous values and is logged)."""
        if time.monotonic() - self._read_at >= GAUGE_CACHE_S:
            if self._refreshing is None:
                self._refreshing = asyncio.Lock()
            async with self._refreshing:  # concurrent scrapes share one read
                if time.monotonic() - self._read_at >= GAUGE_CACHE_S:
                    try:
                        self._gauges = await with_queue_counts(
                            await self._fleet.fleet_gauges(self._agents, self._live_window_s),
                            self._agents, self.queue_depth)
                    except Exception as exc:
                        log.warning("could not read queue and run gauges for /metrics: %s",
                                    exc or type(exc).__name__)
                    self._read_at = time.monotonic()
        return generate_latest(self.registry)


class _FleetCollector(Collector):
    """The database gauges, from the last read (``Metrics.exposition`` refreshes them)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauges = self.metrics._gauges
        depth = GaugeMetricFamily("toren_queue_messages", "Queue messages by agent and state",
                                  labels=["agent", "state"])
        oldest = GaugeMetricFamily("toren_queue_oldest_ready_age_seconds", "How long the "
                                   "oldest ready message has waited", labels=["agent"])
        for agent, gauge in gauges.queue.items():
            depth.add_metric([agent, "ready"], gauge.ready)
            depth.add_metric([agent, "in_flight"], gauge.in_flight)
            depth.add_metric([agent, "delayed"], gauge.delayed)
            if gauge.oldest_ready_age_s is not None:
                oldest.add_metric([agent], gauge.oldest_ready_age_s)
        dead = GaugeMetricFamily("toren_dead_letters", "Messages dead-lettered (stored)",
                                 labels=["agent"])
        for agent, count in gauges.dead_letters.items():
            dead.add_metric([agent], count)
        runs = GaugeMetricFamily("toren_runs", "Unfinished runs by agent and status",
                                 labels=["agent", "status"])
        for agent, by_status in gauges.active_runs.items():
            for status in ev.RUN_STATUSES:
                if status not in ev.TERMINAL_STATUSES:
                    runs.add_metric([agent, status], by_status.get(status, 0))
        workers = GaugeMetricFamily("toren_workers", "Live workers by version",
                                    labels=["version"])
        for version, count in gauges.workers_by_version.items():
            workers.add_metric([version], count)
        yield from (depth, oldest, dead, runs, workers)


class MetricsListener:
    """A small HTTP listener serving ``GET /metrics`` for a worker, which has no API server
    (``TOREN_METRICS_PORT``; bound to ``TOREN_METRICS_HOST``, loopback by default).

    Started by ``Runtime.start`` when workers start and the port is set; no keys: bind it
    where only Prometheus reaches it.
    """

    def __init__(self, metrics: Metrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        log.info("serving metrics on http://%s:%d/metrics", self.host, self.port)

    async def _serve(self, request: web.Request) -> web.Response:
        body = await self.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
