"""The host API: ``toren.Runtime`` embeds Toren in an asyncio program; the CLI is built on it."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from toren.agents import AgentSpec, check_env, discover_agent_dirs, load_agents
from toren.config import Settings
from toren.core import events as ev
from toren.core.approvals import ApprovalRecord
from toren.core.attachments import Attachment, describe_file
from toren.core.events import Event, NewEvent
from toren.core.flow import run_flow
from toren.core.receipts import build_receipt, prompt_hashes
from toren.core.retention import ArchivedRunData
from toren.core.runs import RunRecord
from toren.core.schedules import ScheduleRecord
from toren.core.webhooks import WebhookSubscription, webhook_body
from toren.errors import (
    AgentDefinitionError,
    AgentNotRegistered,
    ConfigError,
    DriverNotFound,
    InvalidFlowControl,
    MissingEnvError,
    ProviderError,
    RunNotFound,
    RunNotUpgradable,
    TorenError,
)
from toren.execution.messages import MAIN_TASK, run_tick, task_message
from toren.files import FileNotFound
from toren.host.chat.context import RuntimeChannelContext
from toren.host.chat.pairing import decide_pairing, list_pairings
from toren.host.flow import check_flow_control
from toren.host.gc_tuning import tune_for_workers, untune_for_workers
from toren.host.lanes import agents_in_lane
from toren.host.live import LiveOrder, LiveTextHub
from toren.host.metrics import Metrics, MetricsListener
from toren.host.policies import ask_before_run_start, check_embedders, check_policies
from toren.host.relay import OutboxRelay
from toren.host.retention import is_archived
from toren.host.services import (
    ApprovalsService,
    ArchiveService,
    AuditLog,
    CostsService,
    DatabaseService,
    EvalsService,
    FilesService,
    FleetService,
    ForksService,
    KeysService,
    MemoryService,
    QuestionsService,
    RunsService,
    SchedulesService,
    SessionsService,
    SignalsService,
)
from toren.host.services.values import check_storable, checked_subject
from toren.host.versions import AgentVersions
from toren.host.watchdog import LoopWatchdog
from toren.host.webhooks import WebhookDispatcher, admit_webhooks
from toren.seams.archive import ArchiveBackend
from toren.seams.channels import Channel, ChannelContext
from toren.seams.drivers import driver_class
from toren.seams.model import Model
from toren.seams.plugins import PluginHost
from toren.seams.queue import Queue
from toren.seams.shapes import Migration, TextDelta
from toren.seams.store import Store
from toren.seams.store.channels import ChannelPairing
from toren.seams.store.schedules import FiredSlot, NewRun, SlotToFire
from toren.seams.store.webhooks import WebhookDelivery, WebhookDeliveryRecord
from toren.seams.telemetry import Tracer
from toren.seams.worker_runtime import WorkerRuntime

log = logging.getLogger(__name__)


def check_attachment_support(agent: AgentSpec, model: Model) -> None:
    """Refuse an agent with ``attachments: {unsupported: refuse}`` whose model (or fallback,
    or subagent's model) cannot take a kind it shows: at load, not when a file arrives."""
    policy = agent.attachments
    unseen = policy.unseen_kinds(model.input_types)
    if policy.unsupported != "refuse" or not unseen:
        return
    kinds = " or ".join("PDFs" if kind == "pdf" else "images" for kind in unseen)
    raise AgentDefinitionError(
        f"attachments.unsupported is refuse, but {model.model_id} (a model this agent uses) "
        f"cannot take {kinds}, which attachments.show lists; choose a model that can, leave "
        f"{' and '.join(unseen)} out of attachments.show, or set attachments.unsupported: text "
        "to pass such files as a note", path=str(agent.directory / "agent.yaml"))


class Runtime:
    """Toren in one process: plugins, agents, the store, the queue and (optionally) workers.

    Construction loads and validates everything that needs no database (plugins, agent
    directories, required environment, drivers), so a bad configuration fails before anything
    is created. ``start()`` connects, migrates and starts workers; ``stop()`` undoes it.

    The host API by noun is composed of services (``toren.host.services``: ``files``,
    ``keys``, ``database``, ``fleet``, ``runs``, ``schedules``, ``approvals``, ``forks``,
    ``archive``, ``sessions``); the Runtime's methods of those nouns (``list_approvals``,
    ``fork_run``, ``archive_runs``, ``send_message``, ...) are thin delegates of them, kept for
    code written against the Runtime (docs/reference/host-api.md, "Services").

    Args:
        dirs: agent directories (see ``toren.agents.discover_agent_dirs``); ``None`` means the
            current directory. Pass ``agents=`` instead to serve already loaded specs.
        settings: configuration; defaults to ``Settings.from_env()``.
        plugins: a loaded ``PluginHost``; defaults to loading per ``settings.load_plugins``.
    """

    def __init__(
        self,
        dirs: Sequence[Path] | None = None,
        *,
        settings: Settings | None = None,
        plugins: PluginHost | None = None,
        agents: Sequence[AgentSpec] | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self._models: dict[tuple[str, str | None], Model] = {}
        self._retired_models: list[Model] = []
        self._channels: list[Channel] = []
        self._watchdog: LoopWatchdog | None = None
        self.plugins = plugins or PluginHost(self.settings.load_plugins)
        if agents is None:
            agents = load_agents(discover_agent_dirs(dirs), self.plugins.tools, self.check_model,
                                 unavailable=self.plugins.unavailable_tools,
                                 channels=self.plugins.channels,
                                 tool_sources=self.plugins.tool_sources)
        self.agents: dict[str, AgentSpec] = {agent.name: agent for agent in agents}
        for agent in self.agents.values():
            for model_id in agent.model_ids:
                model = self.model(model_id, base_url=agent.base_url)  # baseUrl support, early
                check_attachment_support(agent, model)
        check_env(self.agents.values(), self._provider_env())
        check_policies(self.agents.values(), self.plugins.policies)
        check_embedders(self.agents.values(), self.plugins.embedders)
        for agent in self.agents.values():  # notify: needs a secret and allowed addresses
            admit_webhooks(agent.notify, self.settings, field=f"notify: of agent {agent.name}")
        self.store: Store = driver_class("store", self.settings.store_driver)(self.settings)
        self._queue_class = driver_class("queue", self.settings.queue_driver)
        check_flow_control(self.agents.values(), self.settings.queue_driver,
                           self._queue_class.flow_control)
        self._runtime_class = driver_class("runtime", self.settings.runtime_driver)
        self.queue: Queue | None = None
        self.workers: WorkerRuntime | None = None
        #: Feeds the queue from the store's outbox when the queue does not read it.
        self.relay: OutboxRelay | None = None
        #: Sends completion webhooks (``toren.host.webhooks``), started with the workers.
        self.webhooks: WebhookDispatcher | None = None
        #: Pieces of model text as they are generated, for live watchers (never durable).
        self.live = LiveTextHub(self.store)
        # each append tells whether the run is watched (postgres): no send for unwatched text
        self.store.on_run_watched(self.live.seen_watched)
        #: Which version of its agent's definition each run executes (``toren.host.versions``).
        self.versions = AgentVersions(
            self.store, self.agents, self.plugins.tools, self.plugins.unavailable_tools,
            recheck_s=max(0.2, min(2.0, self.settings.lease_ttl_s / 3)),
            known_models=self.check_model, tool_sources=self.plugins.tool_sources)
        # each append tells the run's version (postgres): no read per task message and step
        self.store.on_run_version(self.versions.seen)
        #: Prometheus metrics of this process (``/metrics``; ``toren.host.metrics``).
        self.metrics = Metrics(self.store, list(self.agents),
                               live_window_s=max(10.0, 3 * self.settings.lease_ttl_s))
        #: Spans of runs, tasks, model and tool calls: a no-op unless a ``toren.tracer``
        #: driver is configured (``TOREN_TRACER``, or an ``OTEL_EXPORTER_OTLP_ENDPOINT``).
        self.tracer: Tracer = self._make_tracer()
        # the host API by noun (``toren.host.services``): the server and the CLI call these,
        # never ``store``
        #: Uploaded files under the storage quota.
        self.files = FilesService(self.store, self.settings)
        #: API keys of the HTTP API.
        self.keys = KeysService(self.store)
        #: Opening the store without starting, and migrations.
        self.database = DatabaseService(self.store, list(self.agents.values()))
        #: Health, live workers, the fleet's snapshot, hot table sizes.
        self.fleet = FleetService(self.store, self.settings, list(self.agents),
                                  queue_depth=lambda: self.metrics.queue_depth)
        #: Archive passes (runs past their agent's ``retention:``) and archived runs read back.
        self.archive = ArchiveService(self.store, self.store, self.agents, self.settings)
        #: Pages of runs (hot and archived) and the reader of a run's events.
        self.runs = RunsService(self.store, list(self.agents), self.archive.events)
        #: The served agents' schedules: synced, fired once per slot, paused, triggered.
        self.schedules = SchedulesService(self.store, self.store, self.agents, self.versions,
                                          self.check_served, self._scheduled_run)
        #: Tool calls waiting for a person: listed, read, decided once.
        self.approvals = ApprovalsService(self.store, list(self.agents))
        #: What agents ask a person (``ask_user``): listed, read, answered once.
        self.questions = QuestionsService(self.store, list(self.agents))
        #: What agents remember (``memory:``): listed, read, corrected and erased by people.
        self.memory = MemoryService(self.store, list(self.agents))
        #: Durable conversations: opened, one message per turn, read back, closed.
        self.sessions = SessionsService(
            self.store, self.store, agents=list(self.agents), check_served=self.check_served,
            versions=self.versions, attach_files=self.attach_files,
            archived_run=self.archive.get, archived_events=self.archive.events,
            pending_approvals=self.approvals.pending, questions=self.questions,
            settings=self.settings, policies=self.plugins.policies)
        #: Signals to runs, which workflows (ctx.wait_for_signal) and tools
        #: (toren.wait_for_signal) wait for.
        self.signals = SignalsService(self.store, self.get_run, list(self.agents))
        #: The audit trail: who did what, recorded by the surfaces, read by ``toren audit``.
        self.audit = AuditLog(self.store)
        #: Forks of runs (a copied log, then live) and diffs between runs.
        self.forks = ForksService(self.store, self.store, self.store, self.check_model)
        #: What the served agents' model calls cost per day or week, and their budgets' use.
        self.costs = CostsService(self.store, self.store, self.agents, self.store)
        #: Evals: datasets run against the served version of an agent, graded and compared.
        self.evals = EvalsService(
            self.store, self.store, self.store, self.agents,
            start_run=lambda agent, input, key, definition=None: self.start_run(
                agent, input, idempotency_key=key, definition=definition),
            get_run=self.get_run, run_events=self.run_events, totals=self.runs.totals,
            model=self.model, fork=self.forks.fork, search=self.runs.search,
            load_version=self.versions.load, derive_with_model=self.versions.with_model,
            leases=self.store)
        #: What this runtime hands its channels (``Channel.start``, ``routes``,
        #: ``notify_elsewhere``): sessions, approvals and the channel stores, nothing more.
        self.channel_context: ChannelContext = RuntimeChannelContext(
            self.store, self.settings, self.channel_agents, self.sessions, self.approvals,
            self.audit)
        self._metrics_listener: MetricsListener | None = None
        #: Whether this runtime's workers hold the process's collector tuning (``gc_tuning``).
        self._gc_tuned = False
        self.started = False

    def _make_tracer(self) -> Tracer:
        """The configured tracer driver; the no-op one when none is. An OTLP endpoint set for
        other programs, without toren-otel installed, is a warning, not an error (only an
        explicit ``TOREN_TRACER`` insists)."""
        if not self.settings.tracer:
            return Tracer()
        try:
            tracer: Tracer = driver_class("tracer", self.settings.tracer)(self.settings)
        except DriverNotFound:
            if os.environ.get("TOREN_TRACER"):
                raise
            log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but toren-otel is not installed: "
                        "no traces (pip install toren-otel; TOREN_TRACER=none silences this)")
            return Tracer()
        return tracer

    async def embed(self, embedder: str, texts: Sequence[str]) -> list[list[float]]:
        """``texts`` as vectors by the registered embedder ``embedder``
        (``memory.embeddings``; ``register_embedders``)."""
        found = self.plugins.embedders.get(embedder)
        if found is None:
            raise ConfigError(f"no installed plugin registered the embedder {embedder!r}")
        return await found.embed(list(texts))

    def check_model(self, model_id: str) -> object:
        """Resolve a model id to its provider's ``Model``; ``ConfigError`` if none serves it."""
        return self.model(model_id)

    def model(self, model_id: str, *, base_url: str | None = None) -> Model:
        """The ``Model`` for an id (and an agent's ``baseUrl``), made once per process."""
        model = self._models.get((model_id, base_url))
        if model is None:
            provider = self.plugins.provider_for(model_id)
            if base_url is not None and not provider.supports_base_url:
                raise ConfigError(f"baseUrl is set for {model_id}, but the {provider.prefix!r} "
                                  "provider does not take a base URL; remove baseUrl")
            model = (provider.get_model(model_id, base_url=base_url)  # type: ignore[call-arg]
                     if base_url is not None else provider.get_model(model_id))
            self._models[(model_id, base_url)] = model
        return model

    async def forget_models(self) -> None:
        """Make model clients afresh from the next call on, reading the environment again (a
        key refreshed from secrets on SIGHUP). Calls in flight finish on the old clients,
        which are closed at ``stop``."""
        self._retired_models += self._models.values()
        self._models = {}

    def _provider_env(self) -> dict[str, list[str]]:
        needed: dict[str, list[str]] = {}
        for agent in self.agents.values():
            for model_id in agent.model_ids:
                needed.setdefault(agent.name, []).extend(
                    self.plugins.provider_for(model_id).required_env_for(model_id,
                                                                         agent.base_url))
        return needed

    async def start(self, *, workers: bool = True, migrate: bool = True) -> None:
        """Connect to the database, apply migrations, open the queue, start workers (and,
        for a queue that does not read the store's outbox, the outbox relay)."""
        await self.store.open()
        try:
            self._watchdog = LoopWatchdog(self.settings.blocked_loop_warn_s)
            await self._watchdog.start()
            if migrate:
                applied = await self.store.migrate(list(self.agents.values()))
                for migration in applied:
                    log.info("applied migration %s/%04d_%s", migration.scope, migration.version,
                             migration.name)
            self.queue = self._queue_class(self.settings, self.store)
            await self.queue.open()
            if not self.queue.reads_outbox:  # /metrics counts what the queue holds
                self.metrics.queue_depth = self.queue.depth
            if migrate:
                await self.versions.save_served()
            if workers and not self.settings.skip_preflight:
                await self.preflight()
            if workers and not self.queue.reads_outbox:
                self.relay = OutboxRelay(self.store, self.queue, list(self.agents),
                                         visibility_s=self.settings.lease_ttl_s,
                                         poll_interval_s=self.settings.poll_interval_s)
                await self.relay.start()
            if workers:
                self.webhooks = WebhookDispatcher(self.store, list(self.agents), self.settings,
                                                  self.webhook_body)
                await self.webhooks.start()
                await self.schedules.sync()
                self.workers = self._runtime_class(self.settings)
                await self.workers.start(self)
            if workers and self.settings.metrics_port is not None:
                self._metrics_listener = MetricsListener(
                    self.metrics, self.settings.metrics_host, self.settings.metrics_port)
                await self._metrics_listener.start()
        except BaseException:
            await self.stop()
            raise
        if workers and self.settings.gc_tuning and not self._gc_tuned:
            # what exists now lives as long as the workers
            tune_for_workers()
            self._gc_tuned = True
        self.started = True

    async def preflight(self) -> None:
        """One cheap authenticated call per model the served agents use (DESIGN rule 7).

        Raises ``ProviderError`` naming the agent and the model, so a worker with a broken key
        refuses to start instead of failing mid-run. ``TOREN_SKIP_PREFLIGHT=1`` skips it.
        """
        users: dict[tuple[str, str | None], list[str]] = {}
        for agent in self.agents.values():
            for model_id in agent.model_ids:
                users.setdefault((model_id, agent.base_url), []).append(agent.name)
        for (model_id, base_url), agents in users.items():
            try:
                await self.model(model_id, base_url=base_url).preflight()
            except TorenError as exc:
                raise ProviderError(
                    f"preflight of {model_id} (used by {', '.join(agents)}) failed: "
                    f"{exc.message}. Fix the credentials, or set TOREN_SKIP_PREFLIGHT=1 to "
                    "start anyway") from exc

    def channel_agents(self, channel: str) -> dict[str, dict[str, Any]]:
        """The served agents that list ``channel`` under ``channels:``, with their settings."""
        return {name: dict(agent.channels[channel]) for name, agent in self.agents.items()
                if channel in agent.channels}

    def listed_channels(self) -> list[Channel]:
        """The installed channels that at least one served agent lists (the ones to start)."""
        return [channel for name, channel in self.plugins.channels.items()
                if self.channel_agents(name)]

    async def start_channels(self) -> None:
        """Start every channel a served agent lists (``toren dev``), after checking the
        environment each needs (its ``required_env`` and what each agent's settings name)."""
        problems: list[str] = []
        for channel in self.listed_channels():
            for agent, settings in self.channel_agents(channel.name).items():
                for var in (*channel.required_env, *channel.required_env_for(settings)):
                    if not os.environ.get(var):
                        problems.append(f"{var} (needed by channel {channel.name} of agent "
                                        f"{agent})")
        if problems:
            raise MissingEnvError("missing environment variables for channels: "
                                  + ", ".join(dict.fromkeys(problems)))
        for channel in self.listed_channels():
            await channel.start(self.channel_context)
            self._channels.append(channel)

    async def list_pairings(self, status: str | None = "pending") -> list[ChannelPairing]:
        """Pairing requests of every chat channel and agent, newest first (``None``: every
        status); ``toren channels pair list``."""
        return await list_pairings(self.store, status)

    async def decide_pairing(self, code: str, outcome: str,
                             decided_by: str) -> tuple[ChannelPairing, bool]:
        """Approve or deny the pairing with ``code``; it and whether this call decided it
        (``toren.host.chat.pairing.decide_pairing``); ``toren channels pair approve|deny``."""
        return await decide_pairing(self.store, code, outcome, decided_by)

    async def notify_channels(self, agent: str, session_id: str, text: str) -> None:
        """Offer a notice committed to a session (a background run's result) to every channel
        ``agent`` lists: ``Channel.notify`` if the channel was started in this process, else
        ``Channel.notify_elsewhere`` (a worker beside the server). A channel's failure is
        logged: the transcript keeps the notice."""
        started = {channel.name for channel in self._channels}
        for channel in self.listed_channels():
            if agent not in self.channel_agents(channel.name):
                continue
            try:
                if channel.name in started:
                    await channel.notify(session_id, agent, text)
                else:
                    await channel.notify_elsewhere(self.channel_context, session_id, agent,
                                                   text)
            except Exception:
                log.exception("channel %s failed to take a notice for session %s",
                              channel.name, session_id)

    async def stop_channels(self) -> None:
        for channel in reversed(self._channels):
            try:
                await channel.stop()
            except Exception:
                log.exception("channel %s failed to stop", channel.name)
        self._channels.clear()

    async def stop(self) -> None:
        """Stop workers and the outbox relay, then close the queue and the store. Safe to
        call twice."""
        if self._metrics_listener is not None:
            await self._metrics_listener.stop()
            self._metrics_listener = None
        if self.workers is not None:
            await self.workers.stop()
            self.workers = None
        if self._gc_tuned:
            untune_for_workers()
            self._gc_tuned = False
        if self.relay is not None:
            await self.relay.stop()
            self.relay = None
        if self.webhooks is not None:
            await self.webhooks.stop()
            self.webhooks = None
        for model in [*self._models.values(), *self._retired_models]:
            try:
                await model.aclose()
            except Exception:
                log.exception("closing model %s failed", model.model_id)
        self._retired_models = []
        if self.queue is not None:
            await self.queue.close()
            self.queue = None
        await self.live.close()
        self.versions.close()
        await self.archive.close()
        # flushing spans may wait on the collector: not on the event loop
        await asyncio.to_thread(self.tracer.shutdown)
        await self.store.close()
        if self._watchdog is not None:
            await self._watchdog.stop()
            self._watchdog = None
        self.started = False

    def check_served(self, agent: str) -> AgentSpec:
        """The served agent named ``agent``, or ``ConfigError`` naming the served ones.

        Needs no database: commands given an agent name call it before ``start()``, so a
        misspelt name fails at once and creates nothing.
        """
        spec = self.agents.get(agent)
        if spec is not None:
            return spec
        served = ", ".join(self.agents) or "none"
        by_directory = [spec.name for spec in self.agents.values()
                        if spec.directory.name == agent]
        hint = (f" (the directory {agent} holds the agent {by_directory[0]!r}: an agent's "
                "name is the `name:` in its agent.yaml)" if by_directory else "")
        raise ConfigError(f"agent {agent!r} is not served here; served agents: {served}{hint}")

    async def pending_migrations(self) -> list[Migration]:
        """``DatabaseService.pending_migrations`` (kept for compatibility)."""
        return await self.database.pending_migrations()

    def describe(self) -> dict[str, Any]:
        """What this runtime serves and where its state lives (printed by ``toren dev``)."""
        return {
            "database": self.database.description,
            "queue": self.queue.description if self.queue else None,
            "workers": self.workers.description if self.workers else None,
            "lane": self.settings.lane,
            "agents": [agent.to_json() for agent in self.agents.values()],
        }

    @property
    def lane_agents(self) -> list[str]:
        """The served agents this process's workers claim: those of ``settings.lane``
        (``TOREN_LANE``, ``toren worker --lane``; ``toren.host.lanes``)."""
        return agents_in_lane(self.agents.values(), self.settings.lane)

    # -- runs ----------------------------------------------------------------------------------

    async def attach_files(self, agent: str, text: Any, file_ids: Sequence[str] | None
                           ) -> tuple[Any, tuple[Attachment, ...]]:
        """``text`` with a note listing uploaded files (name, type, size, id) appended, so
        the agent can read them with its tools (``read_document``), and the attachments its
        model is shown (images and PDFs, as ``attachments:`` and the model allow); ``text``
        itself and none without files.

        Raises ``FileNotFound`` for an unknown id and ``ConfigError`` when ``text`` is not a
        string (files attach to a text input or message).
        """
        if not file_ids:
            return text, ()
        if not isinstance(text, str):
            raise ConfigError("files can be attached to a text input or message only; "
                              "send the input as a string")
        if not isinstance(file_ids, list | tuple) or not all(
                isinstance(file_id, str) for file_id in file_ids) or len(file_ids) > 100:
            raise ConfigError("'files' is a list of at most 100 file ids (strings)")
        spec = self.agents[agent]
        model = self.model(spec.model, base_url=spec.base_url)
        lines = ["Attached files (read them with read_document, passing the id):"]
        shown: list[Attachment] = []
        for file_id in dict.fromkeys(file_ids):
            stored = await self.store.get_file(file_id)
            if stored is None:
                raise FileNotFound(f"no file has the id {file_id!r}; upload it first "
                                   "(POST /files, toren files add)")
            # read only what the model is shown, for its pixels or pages
            found = (await self.store.read_file(file_id)
                     if spec.attachments.shows(stored.content_type, model.input_types)
                     else None)
            line = (f"- {stored.name} ({stored.content_type}, {stored.size_bytes:,} bytes): "
                    f"id {stored.id}")
            if found is not None:
                shown.append(describe_file(file_id=stored.id, name=stored.name,
                                           content_type=stored.content_type,
                                           size_bytes=stored.size_bytes, sha256=stored.sha256,
                                           data=found[1]))
                line += " (attached: you can see it)"
            lines.append(line)
        return f"{text}\n\n" + "\n".join(lines) if text else "\n".join(lines), tuple(shown)

    async def start_run(self, agent: str, input: Any, *,
                        idempotency_key: str | None = None,
                        files: Sequence[str] | None = None,
                        traceparent: str | None = None,
                        webhooks: Sequence[WebhookSubscription] = (),
                        priority: int | None = None, subject: str | None = None,
                        definition: AgentSpec | None = None) -> str:
        """Create a run of ``agent`` and queue its first task; return the run id.

        With an ``idempotency_key`` already used for this agent, returns that run's id instead.
        ``files`` are ids of uploaded files to attach to a text input (``attach_files``).
        ``traceparent`` (a W3C traceparent, ``parse_traceparent``'s) puts the run's spans in
        the caller's trace; it is kept in the run's ``RunCreated``. ``webhooks`` are told
        when the run ends (and parks, if they ask): docs/guides/webhooks.md. ``priority``
        (-100..100; ``None``: the agent's ``priority:``) orders its work in the queue, and its
        input must hold the agent's concurrency key if it names one (``InvalidFlowControl``
        otherwise): docs/guides/flow-control.md. ``subject`` names whom the run is about: its
        agent's ``user`` memories are this subject's (``memory:``; docs/guides/memory.md;
        ``InvalidMemory`` when it cannot be one). ``definition``: pin the run to this
        definition of ``agent`` (a kept version, loaded: ``versions.load``) instead of the
        served one; the workers serving the agent run it on that version (an eval's case
        runs, docs/guides/evals.md).
        """

        self.check_served(agent)
        subject = checked_subject(subject)
        if priority not in (None, 0) and not self._queue_class.flow_control:
            raise InvalidFlowControl(
                f"priority: TOREN_QUEUE={self.settings.queue_driver} delivers in its own order "
                "(it has no priorities); leave priority out, or use TOREN_QUEUE=postgres")
        kept_webhooks = admit_webhooks(webhooks, self.settings)
        input, attachments = await self.attach_files(agent, input, files)
        check_storable(input, "input")
        check_storable(idempotency_key, "idempotency key")
        await ask_before_run_start(self.plugins.policies, definition or self.agents[agent],
                                   input, idempotency_key)
        if definition is not None and definition.version is not None:
            await self.store.save_agent_version(agent, definition.version)
        else:
            await self.versions.save(agent)  # kept before the run that names it
        new = self._new_run(agent, input, idempotency_key, traceparent=traceparent,
                            attachments=attachments, priority=priority, subject=subject,
                            definition=definition)
        found, _created = await self.store.create_run(
            agent, new.run_id, input, idempotency_key=idempotency_key, events=new.events,
            messages=new.messages, webhooks=kept_webhooks, priority=new.priority,
            concurrency_key=new.concurrency_key)
        return found

    def _new_run(self, agent: str, input: Any, idempotency_key: str | None,
                 fired: ev.ScheduleFired | None = None, *,
                 traceparent: str | None = None,
                 attachments: tuple[Attachment, ...] = (),
                 priority: int | None = None, subject: str | None = None,
                 definition: AgentSpec | None = None) -> NewRun:
        """The id, first events and first message of a new run of ``agent`` (on
        ``definition`` when given, else the served one), with its priority and concurrency
        key (``InvalidFlowControl`` for an unusable one)."""
        spec = definition or self.agents[agent]
        run_id = str(uuid.uuid4())
        chosen, key = run_flow(spec.concurrency, spec.priority, input, run_id=run_id,
                               priority=priority,
                               fallback_key=f"schedule:{fired.schedule}" if fired else None)
        events = [NewEvent.of(ev.RunCreated(agent=agent, input=input,
                                            idempotency_key=idempotency_key,
                                            traceparent=traceparent, priority=chosen or None,
                                            concurrency_key=key, subject=subject))]
        if fired is not None:
            events.append(NewEvent.of(fired))
        if spec.workflow is None:
            events.append(NewEvent.of(ev.TaskScheduled(task_id=MAIN_TASK, subagent=None,
                                                       input=input)))
            first = task_message(MAIN_TASK, None, input, attachments=attachments)
        else:
            first = run_tick("created")  # the orchestrator runs workflow.py
        pinned = (self.versions.pin_event(agent) if definition is None
                  else NewEvent.of(ev.AgentVersionPinned(
                      version=definition.version.hash, human_version=definition.version.human))
                  if definition.version is not None else None)
        if pinned is not None:  # last, so the run's first events read as they always did
            events.append(pinned)
        return NewRun(run_id=run_id, input=input, idempotency_key=idempotency_key,
                      events=events, messages=[first], priority=chosen, concurrency_key=key)

    async def get_run(self, run_id: str) -> RunRecord:
        """The run's current row; ``RunNotFound`` if no registered agent has it. An archived
        run's row comes from the archive index (``record.extra["archive"]``)."""
        record = await self.store.get_run(run_id)
        if record is None or record.status in ev.TERMINAL_STATUSES:
            # indexed but not yet purged (a pass died mid-purge): the archive is the whole run
            archived = await self.archive.get(run_id, record.agent if record else None)
            record = archived or record
        if record is None:
            raise RunNotFound(f"no run {run_id!r} in this database (see `toren jobs list`)")
        return record

    async def wait_for_run(self, run_id: str, *, timeout_s: float | None = None,
                           poll_s: float = 0.1) -> RunRecord:
        """Wait until the run is terminal; ``TimeoutError`` after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            record = await self.get_run(run_id)
            if record.status in ev.TERMINAL_STATUSES:
                return record
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} is still {record.status} after {timeout_s}s")
            await asyncio.sleep(poll_s)

    async def events(self, run_id: str) -> list[Event]:
        """Every event of the run, all streams, in commit order."""
        return await self.run_events(await self.get_run(run_id))

    async def run_events(self, record: RunRecord,
                         after: Mapping[str, int] | None = None) -> list[Event]:
        """The events of the run ``record`` is the row of (``after``: stream -> last seq
        seen), from the hot tables or, for an archived run, its archive object."""
        if is_archived(record):
            position = dict(after or {})
            return [e for e in await self.archive.events(record)
                    if e.seq > position.get(e.stream, 0)]
        return await self.store.load_events(record.agent, record.id, after)

    async def follow(self, run_id: str, *, after: Mapping[str, int] | None = None,
                     poll_s: float = 0.1) -> AsyncIterator[Event]:
        """Yield the run's events as they are appended, each once, until the run is terminal.

        ``after`` (stream -> last seq seen, see ``toren.server.cursors``) resumes a reader.
        """
        position = dict(after or {})
        record = await self.get_run(run_id)
        while True:
            terminal = record.status in ev.TERMINAL_STATUSES
            for event in await self.run_events(record, position):
                position[event.stream] = max(position.get(event.stream, 0), event.seq)
                yield event
            if terminal:
                return
            await asyncio.sleep(poll_s)
            record = await self.get_run(run_id)

    async def follow_live(self, run_id: str, *, after: Mapping[str, int] | None = None,
                          poll_s: float = 0.1) -> AsyncIterator[Event | TextDelta]:
        """``follow``, with the pieces of model text (``TextDelta``) as they are generated in
        between: a call's pieces come before its ``ModelCallCompleted`` (pieces of a call
        already completed are skipped). Pieces are best-effort (see ``toren.host.live``);
        the events are all there, each once.
        """
        position = dict(after or {})
        record = await self.get_run(run_id)
        order = LiveOrder()
        with self.live.watch(run_id) as pieces:
            while True:
                terminal = record.status in ev.TERMINAL_STATUSES
                for event in await self.run_events(record, position):
                    position[event.stream] = max(position.get(event.stream, 0), event.seq)
                    yield event
                    for piece in order.saw(event):
                        yield piece
                if terminal:
                    return
                deadline = time.monotonic() + poll_s
                while (remaining := deadline - time.monotonic()) > 0:
                    try:
                        async with asyncio.timeout(remaining):
                            piece = await pieces.get()
                    except TimeoutError:
                        break
                    admitted = order.admit(piece)
                    if admitted == "now":
                        yield piece
                    elif admitted == "held":
                        break  # its call's start is committed: read it now
                record = await self.get_run(run_id)

    async def cancel_run(self, run_id: str, reason: str = "cancelled by request") -> RunRecord:
        """Retire the run now: status ``cancelled``; queued work and retries become no-ops."""
        record = await self.store.cancel_run(run_id, reason)
        if record is None:
            # an archived run ended long ago: there is nothing left to cancel
            record = await self.archive.get(run_id)
            if record is not None:
                return record
            raise RunNotFound(f"no run {run_id!r} in this database (see `toren jobs list`)")
        if record.status == "cancelled":
            await self.store.cancel_approvals(run_id)
            await self.store.cancel_questions(run_id)
        # the runs its tasks started (peer calls, background runs) go with it, depth first
        for child in await self.store.child_runs(record.id):
            if child.status not in ev.TERMINAL_STATUSES:
                await self.cancel_run(child.id, f"its caller {record.agent} run {record.id} "
                                                f"was cancelled")
        return record

    async def send_signal(self, run_id: str, name: str, payload: Any = None, *,
                          idempotency_key: str | None = None,
                          sent_by: str | None = None) -> dict[str, Any]:
        """Send signal ``name`` (with a JSON ``payload``) to a run; see
        ``SignalsService.send`` (``RunFinishedError`` once the run has finished)."""
        return await self.signals.send(run_id, name, payload, idempotency_key=idempotency_key,
                                       sent_by=sent_by)

    async def children(self, run_id: str) -> list[RunRecord]:
        """The runs that this run's tasks started: its peer calls (``child_kind`` ``peer``)
        and background runs (``background``), oldest first, in every agent's schema."""
        record = await self.get_run(run_id)
        return await self.store.child_runs(record.id)

    async def list_runs(self, *, agent: str | None = None, status: str | None = None,
                        limit: int = 50, kind: str | None = None,
                        schedule: str | None = None) -> list[RunRecord]:
        """Newest first; ``kind`` is ``run`` or ``session`` (``None``: both); ``schedule``:
        only runs that schedule started."""
        if status is not None and status not in ev.RUN_STATUSES:
            raise ConfigError(f"unknown status {status!r}; one of {', '.join(ev.RUN_STATUSES)}")
        return await self.store.list_runs(agent=agent, status=status, limit=limit, kind=kind,
                                          schedule=schedule)

    async def webhook_body(self, delivery: WebhookDelivery) -> dict[str, Any]:
        """The JSON body of a completion webhook: the run as it is now, its status at the
        event and its receipt's totals. Called by the dispatcher at a delivery's first try."""
        receipt = await self.receipt(delivery.run_id)
        return webhook_body(event_id=delivery.id, event=delivery.event,
                            status=delivery.run_status, occurred_at=delivery.occurred_at,
                            run=receipt["run"], totals=receipt["totals"])

    async def webhook_deliveries(self, run_id: str) -> list[WebhookDeliveryRecord]:
        """The run's completion webhook deliveries, each with its attempts
        (``RunNotFound`` for an unknown run)."""
        record = await self.get_run(run_id)
        return await self.store.webhook_deliveries(record.id)

    async def receipt(self, run_id: str) -> dict[str, Any]:
        """What the run did and cost: every model and tool call, totals, why it stopped, and
        the text of every system prompt its tasks ran with (``prompts``, by SHA-256)."""
        record = await self.get_run(run_id)
        events = await self.run_events(record)
        prompts = await self.store.load_prompts(record.agent, prompt_hashes(events))
        return build_receipt(record, events, prompts, await self.budget(record, events))

    async def budget(self, record: RunRecord,
                     events: Sequence[Event] = ()) -> dict[str, Any] | None:
        """The run's spend against ``limits.maxBudgetUsd`` and its agent's spend today against
        ``limits.dailyBudgetUsd``, from the budget ledger; ``None`` when the agent has neither.

        The budgets come from the agent's definition when this runtime serves it, else from
        the run's ``BudgetReserved`` events (``toren jobs show`` loads no agent directory).
        """
        spec = self.agents.get(record.agent)
        if spec is not None:
            run_budget = spec.limits.max_budget_usd
            daily_budget = spec.limits.daily_budget_usd
        else:
            budgets = {s["scope"]: s["budget_usd"] for e in events
                       if e.type == ev.BUDGET_RESERVED for s in e.data["spend"]}
            run_budget, daily_budget = budgets.get("run"), budgets.get("daily")
        if run_budget is None and daily_budget is None:
            return None
        return await self.store.spend(record.agent, record.id, run_budget, daily_budget)

    # -- archive ------------------------------------------------------------------------------

    # retention: thin delegates of ``self.archive`` (``ArchiveService``), kept for compatibility
    # with code written against the Runtime

    def archive_backend(self) -> ArchiveBackend:
        """``ArchiveService.backend``."""
        return self.archive.backend()

    def retentions(self) -> dict[str, float]:
        """``ArchiveService.retentions``."""
        return self.archive.retentions()

    async def archive_runs(self, *, dry_run: bool = False,
                           max_runs: int | None = None) -> dict[str, Any]:
        """``ArchiveService.archive_due``."""
        return await self.archive.archive_due(dry_run=dry_run, max_runs=max_runs)

    async def archived_run(self, run_id: str, agent: str | None = None) -> RunRecord | None:
        """``ArchiveService.get``."""
        return await self.archive.get(run_id, agent)

    async def archived_events(self, record: RunRecord) -> list[Event]:
        """``ArchiveService.events``."""
        return await self.archive.events(record)

    async def read_archived_run(self, record: RunRecord) -> ArchivedRunData:
        """``ArchiveService.read``."""
        return await self.archive.read(record)

    async def list_archived_runs(self, *, agent: str | None = None, limit: int = 50,
                                 before: tuple[datetime, str] | None = None
                                 ) -> list[RunRecord]:
        """``ArchiveService.list``."""
        return await self.archive.list(agent=agent, limit=limit, before=before)

    async def restore_run(self, run_id: str) -> RunRecord:
        """``ArchiveService.restore``."""
        return await self.archive.restore(run_id)

    async def close_archive(self) -> None:
        """``ArchiveService.close`` (``stop`` calls it)."""
        await self.archive.close()

    # -- forks --------------------------------------------------------------------------------

    # forks: thin delegates of ``self.forks`` (``ForksService``), kept for compatibility with
    # code written against the Runtime

    async def fork_run(self, run_id: str, at_step: int, *, prompt: str | None = None,
                       model: str | None = None) -> RunRecord:
        """``ForksService.fork``."""
        return await self.forks.fork(run_id, at_step, prompt=prompt, model=model)

    async def fork_of(self, run_id: str) -> dict[str, Any] | None:
        """``ForksService.fork_of``."""
        return await self.forks.fork_of(run_id)

    async def diff_runs(self, run_a: str, run_b: str) -> dict[str, Any]:
        """``ForksService.diff``."""
        return await self.forks.diff(run_a, run_b)

    # -- approvals ----------------------------------------------------------------------------

    # approvals: thin delegates of ``self.approvals`` (``ApprovalsService``), kept for
    # compatibility with code written against the Runtime

    async def list_approvals(self, *, agent: str | None = None, run_id: str | None = None,
                             status: str | None = None, limit: int = 50
                             ) -> list[ApprovalRecord]:
        """``ApprovalsService.list``."""
        return await self.approvals.list(agent=agent, run_id=run_id, status=status,
                                         limit=limit)

    async def get_approval(self, approval_id: str) -> ApprovalRecord:
        """``ApprovalsService.get``."""
        return await self.approvals.get(approval_id)

    async def approve(self, approval_id: str, *, decided_by: str,
                      reason: str | None = None, digest: str | None = None,
                      scope: str = "call") -> ApprovalRecord:
        """``ApprovalsService.approve``."""
        return await self.approvals.approve(approval_id, decided_by=decided_by, reason=reason,
                                            digest=digest, scope=scope)

    async def deny(self, approval_id: str, *, decided_by: str,
                   reason: str | None = None, digest: str | None = None) -> ApprovalRecord:
        """``ApprovalsService.deny``."""
        return await self.approvals.deny(approval_id, decided_by=decided_by, reason=reason,
                                         digest=digest)

    async def decide_approval(self, approval_id: str, outcome: str, *, decided_by: str,
                              reason: str | None = None, digest: str | None = None,
                              scope: str = "call", arguments: dict[str, Any] | None = None,
                              answer: str | None = None) -> ApprovalRecord:
        """``ApprovalsService.decide``."""
        return await self.approvals.decide(approval_id, outcome, decided_by=decided_by,
                                           reason=reason, digest=digest, scope=scope,
                                           arguments=arguments, answer=answer)

    async def pending_approvals(self, run_id: str) -> list[dict[str, Any]]:
        """``ApprovalsService.pending``."""
        return await self.approvals.pending(run_id)

    # -- schedules -----------------------------------------------------------------------------

    # schedules: thin delegates of ``self.schedules`` (``SchedulesService``), kept for
    # compatibility with code written against the Runtime

    @property
    def has_schedules(self) -> bool:
        """Whether any served agent lists ``schedules:`` (``SchedulesService.any``)."""
        return self.schedules.any

    async def sync_schedules(self) -> None:
        """``SchedulesService.sync``."""
        await self.schedules.sync()

    def _scheduled_run(self, slot: SlotToFire) -> NewRun:
        """The run a claimed slot starts (called by the store inside the claiming transaction).
        """
        slot_iso = slot.slot_at.astimezone(UTC).isoformat()
        fired = ev.ScheduleFired(schedule=slot.schedule, slot=slot_iso,
                                 trigger=slot.trigger,  # type: ignore[arg-type]
                                 timezone=slot.timezone)
        return self._new_run(slot.agent, slot.input, f"schedule:{slot.schedule}:{slot_iso}",
                             fired)

    async def fire_due_schedules(self) -> list[FiredSlot]:
        """``SchedulesService.fire_due``: call it yourself when embedding without workers."""
        return await self.schedules.fire_due()

    async def list_schedules(self, agent: str | None = None) -> list[ScheduleRecord]:
        """``SchedulesService.list``."""
        return await self.schedules.list(agent)

    async def get_schedule(self, agent: str, name: str) -> ScheduleRecord:
        """``SchedulesService.get``."""
        return await self.schedules.get(agent, name)

    async def pause_schedule(self, agent: str, name: str) -> ScheduleRecord:
        """``SchedulesService.pause``."""
        return await self.schedules.pause(agent, name)

    async def resume_schedule(self, agent: str, name: str) -> ScheduleRecord:
        """``SchedulesService.resume``."""
        return await self.schedules.resume(agent, name)

    async def trigger_schedule(self, agent: str, name: str) -> FiredSlot:
        """``SchedulesService.trigger``."""
        return await self.schedules.trigger(agent, name)

    # -- sessions ------------------------------------------------------------------------------

    # sessions: thin delegates of ``self.sessions`` (``SessionsService``), kept for
    # compatibility with code written against the Runtime

    async def start_session(self, agent: str, *, idempotency_key: str | None = None,
                            traceparent: str | None = None,
                            webhooks: Sequence[WebhookSubscription] = (),
                            subject: str | None = None) -> str:
        """``SessionsService.start``."""
        return await self.sessions.start(agent, idempotency_key=idempotency_key,
                                         traceparent=traceparent, webhooks=webhooks,
                                         subject=subject)

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """``SessionsService.get``."""
        return await self.sessions.get(session_id)

    # questions: ``ask_user`` (``QuestionsService``) ----------------------------------------

    async def answer_question(self, run_id: str, question_id: str, answer: str, *,
                              answered_by: str) -> dict[str, Any]:
        """``QuestionsService.answer``: the question answered, as JSON."""
        record = await self.questions.answer(run_id, question_id, answer,
                                             answered_by=answered_by)
        return record.to_json()

    async def send_message(self, session_id: str, text: str, *,
                           idempotency_key: str | None = None,
                           files: Sequence[str] | None = None) -> int:
        """``SessionsService.send``."""
        return await self.sessions.send(session_id, text, idempotency_key=idempotency_key,
                                        files=files)

    async def close_session(self, session_id: str, reason: str = "closed by the user") -> None:
        """``SessionsService.close``."""
        await self.sessions.close(session_id, reason)

    async def wait_for_turn(self, session_id: str, *, timeout_s: float | None = None,
                            poll_s: float = 0.1) -> dict[str, Any]:
        """``SessionsService.wait_for_turn``."""
        return await self.sessions.wait_for_turn(session_id, timeout_s=timeout_s,
                                                 poll_s=poll_s)

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # -- agent versions (issue 26 part 2) ------------------------------------------------------

    async def upgrade_run(self, run_id: str, *, requested_by: str | None = None
                          ) -> dict[str, Any]:
        """Move an unfinished run to the version of its agent this runtime serves (its
        directory now), recorded as ``AgentVersionUpgraded``: later steps run on it, a task
        in flight switches before its next model call, a workflow replays under its code.

        Returns ``{"run_id", "from_version", "version", "human_version", "upgraded"}``
        (``upgraded`` is ``False`` when the run was on that version already). Raises
        ``RunNotFound``, ``ConfigError`` when the agent is not served here (the new version
        comes from a directory), ``RunNotUpgradable`` for a finished run.
        """
        record = await self.get_run(run_id)
        spec = self.check_served(record.agent)
        version = await self.versions.save(record.agent)
        if version is None:
            raise ConfigError(f"agent {record.agent!r} has no version to upgrade to")
        for _ in range(5):
            found, current = await self.store.run_agent_version(record.agent, record.id)
            status = (await self.get_run(record.id)).status
            if not found or status in ev.TERMINAL_STATUSES:
                raise RunNotUpgradable(f"run {record.id} has ended ({status}); only a run "
                                       "that has not finished can be upgraded")
            result = {"run_id": record.id, "agent": spec.name, "from_version": current,
                      "version": version.hash, "human_version": version.human,
                      "upgraded": False}
            if current == version.hash:
                return result
            event = ev.AgentVersionUpgraded(version=version.hash, human_version=version.human,
                                            from_version=current, reason="requested",
                                            requested_by=requested_by)
            if await self.store.set_run_version(record.agent, record.id, current,
                                                [NewEvent.of(event)]):
                return result | {"upgraded": True}
        raise RunNotUpgradable(f"the version of run {record.id} kept changing; try again")

    async def agent_versions(self, agent: str) -> dict[str, Any]:
        """Every version of ``agent`` kept in the database, newest first, with how many runs
        are on each (``active_runs``: not finished); ``current`` is the version this runtime
        serves (``None`` when it does not serve the agent). ``AgentNotRegistered`` if no
        agent of that name has a schema here."""
        if agent not in await self.store.registered_agents():
            raise AgentNotRegistered(f"no agent {agent!r} in this database (its schema is "
                                     "created when a process serving it starts)")
        spec = self.agents.get(agent)
        current = spec.version.hash if spec is not None and spec.version else None
        versions = await self.store.list_agent_versions(agent)
        return {"agent": agent, "current": current,
                "versions": [v.to_json() | {"current": v.hash == current} for v in versions]}

