"""Prometheus metrics of one process: counters fed from committed events, gauges read from the
database at scrape time (one cached read), and the text exposition for ``/metrics``.

Labels hold agent, model, tool and status names only: never prompts, inputs or outputs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from toren.core import events as ev
from toren.core.events import NewEvent
from toren.host.fleet import QueueDepth, with_queue_counts, workers_serving
from toren.seams.store.fleet import FleetGauges, FleetReader
from toren.seams.store.rate_limits import BucketState, RateLimitStore
from toren.seams.store.workers import WorkerRegistry
from toren.version import __version__

log = logging.getLogger(__name__)

_V = TypeVar("_V")

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
_TOKEN_FIELDS = (("input_tokens", "input"), ("output_tokens", "output"),
                 ("cache_read_tokens", "cache_read"), ("cache_write_tokens", "cache_write"))
#: Appends counted before ``Metrics.appended`` hands its counts over without a scrape.
FLUSH_EVERY = 256


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
        #: The provider rate-limit buckets at the last read (``RateLimitStore``), if the store
        #: keeps them.
        self._rate_limits: list[BucketState] = []
        #: Each served agent's lane and how many live workers serve it, at the last read.
        self._served: dict[str, tuple[str, int]] = {}
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
        #: What ``appended`` counted and observed since the last ``flush``.
        self._counted: _Tally[float] = _Tally(self, float)
        self._observed: _Tally[list[float]] = _Tally(self, list)
        self._unflushed = 0

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
        """Count what ``events`` record; called after each committed append.

        Tallied in plain dicts, handed to the Prometheus metrics before each exposition (and
        every ``FLUSH_EVERY`` appends, so nothing grows unscraped): a ``Counter.inc`` is
        several Python calls and a lock, a measurable share of a durable operation's
        (figure 2, bench/README.md "Issue 41")."""
        counted, observed = self._counted, self._observed
        observed[self.append_latency, ()].append(seconds)
        for event in events:
            kind = event.type
            if kind == _MODEL_CALL_COMPLETED:
                data = event.data
                model = str(data.get("model", "unknown"))
                counted[self.model_calls, (agent, model)] += 1
                usage = data.get("usage")
                if usage:
                    for field, label in _TOKEN_FIELDS:
                        tokens = usage.get(field)
                        if tokens:
                            counted[self.model_tokens, (agent, model, label)] += tokens
                cost = data.get("cost_usd")
                counted[self.model_cost, (agent, model)] += cost if cost else 0.0
                observed[self.model_latency, (agent, model)].append(
                    float(data.get("latency_ms", 0.0)) / 1000)
            elif kind == _TOOL_CALL_COMPLETED:
                data = event.data
                outcome = "error" if data.get("is_error") else "ok"
                counted[self.tool_calls, (agent, str(data.get("name")), outcome)] += 1
            elif kind == _RETRY_SCHEDULED:
                counted[self.retries, (agent,)] += 1
            elif kind in _RUN_ENDS:
                counted[self.runs_finished, (agent, str(event.data.get("status")))] += 1
        self._unflushed += 1
        if self._unflushed >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Hand what ``appended`` tallied since the last flush to the Prometheus metrics."""
        counted, self._counted = self._counted, _Tally(self, float)
        observed, self._observed = self._observed, _Tally(self, list)
        self._unflushed = 0
        for (metric, labels), amount in counted.items():
            self.child(metric, *labels).inc(amount)
        for (metric, labels), values in observed.items():
            target: Any = self.child(metric, *labels) if labels else metric
            for value in values:
                target.observe(value)

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
                        if isinstance(self._fleet, RateLimitStore):
                            self._rate_limits = await self._fleet.rate_limit_state()
                        if isinstance(self._fleet, WorkerRegistry):
                            self._served = await self._served_agents(self._fleet)
                    except Exception as exc:
                        log.warning("could not read queue and run gauges for /metrics: %s",
                                    exc or type(exc).__name__)
                    self._read_at = time.monotonic()
        self.flush()
        return generate_latest(self.registry)


    async def _served_agents(self, registry: WorkerRegistry) -> dict[str, tuple[str, int]]:
        lanes = await self._fleet.agent_lanes()
        serving = workers_serving(self._agents,
                                  await registry.live_workers(self._live_window_s))
        return {agent: (lanes.get(agent) or "unknown", count)
                for agent, count in serving.items()}


