"""The worker: claims queue messages for the agents it serves and works them.

One poll loop claims up to the free concurrency, woken by notifications (or the poll interval);
one heartbeat renews every lease and claimed message this worker holds, in one statement, every
third of the lease TTL; one guardian re-nudges active runs that lost all their messages; with
retention configured, one maintenance loop archives finished runs (on one elected worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import socket
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from toren.core import events as ev
from toren.core.events import Event, NewEvent
from toren.core.rate_limits import RateLimits
from toren.core.runs import RunUpdate
from toren.errors import DatabaseUnavailable, LeaseFenced, LeaseLost, RunCancelled, RunVersionStale
from toren.execution.orchestrator import tick_run
from toren.execution.ports import AppendObserver, ExecutionPorts
from toren.execution.rate_guard import RateLimiter
from toren.execution.task import work_task
from toren.execution.tool_threads import ToolThreads
from toren.host.children import HostChildRuns
from toren.host.db_clock import DatabaseClock
from toren.host.observed import ObservedRunLog
from toren.host.relay import QueueAcknowledgingLog
from toren.seams.log_context import log_context
from toren.seams.shapes import Lease, LeaseBusy, QueueMessage
from toren.seams.store import Guardian, RunLog, WorkerRegistry
from toren.seams.tool_sources import ToolSourceEntry, start_entries, stop_entries
from toren.seams.tools import build_validators
from toren.version import __version__

if TYPE_CHECKING:
    from toren.agents import AgentSpec
    from toren.host.runtime import Runtime

log = logging.getLogger(__name__)

#: ``work_task`` or ``tick_run``: what works a message of a run, on a definition.
Handler = Callable[[ExecutionPorts, "AgentSpec", QueueMessage], Awaitable[None]]

#: A stopping worker waits at most this long to sign out (the database may be gone).
SIGN_OUT_TIMEOUT_S = 5.0
#: Seconds between checks for live workers of other versions, and between repeated warnings.
SKEW_CHECK_S = 30.0
SKEW_RELOG_S = 300.0
#: Seconds between a worker's deletions of audit entries past ``TOREN_AUDIT_RETENTION``.
AUDIT_FORGET_EVERY_S = 3600.0
#: How often a worker erases memories past their agent's ``memory.keep`` (and at its start).
MEMORY_EXPIRE_EVERY_S = 3600.0
#: Runs whose creation time and traceparent a tracing worker keeps for their root spans.
RUN_TRACES_KEPT = 4096
#: How many handlers waiting to take their stream a worker keeps in hand, in units of the
#: handlers that may take theirs at once (TOREN_POOL_SIZE / 2): with a backlog of ready
#: messages each claim takes a batch of them, not the few slots that just freed.
CLAIM_AHEAD = 4
#: The longest a message waits before its handler tries again, while the database refuses the
#: handler's writes (unreachable, or out of disk space): its backoff doubles up to this, so
#: work resumes within about this long once the database is back.
DATABASE_BACKOFF_MAX_S = 10.0
#: Messages whose handlers wait for the database that a worker keeps a backoff for.
DATABASE_WAITS_KEPT = 4096

class Worker:
    """Pollers, heartbeat and guardian for one process (started by the ``inprocess`` runtime)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        queue = runtime.queue
        assert queue is not None, "the runtime starts workers after opening the queue"
        self.queue = queue
        # what of the store the worker uses, interface by interface
        self.registry: WorkerRegistry = runtime.store
        self.guardian: Guardian = runtime.store
        self.run_log: RunLog = runtime.store
        if not queue.reads_outbox:
            # acknowledgements cannot ride in the append's transaction: send them after it
            self.run_log = QueueAcknowledgingLog(runtime.store, queue, self.id)
        self.metrics = runtime.metrics
        self.tracer = runtime.tracer
        # counters and spans from every committed append, timed (toren.host.observed)
        self.run_log = ObservedRunLog(self.run_log, self.metrics, self.tracer,
                                      run_ended=self._end_run_span_soon,
                                      released=self._lease_released)
        #: Reads of finished runs' creation times for their root spans (tracing only).
        self._span_reads: set[asyncio.Task[None]] = set()
        #: Creation time and traceparent of the runs this worker worked lately, as their
        #: leases carried them (tracing only): a root span ending here needs no read.
        self._run_traces: OrderedDict[str, tuple[datetime, str | None]] = OrderedDict()
        #: The priority of runs worked here lately (those other than 0), as their claimed
        #: messages carried it: the messages their appends hand to this worker carry it too.
        self._run_priorities: OrderedDict[str, int] = OrderedDict()
        self.inflight: dict[int, asyncio.Task[None]] = {}
        #: The lease each in-flight message's handler holds (renewed by the heartbeat), until
        #: the handler's last append releases it.
        self.leases: dict[int, Lease] = {}
        #: Which message's handler holds each lease of ``leases`` (to drop a released one).
        self._lease_messages: dict[Lease, int] = {}
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self.observers: list[AppendObserver] = []
        self._skew_checked = float("-inf")
        self._skew_logged = float("-inf")
        self._skewed = False
        #: Handlers claimed but not yet past taking their stream (``acquire``). Taking it
        #: needs a pool connection, so at most ``_max_starting`` handlers take theirs at once
        #: (``_start_slots``): claiming 1,000 messages and starting them all together had
        #: 1,000 handlers queue for 10 connections, and those that waited past
        #: TOREN_POOL_TIMEOUT failed (bench figure 9). The claim keeps up to
        #: ``_claim_ahead`` of them in hand, so that a backlog of ready messages is claimed
        #: in batches while the slots stay busy, rather than a few at a time as slots free.
        self._starting: set[int] = set()
        self._max_starting = max(1, self.settings.pool_size // 2)
        self._start_slots = asyncio.Semaphore(self._max_starting)
        self._claim_ahead = CLAIM_AHEAD * self._max_starting
        self._start_done = asyncio.Event()
        #: Tool-source entries (MCP servers) this worker started, stopped on shutdown.
        self._tool_sources: list[ToolSourceEntry] = []
        #: A claim (or an append that handed messages to this worker) failed: it may have
        #: committed unseen (see ``Queue.return_unknown``).
        self._claims_unknown = False
        #: For each message whose handler failed because the database refused its writes
        #: (``DatabaseUnavailable``), how many times in a row: its next backoff.
        self._database_waits: OrderedDict[int, int] = OrderedDict()
        #: Handlers that waited for the database since the last one that did not: the
        #: warning is said once per outage, and its end too.
        self._database_failures = 0
        #: How long a message handed to this worker by its own append stays hidden.
        self.visibility_s = self.settings.lease_ttl_s
        #: The database's clock, read at start and every ``SKEW_CHECK_S``: what deadlines and
        #: wake-up delays are computed by (``toren.host.db_clock``).
        self.clock = DatabaseClock()
        #: What execution is handed to work a message (``toren.execution.ports``).
        self.ports = ExecutionPorts(
            store=self.run_log, settings=self.settings,
            model=lambda model_id, base_url: runtime.model(model_id, base_url=base_url),
            acquire=self.acquire, appended=self.observe_append,
            crash_point=self.settings.crash_point,
            tool_threads=ToolThreads(self.settings.tool_threads), prompts=runtime.store,
            approvals=runtime.store, budgets=runtime.store, tool_state=runtime.store,
            questions=runtime.store, memory=runtime.store, embed=runtime.embed,
            read_stream=runtime.store.load_stream,
            text_delta=runtime.live.publish,
            children=HostChildRuns(runtime.store, self.settings, runtime.agents,
                                   runtime.tracer),
            session_notice=runtime.notify_channels,
            files=runtime.store, version_current=runtime.versions.current,
            policies=runtime.plugins.policies,
            version_under_lease=runtime.versions.under_lease,
            rate_limits=RateLimiter(runtime.store, self.settings.rate_limits
                                    or RateLimits({}, configured=False)),
            clock=self.clock.now)
        #: The ports for a message whose version was just resolved: no check under the lease.
        self._ports_resolved = dataclasses.replace(self.ports, version_under_lease=None)
        self._lane_agents = runtime.lane_agents
        self._served = frozenset(self._lane_agents)

    @property
    def agent_names(self) -> list[str]:
        """The agents whose messages this worker claims: the served agents of its lane
        (``TOREN_LANE``; ``toren.host.lanes``)."""
        return list(self._lane_agents)

    def info(self) -> dict[str, Any]:
        return {"id": self.id, "version": __version__, "agents": self.agent_names,
                "lane": self.settings.lane, "supervisor": self.settings.supervisor}

    def _lane_specs(self) -> list[AgentSpec]:
        return [self.runtime.agents[name] for name in self._lane_agents]

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        await self.registry.heartbeat(self.info(), self.settings.lease_ttl_s, [])
        await self.clock.read(self.registry)
        # MCP servers and other tool sources: started now, so one that cannot start stops
        # the worker here, naming the agent and the server, rather than failing its runs
        self._tool_sources = await start_entries(
            entry for agent in self._lane_specs()
            for entry in (*agent.tool_sources,
                          *(e for sub in agent.subagents.values() for e in sub.tool_sources)))
        await asyncio.to_thread(build_validators, [
            tool for agent in self._lane_specs() for tool in agent.all_tools])
        if self.queue.reads_outbox:
            # the messages this worker's appends send are claimed for it by the append itself
            self.runtime.store.hand_off_to(self)
        self._loops = [
            asyncio.create_task(self._poll_loop(), name="toren-poll"),
            asyncio.create_task(self._every(self.settings.lease_ttl_s / 3, self._heartbeat),
                                name="toren-heartbeat"),
            asyncio.create_task(self._every(self.settings.guardian_interval_s, self._guard),
                                name="toren-guardian"),
            asyncio.create_task(self._schedule_loop(), name="toren-schedules"),
        ]
        if self.settings.audit_retention_s is not None:
            self._loops.append(asyncio.create_task(
                self._every(AUDIT_FORGET_EVERY_S, self._forget_audit), name="toren-audit"))
        await self._note_semantic_recall()
        if self._memory_keeps():
            self._loops.append(asyncio.create_task(
                self._every(MEMORY_EXPIRE_EVERY_S, self._expire_memories),
                name="toren-memory-keep"))
        if self.settings.archive_url is not None and self.runtime.archive.retentions():
            self._loops.append(asyncio.create_task(
                self._every(self.settings.archive_interval_s, self._archive),
                name="toren-archive"))
        log.info("worker %s serving %s", self.id, ", ".join(self.agent_names))

    async def stop(self) -> None:
        """Stop claiming; let work in hand finish within the grace period; hand back the rest."""
        self._stopping.set()
        self._slot_freed.set()
        self.runtime.store.hand_off_to(None)
        poll = self._loops[0] if self._loops else None
        if poll is not None:
            poll.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poll
        if self.inflight:
            _done, pending = await asyncio.wait(list(self.inflight.values()),
                                                timeout=self.settings.shutdown_grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for loop in self._loops[1:]:
            loop.cancel()
        await asyncio.gather(*self._loops[1:], return_exceptions=True)
        self._loops = []
        await stop_entries(self._tool_sources)
        self._tool_sources = []
        await self.runtime.plugins.close_tool_sources()
        try:
            async with asyncio.timeout(SIGN_OUT_TIMEOUT_S):
                if not self.queue.reads_outbox:
                    # sign_out hands back what this worker holds in the outbox only: hand the
                    # queue's messages back too, uncounted, rather than after their timeout
                    await self.queue.return_unknown(self.id, [])
                await self.registry.sign_out(self.id)
        except Exception as exc:  # the database may be gone; leases then expire on their own
            log.warning("could not sign out worker %s: %s", self.id, exc or type(exc).__name__)

    # -- loops ---------------------------------------------------------------------------------

    async def _every(self, interval: float, action: Callable[[], Awaitable[None]]) -> None:
        while not self._stopping.is_set():
            try:
                await action()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s failed: %s", getattr(action, "__name__", action), exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)

    async def _heartbeat(self) -> None:
        ttl_s = self.settings.lease_ttl_s
        if self.queue.reads_outbox:  # leases and messages in one round trip
            await self.registry.heartbeat(self.info(), ttl_s, list(self.inflight),
                                          list(self.leases.values()))
        else:
            await self.registry.heartbeat(self.info(), ttl_s, [], list(self.leases.values()))
            await self.queue.renew(self.id, list(self.inflight), ttl_s)
        now = asyncio.get_running_loop().time()
        if now - self._skew_checked >= SKEW_CHECK_S:
            self._skew_checked = now
            await self._check_version_skew(now)
            await self.clock.read(self.registry)

    async def _check_version_skew(self, now: float) -> None:
        """Log once when live workers of several versions share the database, again every
        few minutes while they do, and once when it clears."""
        window = max(10.0, 3 * self.settings.lease_ttl_s)
        versions = sorted({str(row["version"]) for row in
                           await self.registry.live_workers(window)})
        skewed = len(versions) > 1
        if skewed and (not self._skewed or now - self._skew_logged >= SKEW_RELOG_S):
            log.warning("version skew: workers of versions %s are live against this database "
                        "(this one is %s); see GET /healthz", ", ".join(versions),
                        __version__)
            self._skew_logged = now
        elif self._skewed and not skewed:
            log.warning("version skew cleared: every live worker runs %s", versions[0]
                        if versions else __version__)
        self._skewed = skewed

    async def _guard(self) -> None:
        nudged = await self.guardian.guardian_sweep(self.agent_names)
        if nudged:
            log.info("guardian re-nudged %d run(s) with no pending message: %s", len(nudged),
                     ", ".join(nudged))

    async def _schedule_loop(self) -> None:
        """Fire due schedule slots. Every worker runs this; the store's claim makes each slot
        start one run. Idle, it costs one indexed read per wake-up: it sleeps until the next
        slot it knows of, at most ``TOREN_SCHEDULE_INTERVAL`` (a schedule added, resumed or
        changed by another process is seen within that)."""
        interval = self.settings.schedule_interval_s
        while not self._stopping.is_set():
            wait = interval
            try:
                if self.runtime.schedules.any:
                    wait = await self._fire_schedules(interval)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a database blip must not end the loop
                log.warning("firing schedules failed: %s", exc or type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), max(wait, 0.05))

    async def _fire_schedules(self, interval: float) -> float:
        """Fire what is due; return seconds until the next look."""
        until = await self.runtime.store.seconds_to_next_slot(list(self.runtime.agents))
        if until is not None and until <= 0:
            fired = await self.runtime.schedules.fire_due()
            for slot in fired:
                log.info("schedule %s of %s fired slot %s (%s): run %s", slot.schedule,
                         slot.agent, slot.slot_at.isoformat(), slot.trigger, slot.run_id)
            until = await self.runtime.store.seconds_to_next_slot(list(self.runtime.agents))
        return interval if until is None else min(interval, max(until, 0.0))

    async def _poll_loop(self) -> None:
        while not self._stopping.is_set():
            free = self.settings.concurrency - len(self.inflight)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            try:
                claimed = await self._claim(free)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop must outlive any one failure (database blips)
                log.warning("claiming messages failed (%s); retrying", exc)
                # the claim may have committed with its answer lost: its messages are ours
                # in the database but not in hand, so hand them back before claiming again
                self._claims_unknown = True
                await asyncio.sleep(self.settings.poll_interval_s)
                continue
            if not claimed:
                await self.queue.wait(self.settings.poll_interval_s)

    async def _claim(self, free: int) -> int:
        """Claim up to ``free`` messages and start a handler for each; return how many."""
        queue = self.queue
        if self._claims_unknown:
            returned = await queue.return_unknown(self.id, list(self.inflight))
            self._claims_unknown = False
            if returned:
                log.info("handed back %d message(s) claimed by a claim whose answer was lost",
                         returned)
        while len(self._starting) >= self._claim_ahead:
            self._start_done.clear()
            await self._start_done.wait()
        room = min(free, self._claim_ahead - len(self._starting))
        claimed, dead = await queue.claim(self.agent_names, self.id, room,
                                          self.settings.lease_ttl_s, self.settings.max_deliveries)
        for message in claimed:
            self._start(message)
        for message in dead:
            await self._record_dead_letter(message)
        return len(claimed)

    def _start(self, message: QueueMessage) -> None:
        """Start a handler for a message claimed for this worker."""
        self._starting.add(message.id)
        if message.priority and message.run_id is not None:
            self._run_priorities[message.run_id] = message.priority
            self._run_priorities.move_to_end(message.run_id)
            while len(self._run_priorities) > RUN_TRACES_KEPT:
                self._run_priorities.popitem(last=False)
        task = asyncio.create_task(self._handle(message), name=f"toren-msg-{message.id}")
        self.inflight[message.id] = task

    # -- hand-off: the messages this worker's own appends send (``MessageHandOff``) ------------

    def room(self, agent: str, holder: str | None, releasing: bool) -> int:
        """As many as the free concurrency, counting the slot of the handler whose append
        ends its work; for an append, none unless it ends that work (``releasing``: its lease
        is let go, so a handed message never waits for a lease its sender still holds) and
        none for another holder's append; none for an agent not served here or a stopping
        worker. A run created in this process (``holder`` ``None``) has the free slots."""
        if self._stopping.is_set() or agent not in self._served:  # served: in its lane
            return 0
        if holder is None:
            if self.runtime.agents[agent].concurrency is not None:
                # a new run of a limited agent takes a slot only through the claim, which
                # counts the slots (docs/guides/flow-control.md)
                return 0
            return max(0, self.settings.concurrency - len(self.inflight))
        if not releasing or holder != self.id:
            return 0
        return max(0, self.settings.concurrency - len(self.inflight) + 1)

    def handed(self, messages: Sequence[QueueMessage]) -> None:
        """Work the messages an append of this worker claimed for it, as if claimed."""
        for message in messages:
            if message.id not in self.inflight:
                # an append's messages are of its own run: they carry the run's priority
                priority = self._run_priorities.get(message.run_id or "", message.priority)
                self._start(dataclasses.replace(message, priority=priority))

    def handed_unknown(self) -> None:
        """An append's answer was lost: messages it may have claimed for this worker are
        handed back before the next claim (as for a claim whose answer was lost)."""
        self._claims_unknown = True

    # -- messages ------------------------------------------------------------------------------

    async def _handle(self, message: QueueMessage) -> None:
        task_id = message.payload.get("task_id") if message.kind == "task" else None
        metrics = self.metrics
        metrics.child(metrics.messages, message.agent, message.kind).inc()
        if message.waited_s is not None:
            metrics.child(metrics.queue_wait, message.agent).observe(max(message.waited_s, 0.0))
        with log_context(run_id=message.run_id, task_id=task_id, worker_id=self.id,
                         agent=message.agent), self.tracer.handling(message, self.id):
            await self._work(message)

    async def _work(self, message: QueueMessage) -> None:
        try:
            if message.run_id is not None and message.kind == "task":
                await self._on_run_version(message, work_task)
            elif message.run_id is not None and message.kind == "run":
                await self._on_run_version(message, tick_run)
            else:
                log.error("dropping message %s of kind %r: not a kind this worker knows, or "
                          "no run", message.id, message.kind)
                await self.queue.ack(message, self.id)
        except LeaseFenced as exc:
            # nobody else holds the work (a failover fenced every lease of the old primary):
            # hand the message back now rather than after its visibility timeout
            log.warning("stopped work on run %s: %s", message.run_id, exc.message)
            try:
                await self.queue.defer(message, self.id, 0.0)
            except Exception as defer_error:  # the visibility timeout brings it back
                log.info("message %s goes back after its visibility timeout: handing it back "
                         "now failed (%s)", message.id, defer_error)
        except (LeaseLost, RunCancelled) as exc:
            log.info("stopped work on run %s: %s", message.run_id, exc.message)
        except DatabaseUnavailable as exc:
            if exc.retryable:
                await self._wait_for_database(message, exc)
            else:  # a configuration problem (a refused certificate): a failed delivery
                log.error("message %s (%s, run %s) failed: %s", message.id, message.kind,
                          message.run_id, exc.message)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Left unacknowledged: it comes back after its visibility timeout and is
            # dead-lettered after TOREN_MAX_DELIVERIES deliveries.
            log.exception("message %s (%s, run %s) failed", message.id, message.kind,
                          message.run_id)
        else:
            self._database_waits.pop(message.id, None)
            if self._database_failures:
                log.warning("the database takes writes again: work resumed after %d handler(s) "
                            "waited for it", self._database_failures)
                self._database_failures = 0
        finally:
            self._started(message.id)
            # the handler ended without an append that released its lease (an abort, or a
            # path that appended nothing): let the next worker in at once
            await self._let_go(message.id)
            self.inflight.pop(message.id, None)
            self._slot_freed.set()

    async def _wait_for_database(self, message: QueueMessage, exc: DatabaseUnavailable) -> None:
        """The handler failed because the database refused its writes (it cannot be reached,
        or has no disk space): whatever it did after its last committed append is redone.
        Hand the message back without counting the delivery, to be tried again after its
        backoff (doubling from the poll interval up to ``DATABASE_BACKOFF_MAX_S``, with
        jitter), so that a run waits out an outage of any length instead of being
        dead-lettered after ``TOREN_MAX_DELIVERIES``. Said once per outage as a warning
        naming the cause (the error says what to do); each further wait at info level."""
        self._database_failures += 1
        tries = self._database_waits.pop(message.id, 0) + 1
        self._database_waits[message.id] = tries
        while len(self._database_waits) > DATABASE_WAITS_KEPT:
            self._database_waits.popitem(last=False)
        delay_s = min(DATABASE_BACKOFF_MAX_S,
                      self.settings.poll_interval_s * 2 ** min(tries - 1, 16))
        delay_s *= random.uniform(0.8, 1.2)
        say = log.warning if self._database_failures == 1 else log.info
        say("run %s waits for the database: %s (message %s tried again in %.1fs)",
            message.run_id, exc.message, message.id, delay_s)
        try:
            await self.queue.defer(message, self.id, delay_s)
        except Exception as defer_exc:  # the same outage: it comes back when its claim expires
            log.info("could not hand message %s back (%s): it is delivered again when its "
                     "claim expires", message.id, defer_exc or type(defer_exc).__name__)

    async def _on_run_version(self, message: QueueMessage, handler: Handler) -> None:
        """Work a run's message on the run's own version of its agent's definition, not
        necessarily the directory's: first on the one it most likely runs (no read: the
        handler checks it under its lease, ``version_under_lease``); if that was not the
        run's, let the lease go, resolve the version (pinning or upgrading the run if due,
        reading it afresh) and work the message on that, unchecked, as before."""
        assert message.run_id is not None
        versions = self.runtime.versions
        try:
            await handler(self.ports, versions.spec_to_try(message.agent, message.run_id),
                          message)
            return
        except RunVersionStale:
            await self._let_go(message.id)
        agent = await versions.spec_for_run(message.agent, message.run_id, self.id)
        await handler(self._ports_resolved, agent, message)

    async def _let_go(self, message_id: int) -> None:
        """Release the lease the handler of ``message_id`` holds, if any (it ended, or it must
        take the stream again), so no one waits for it to expire."""
        lease = self.leases.pop(message_id, None)
        if lease is not None:
            self._lease_messages.pop(lease, None)
            with contextlib.suppress(Exception):
                await self.run_log.release_lease(lease)

    async def acquire(self, message: QueueMessage, stream: str, with_finished: bool = False
                      ) -> tuple[Lease, list[Event]] | None:
        """The stream's lease and events, or ``None`` if another worker holds the lease: the
        message is then handed back until just after that lease expires (a dead worker's
        lease), or is renewed (a live one, and the message comes back again)."""
        assert message.run_id is not None
        try:
            async with self._start_slots:
                found = await self.run_log.acquire_and_load(
                    message.agent, message.run_id, stream, self.id, self.settings.lease_ttl_s,
                    with_finished=with_finished)
        finally:
            self._started(message.id)
        if isinstance(found, LeaseBusy):
            await self.queue.defer(message, self.id, found.retry_in_s + 0.05)
            return None
        self.leases[message.id] = found[0]
        self._lease_messages[found[0]] = message.id
        if self.tracer.enabled:
            self._run_traced(found[0])
        if interrupted(found[1], found[0].epoch):
            self.metrics.takeovers.labels(message.agent).inc()
            log.info("took over %s of run %s at epoch %d: its previous holder stopped with "
                     "work in flight", stream, message.run_id, found[0].epoch)
            if self.tracer.enabled:
                self.tracer.took_over(message.agent, message.run_id, stream, found[0].epoch,
                                      self.id)
        return found

    def _lease_released(self, lease: Lease) -> None:
        """An append that released ``lease`` committed: its handler holds it no more, so the
        heartbeat stops renewing it and the handler's end does not release it again."""
        message_id = self._lease_messages.pop(lease, None)
        if message_id is not None and self.leases.get(message_id) == lease:
            del self.leases[message_id]

    def _started(self, message_id: int) -> None:
        """The handler of ``message_id`` no longer waits to start: let another claim in."""
        if message_id in self._starting:
            self._starting.discard(message_id)
            self._start_done.set()

    async def _record_dead_letter(self, message: QueueMessage) -> None:
        reason = (f"message {message.id} ({message.kind}) was delivered {message.attempts} times "
                  "without completing: its worker died or timed out each time")
        log.error("dead-lettered %s for run %s", reason, message.run_id)
        self.metrics.dead_lettered.labels(message.agent).inc()
        if message.run_id is None or message.agent not in self.runtime.agents:
            return
        dead = ev.RunDeadLettered(message_id=message.id, kind=message.kind,
                                  attempts=message.attempts, reason=reason, status="failed",
                                  stop_reason="error")
        await self.run_log.append_unleased(
            message.agent, message.run_id, ev.RUN_STREAM, [NewEvent.of(dead)],
            run_update=RunUpdate(status="failed", stop_reason="error", finished=True,
                                 error={"code": "dead_lettered", "message": reason}))

    def observe_append(self, agent: str, stream: str, first_seq: int,
                       events: Sequence[NewEvent]) -> None:
        """Tell every observer about an append (tests validate each event against the
        catalog)."""
        for observer in self.observers:
            observer(agent, stream, first_seq, events)

    async def _forget_audit(self) -> None:
        """Delete audit entries older than ``TOREN_AUDIT_RETENTION`` (every worker may: the
        delete is idempotent, and a small batch when there is little to do)."""
        keep_s = self.settings.audit_retention_s
        if keep_s is None:
            return
        forgotten = await self.runtime.audit.forget(keep_s)
        if forgotten:
            log.info("forgot %d audit entries older than %gs (TOREN_AUDIT_RETENTION)",
                     forgotten, keep_s)

    async def _note_semantic_recall(self) -> None:
        """Say once, at start, when agents want semantic recall (``memory.embeddings``) and
        the store cannot rank by vectors: their recall is by words until it can."""
        wanting = [agent.name for agent in self._lane_specs()
                   if agent.memory is not None and agent.memory.embeddings is not None]
        if wanting and not await self.runtime.store.semantic_recall():
            log.warning("memory.embeddings of %s: this database has no pgvector loaded, so "
                        "recall is by words only (vectors are kept, and used once someone "
                        "runs CREATE EXTENSION vector in it)", ", ".join(wanting))

    def _memory_keeps(self) -> dict[str, float]:
        """``memory.keep`` of the served agents that have one, in seconds."""
        return {agent.name: agent.memory.keep_s for agent in self._lane_specs()
                if agent.memory is not None and agent.memory.keep_s is not None}

    async def _expire_memories(self) -> None:
        """Erase memories unchanged for longer than their agent's ``memory.keep`` (every
        worker may: the delete is idempotent)."""
        erased = await self.runtime.memory.expire(self._memory_keeps())
        if erased:
            log.info("erased %d memories past their agent's memory.keep", erased)

    async def _archive(self) -> None:
        """One archive pass (``Runtime.archive_runs``): every worker tries; the one that gets
        the fleet's archive lock works it, the others find it taken and wait for the next."""
        report = await self.runtime.archive.archive_due()
        archived = sum(counts["archived"] for counts in report["agents"].values())
        if archived:
            log.info("archived %d finished run(s) past their retention in %.1fs", archived,
                     report.get("duration_s", 0.0))

    def _run_traced(self, lease: Lease) -> None:
        """Tell the tracer the trace the run joined (its creator's ``traceparent``) and keep
        the run's creation time and traceparent for its root span, as the lease carried
        them."""
        if lease.traceparent is not None:
            self.tracer.joined(lease.run_id, lease.traceparent)
        if lease.run_created_at is not None:
            self._run_traces[lease.run_id] = (lease.run_created_at, lease.traceparent)
            self._run_traces.move_to_end(lease.run_id)
            while len(self._run_traces) > RUN_TRACES_KEPT:
                self._run_traces.popitem(last=False)

    def _end_run_span_soon(self, agent: str, run_id: str, status: str) -> None:
        """The run's end is committed: end its root span, from the run's creation time as
        its lease carried it here, or once that time is read."""
        known = self._run_traces.pop(run_id, None)
        if known is not None:
            self.tracer.run_finished(agent, run_id, status, known[0], known[1])
            return
        read = asyncio.create_task(self._end_run_span(agent, run_id))
        self._span_reads.add(read)
        read.add_done_callback(self._span_reads.discard)

    async def _end_run_span(self, agent: str, run_id: str) -> None:
        """The run's root span starts when the run was created: read that once, at its end."""
        try:
            record = await self.runtime.store.get_run(run_id, agent)
        except Exception as exc:  # a span is not worth a failure
            log.debug("could not read run %s for its span: %s", run_id, exc)
            return
        if record is not None:
            self.tracer.run_finished(agent, run_id, record.status, record.created_at)


_IN_FLIGHT = frozenset({ev.ModelCallStarted.__name__, ev.ToolCallStarted.__name__})


def interrupted(events: Sequence[Event], epoch: int) -> bool:
    """Whether a stream just taken at ``epoch`` was left with work in flight by an earlier
    holder: its last event (checkpoints aside) started a model or tool call that has no
    result. That is a lease takeover after a crash, not a routine hand-over."""
    for event in reversed(events):
        if event.type == ev.TASK_CHECKPOINT:
            continue
        return event.type in _IN_FLIGHT and int(event.data.get("epoch", epoch)) < epoch
    if events and events[-1].type == ev.TASK_CHECKPOINT:  # the checkpoint closed that flush
        data = events[-1].data
        pending = [data.get("model_call_pending") or {}, *(data.get("pending_tools") or [])]
        return any(int(item.get("epoch", epoch)) < epoch for item in pending if item)
    return False
