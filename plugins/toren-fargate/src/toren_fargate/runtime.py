"""The ``fargate`` runtime driver: ``toren worker`` as a task of an ECS Fargate service.

It runs the same ``Worker`` as ``inprocess`` and adds what a Fargate task needs:

- **Drain within stopTimeout.** ECS sends SIGTERM, then SIGKILL ``stopTimeout`` seconds later.
  ``toren worker`` stops on SIGTERM; ``stop`` stops claiming, lets work in hand finish for
  ``TOREN_SHUTDOWN_GRACE`` seconds and hands the rest back (``Worker.stop``). The runtime
  refuses to start when that cannot fit in ``TOREN_FARGATE_STOP_TIMEOUT``.
- **Scale-in protection while busy** (``toren_fargate.protection``); with several worker
  processes in the task (``toren worker --processes N``), while any of them is busy
  (``toren_fargate.siblings``).
- **A health endpoint** for the container health check (``toren_fargate.health``); process k
  of N listens ``k - 1`` above its port.
- **The queue-depth metric** the service autoscales on (``toren_fargate.metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from toren.plugin import Settings
from toren.plugin.drivers import Worker, WorkerRuntime
from toren_fargate.health import HealthServer
from toren_fargate.metrics import QueueDepthPublisher
from toren_fargate.protection import TaskProtection
from toren_fargate.settings import FargateSettings
from toren_fargate.siblings import BusyMarks

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"

log = logging.getLogger(__name__)

#: Seconds between looks at whether the worker is busy (for scale-in protection).
PROTECTION_TICK_S = 1.0


class FargateRuntime(WorkerRuntime):
    """Runs up to ``TOREN_CONCURRENCY`` messages at once in this Fargate task; see the module
    docstring. Settings: ``FargateSettings``."""

    def __init__(self, settings: Settings,
                 fargate_settings: FargateSettings | None = None) -> None:
        super().__init__(settings)
        self.fargate = fargate_settings or FargateSettings.from_env()
        self.fargate.check_drain_fits(settings.shutdown_grace_s)
        self.worker: Worker | None = None
        self.host: Any = None
        self.draining = False
        #: Under a supervisor (``toren worker --processes N``): the siblings' busy marks; only
        #: slot 1 sets the task's protection, for all (``toren_fargate.siblings``).
        self.marks = (BusyMarks(settings.supervisor, settings.supervisor_slot)
                      if settings.supervisor and settings.supervisor_slot else None)
        speaks = self.marks is None or self.marks.speaks_for_the_task
        self.protection = (TaskProtection(self.fargate.agent_uri, self.fargate.protection_minutes)
                           if self.fargate.agent_uri and speaks else None)
        #: The health endpoint's port: slot k of a supervisor's processes listens k - 1 above
        #: TOREN_FARGATE_HEALTH_PORT (the container's health check asks slot 1's).
        self.health_port = (self.fargate.health_port + (settings.supervisor_slot or 1) - 1
                            if self.fargate.health_port else 0)
        self.health: HealthServer | None = None
        self.publisher: QueueDepthPublisher | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        #: when the last metric was sent (monotonic), for the health endpoint
        self.metric_sent_at: float | None = None
        self._no_depth_logged = False

    @property
    def description(self) -> str:
        parts = [f"Fargate task (concurrency {self.settings.concurrency}, drain "
                 f"{self.settings.shutdown_grace_s:g} s of stopTimeout "
                 f"{self.fargate.stop_timeout_s:g} s"]
        parts.append("scale-in protection while busy" if self.protection
                     else "no ECS_AGENT_URI: no scale-in protection")
        if self.health_port:
            parts.append(f"health on :{self.health_port}/healthz")
        if self.fargate.metric_interval_s:
            parts.append(f"{self.fargate.metric_namespace}/QueueDepth every "
                         f"{self.fargate.metric_interval_s:g} s")
        return ", ".join(parts) + ")"

    async def start(self, host: Any) -> None:
        self.host = host
        self.worker = Worker(host)
        if self.health_port:
            self.health = HealthServer(self.fargate.health_host, self.health_port,
                                       self.health_state)
            await self.health.start()
        await self.worker.start()
        if self.protection is not None or self.marks is not None:
            self._loops.append(asyncio.create_task(
                self._every(PROTECTION_TICK_S, self._protect), name="toren-task-protection"))
        if self.fargate.metric_interval_s:
            self.publisher = QueueDepthPublisher(self.fargate)
            self._loops.append(asyncio.create_task(
                self._every(self.fargate.metric_interval_s, self._publish),
                name="toren-queue-depth-metric"))

    async def stop(self) -> None:
        """Drain: stop claiming, finish or hand back work in hand, give up protection."""
        self.draining = True
        self._stopping.set()
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops = []
        started = time.monotonic()
        if self.worker is not None:
            await self.worker.stop()
            self.worker = None
        log.info("drained in %.1f s", time.monotonic() - started)
        if self.marks is not None:
            self.marks.mark(False)
        if self.protection is not None:
            with contextlib.suppress(Exception):  # a stopped task needs none anyway
                await self.protection.update(busy=False, now_final=True)
            await self.protection.close()
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None
        if self.health is not None:
            await self.health.stop()
            self.health = None

    # -- what the loops do -------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.worker is not None and bool(self.worker.inflight)

    def health_state(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while the worker's loops run and it is not draining."""
        worker = self.worker
        alive = worker is not None and all(not loop.done() for loop in worker._loops)
        details = {"worker": worker.id if worker else None, "lane": self.settings.lane,
                   "in_flight": len(worker.inflight) if worker else 0,
                   "draining": self.draining,
                   "protected": self.protection.enabled if self.protection else None}
        return alive and not self.draining, details

    async def _protect(self) -> None:
        busy = self.busy
        if self.marks is not None:  # one of several worker processes of this task
            self.marks.mark(busy)
            busy = busy or self.marks.others_busy()
        if self.protection is not None:
            await self.protection.update(busy)

    async def _publish(self) -> None:
        queue = self.host.queue
        if queue is None:
            return
        # the lane's agents only: a long-lane service scales on its own queues' depth
        depth = await queue.depth(list(self.host.lane_agents))
        if depth is None:
            if not self._no_depth_logged:
                log.warning("the %s queue cannot count its messages: no queue-depth metric",
                            self.settings.queue_driver)
                self._no_depth_logged = True
            return
        assert self.publisher is not None
        await self.publisher.publish(depth)
        self.metric_sent_at = time.monotonic()

    async def _every(self, interval: float, action: Callable[[], Awaitable[None]]) -> None:
        while not self._stopping.is_set():
            try:
                await action()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # logged and tried again: never the end of the worker
                log.warning("%s failed: %s", getattr(action, "__name__", action),
                            getattr(exc, "message", None) or exc or type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)