class _Tally(dict[tuple[MetricWrapperBase, tuple[str, ...]], _V]):
    """What ``Metrics.appended`` tallied since the last flush, by metric and label values. A
    label set's first tally also makes its child (``Metrics.child``), as ``inc`` did at
    once before tallies: a flush after the first appends of a process makes none."""

    def __init__(self, metrics: Metrics, empty: Callable[[], _V]) -> None:
        super().__init__()
        self._metrics = metrics
        self._empty = empty

    def __missing__(self, key: tuple[MetricWrapperBase, tuple[str, ...]]) -> _V:
        metric, labels = key
        if labels:
            self._metrics.child(metric, *labels)
        value = self[key] = self._empty()
        return value


class _FleetCollector(Collector):
    """The database gauges, from the last read (``Metrics.exposition`` refreshes them)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        gauges = self.metrics._gauges
        depth = GaugeMetricFamily("toren_queue_messages", "Queue messages by agent and state",
                                  labels=["agent", "state"])
        oldest = GaugeMetricFamily("toren_queue_oldest_ready_age_seconds", "How long the "
                                   "oldest ready message has waited", labels=["agent"])
        waiting = GaugeMetricFamily("toren_queue_waiting", "Queue messages waiting by agent and "
                                    "reason: queued (for a worker, in priority order), "
                                    "concurrency (for a slot of the agent's concurrency limit), "
                                    "delayed (not due yet)", labels=["agent", "reason"])
        for agent, gauge in gauges.queue.items():
            for reason, count in gauge.waiting().items():
                waiting.add_metric([agent, reason], count)
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
        serving = GaugeMetricFamily("toren_agent_workers", "Live workers serving each agent, "
                                    "with the agent's lane (runtime: short or long); 0 with "
                                    "work queued means it waits unserved",
                                    labels=["agent", "lane"])
        for agent, (lane, count) in self.metrics._served.items():
            serving.add_metric([agent, lane], count)
        yield from (depth, waiting, oldest, dead, runs, workers, serving)
        yield from rate_limit_metrics(self.metrics._rate_limits)


def rate_limit_metrics(buckets: list[BucketState]) -> Iterator[Metric]:
    """The fleet's provider rate-limit buckets (``toren.seams.store.rate_limits``): use and
    limit of the current window, calls waiting, pauses, and the fleet-wide counters of waits,
    seconds waited and 429 pauses."""
    used = GaugeMetricFamily("toren_rate_limit_used", "What the current window of a provider "
                             "rate-limit bucket holds", labels=["bucket", "kind"])
    limit = GaugeMetricFamily("toren_rate_limit_limit", "A provider rate-limit bucket's limit "
                              "per window", labels=["bucket", "kind"])
    waiting = GaugeMetricFamily("toren_rate_limit_waiting", "Model calls parked waiting for "
                                "room in the bucket", labels=["bucket"])
    paused = GaugeMetricFamily("toren_rate_limit_paused", "1 while a provider's 429 pauses the "
                               "bucket for the fleet", labels=["bucket"])
    waits = CounterMetricFamily("toren_rate_limit_waits", "Model calls that waited for the "
                                "bucket (fleet-wide)", labels=["bucket"])
    waited = CounterMetricFamily("toren_rate_limit_wait_seconds", "Seconds model calls waited "
                                 "for the bucket (fleet-wide)", labels=["bucket"])
    pauses = CounterMetricFamily("toren_rate_limit_pauses", "429s with Retry-After that paused "
                                 "the bucket for the fleet", labels=["bucket"])
    for bucket in buckets:
        for kind, value, cap in (("requests", bucket.requests, bucket.requests_limit),
                                 ("input_tokens", bucket.input_tokens, bucket.input_limit),
                                 ("output_tokens", bucket.output_tokens, bucket.output_limit)):
            used.add_metric([bucket.name, kind], value)
            if cap is not None:
                limit.add_metric([bucket.name, kind], cap)
        waiting.add_metric([bucket.name], bucket.waiting)
        paused.add_metric([bucket.name], 1 if bucket.paused_until is not None else 0)
        waits.add_metric([bucket.name], bucket.waits_total)
        waited.add_metric([bucket.name], bucket.wait_seconds_total)
        pauses.add_metric([bucket.name], bucket.pauses_total)
    yield from (used, limit, waiting, paused, waits, waited, pauses)


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
