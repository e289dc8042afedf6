"""Settings read from the environment (every option has a ``TOREN_*`` variable)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from toren import crashpoints
from toren.errors import ConfigError

T = TypeVar("T", int, float)


@dataclass(frozen=True)
class Settings:
    """Process-wide configuration, resolved once at startup.

    ``database_url`` is ``None`` when ``DATABASE_URL`` is unset: the store driver then starts
    (or joins) the embedded Postgres under ``home``.
    """

    database_url: str | None = None
    home: Path = field(default_factory=lambda: Path.cwd() / ".toren")
    queue_driver: str = "postgres"
    store_driver: str = "postgres"
    runtime_driver: str = "inprocess"
    load_plugins: tuple[str, ...] | None = None
    connect_timeout_s: float = 5.0
    concurrency: int = 8
    #: Database connections per process; tasks hold one only while a statement runs.
    pool_size: int = 10
    #: Seconds a lease (and a claimed message) lives without renewal; a dead worker's work is
    #: picked up by another within about this long. Renewed every third of it while working.
    lease_ttl_s: float = 5.0
    #: Fallback poll when no notification arrives (delayed messages, lost notifications).
    poll_interval_s: float = 1.0
    guardian_interval_s: float = 5.0
    #: Longest a worker waits between looks for due schedules (it wakes sooner for a slot it
    #: knows of).
    schedule_interval_s: float = 5.0
    #: Deliveries of one message without completion before it is dead-lettered.
    max_deliveries: int = 5
    retry_base_s: float = 1.0
    retry_max_delay_s: float = 300.0
    retry_max_attempts: int = 20
    shutdown_grace_s: float = 10.0
    #: Sync tool calls that run at once in this process (each in its own thread); more wait.
    tool_threads: int = 16
    #: Seconds the event loop may be blocked before the watchdog names the code blocking it.
    blocked_loop_warn_s: float = 1.0
    #: Live event streams (SSE) one API key may hold open on one server process at once; with
    #: keys off (loopback ``toren dev``), all the process's streams together.
    max_streams_per_key: int = 100
    #: File uploads (``POST /files``) one API key may start per minute on one server process,
    #: in bursts of as many; with keys off, all of the process's uploads together.
    max_uploads_per_minute: int = 60
    #: Bytes of distinct file content the deployment stores at most (uploads past it: 507).
    max_total_file_bytes: int = 10 * 1024**3
    #: Largest file in bytes: an upload (413 past it) or a file a tool returns to show the
    #: model (``TOREN_MAX_FILE_BYTES``; ``toren.files.max_file_bytes`` reads the same).
    max_file_bytes: int = 50 * 1024**2
    #: Events between task checkpoints: a resume reads at most this many events plus one
    #: checkpoint, however long the task's log.
    checkpoint_every: int = 1000
    #: Skip the one cheap authenticated call per model provider at worker start.
    skip_preflight: bool = False
    #: Named crash points for reliability tests (``toren.crashpoints``); empty in production.
    crash_at: Mapping[str, int] = field(default_factory=dict)
    crash_once: Path | None = None
    #: Seconds a database call waits for a pool connection (and the pool retries a lost
    #: connection) before failing with ``DatabaseUnavailable`` (503 on the HTTP API).
    pool_timeout_s: float = 5.0
    #: Host names the HTTP API answers to without keys, besides loopback and the bound address.
    allowed_hosts: tuple[str, ...] = ()
    #: HTTP server limits: seconds to send a request's headers, seconds to send its body,
    #: seconds an idle keep-alive connection stays open, and open connections at most.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 75.0
    max_connections: int = 1000
    #: Cross-agent calls one chain may nest (A asks B asks C ...); a call beyond is refused
    #: with a tool error, which bounds cycles such as A asks B asks A.
    max_call_depth: int = 5
    #: Appends of concurrent tasks share one transaction (one commit), each still checked
    #: against its own lease and sequence numbers (see toren_postgres.group_commit).
    group_commit: bool = True
    #: While workers run, the process's cyclic garbage collector skips what existed when they
    #: started and runs its young passes less often (``toren.host.gc_tuning``); ``False`` (for
    #: a process that tunes its collector itself) leaves it alone.
    gc_tuning: bool = True
    #: Retention (docs/guides/retention.md): where archived runs go (``file:///dir`` or
    #: ``s3://bucket/prefix``; ``None``: nothing is archived), the age after which a finished
    #: run of an agent without ``retention:`` is archived (``None``: never), seconds between
    #: the elected worker's archive passes, and events deleted per short transaction.
    archive_url: str | None = None
    default_retention_s: float | None = None
    archive_interval_s: float = 3600.0
    archive_batch: int = 1000
    #: Most bytes read from (and decompressed from) an archive object whose size the archive
    #: index did not record (runs archived before Toren recorded digests); ``TOREN_ARCHIVE_MAX_MB``.
    archive_max_bytes: int = 256 * 1024 * 1024
    #: A port for the worker's ``/metrics`` listener (Prometheus); ``None``: no listener.
    metrics_port: int | None = None
    #: The interface that listener binds (``0.0.0.0`` in a container).
    metrics_host: str = "127.0.0.1"
    #: ``/metrics`` on the API server without an API key (it holds no prompts or secrets).
    metrics_public: bool = False
    #: The ``toren.tracer`` driver (``otel``), or ``None`` for no tracing (the default unless
    #: ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set).
    tracer: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        load = env.get("TOREN_LOAD_PLUGINS")
        home = env.get("TOREN_HOME")
        concurrency = positive_number(env, "TOREN_CONCURRENCY", 8, int)
        return cls(
            database_url=env.get("DATABASE_URL") or None,
            home=Path(home).expanduser().resolve() if home else Path.cwd() / ".toren",
            queue_driver=env.get("TOREN_QUEUE") or "postgres",
            store_driver=env.get("TOREN_STORE") or "postgres",
            runtime_driver=env.get("TOREN_RUNTIME") or "inprocess",
            load_plugins=None if load is None else tuple(
                name.strip() for name in load.split(",") if name.strip()
            ),
            connect_timeout_s=positive_number(env, "TOREN_CONNECT_TIMEOUT", 5.0, float),
            concurrency=concurrency,
            pool_size=positive_number(env, "TOREN_POOL_SIZE", 10, int),
            lease_ttl_s=positive_number(env, "TOREN_LEASE_TTL", 5.0, float),
            poll_interval_s=positive_number(env, "TOREN_POLL_INTERVAL", 1.0, float),
            guardian_interval_s=positive_number(env, "TOREN_GUARDIAN_INTERVAL", 5.0, float),
            schedule_interval_s=positive_number(env, "TOREN_SCHEDULE_INTERVAL", 5.0, float),
            max_deliveries=positive_number(env, "TOREN_MAX_DELIVERIES", 5, int),
            retry_base_s=positive_number(env, "TOREN_RETRY_BASE", 1.0, float),
            retry_max_delay_s=positive_number(env, "TOREN_RETRY_MAX_DELAY", 300.0, float),
            retry_max_attempts=positive_number(env, "TOREN_RETRY_MAX_ATTEMPTS", 20, int),
            shutdown_grace_s=positive_number(env, "TOREN_SHUTDOWN_GRACE", 10.0, float),
            tool_threads=positive_number(env, "TOREN_TOOL_THREADS", 2 * concurrency, int),
            blocked_loop_warn_s=positive_number(env, "TOREN_BLOCKED_LOOP_WARN", 1.0, float),
            max_streams_per_key=positive_number(env, "TOREN_MAX_STREAMS_PER_KEY", 100, int),
            max_uploads_per_minute=positive_number(env, "TOREN_MAX_UPLOADS_PER_MINUTE", 60,
                                                   int),
            max_total_file_bytes=positive_number(env, "TOREN_MAX_TOTAL_FILE_BYTES",
                                                 10 * 1024**3, int),
            max_file_bytes=positive_number(env, "TOREN_MAX_FILE_BYTES", 50 * 1024**2, int),
            checkpoint_every=positive_number(env, "TOREN_CHECKPOINT_EVERY", 1000, int),
            skip_preflight=env.get("TOREN_SKIP_PREFLIGHT", "") not in ("", "0"),
            crash_at=crashpoints.parse(env.get("TOREN_CRASH_AT")),
            crash_once=Path(env["TOREN_CRASH_ONCE"]) if env.get("TOREN_CRASH_ONCE") else None,
            pool_timeout_s=positive_number(env, "TOREN_POOL_TIMEOUT", 5.0, float),
            allowed_hosts=tuple(name.strip().lower().rstrip(".") for name in
                                env.get("TOREN_ALLOWED_HOSTS", "").split(",") if name.strip()),
            header_timeout_s=positive_number(env, "TOREN_HEADER_TIMEOUT", 10.0, float),
            body_timeout_s=positive_number(env, "TOREN_BODY_TIMEOUT", 30.0, float),
            idle_timeout_s=positive_number(env, "TOREN_IDLE_TIMEOUT", 75.0, float),
            max_connections=positive_number(env, "TOREN_MAX_CONNECTIONS", 1000, int),
            max_call_depth=positive_number(env, "TOREN_MAX_CALL_DEPTH", 5, int),
            group_commit=switch(env, "TOREN_GROUP_COMMIT", True),
            gc_tuning=switch(env, "TOREN_GC_TUNING", True),
            archive_url=env.get("TOREN_ARCHIVE", "").strip() or None,
            default_retention_s=retention_age(env),
            archive_interval_s=positive_number(env, "TOREN_ARCHIVE_INTERVAL", 3600.0, float),
            archive_batch=positive_number(env, "TOREN_ARCHIVE_BATCH", 1000, int),
            archive_max_bytes=positive_number(env, "TOREN_ARCHIVE_MAX_MB", 256, int) * 1024 * 1024,
            metrics_port=_port(env, "TOREN_METRICS_PORT"),
            metrics_host=env.get("TOREN_METRICS_HOST") or "127.0.0.1",
            metrics_public=switch(env, "TOREN_METRICS_PUBLIC", False),
            tracer=_tracer(env),
        )

    def crash_point(self, name: str) -> None:
        """A named crash point (``toren.crashpoints``): nothing unless TOREN_CRASH_AT names it."""
        if self.crash_at:
            crashpoints.reach(self.crash_at, self.crash_once, name)


def _port(env: Mapping[str, str], name: str) -> int | None:
    """A TCP port setting (1-65535), or ``None`` when unset."""
    if not env.get(name):
        return None
    port = positive_number(env, name, 0, int)
    if port > 65535:
        raise ConfigError(f"{name}={env[name]!r} is not a TCP port: use 1 to 65535")
    return port


def _tracer(env: Mapping[str, str]) -> str | None:
    """``TOREN_TRACER`` (``none`` turns tracing off), else ``otel`` when an OTLP endpoint is
    set in the standard OpenTelemetry variables, else ``None``."""
    chosen = env.get("TOREN_TRACER", "").strip()
    if chosen:
        return None if chosen == "none" else chosen
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return "otel"
    return None


def switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    """An on/off setting: ``1``/``true``/``on``/``yes`` or ``0``/``false``/``off``/``no``."""
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "on", "yes"):
        return True
    if raw in ("0", "false", "off", "no"):
        return False
    raise ConfigError(f"{name}={env[name]!r} is not on or off: use 1 or 0")


def positive_number(env: Mapping[str, str], name: str, default: T,
                    kind: Callable[[str], T]) -> T:
    """The environment variable ``name`` as an ``int`` or ``float`` greater than zero, or
    ``default`` when it is unset or empty; ``ConfigError`` naming the variable otherwise.
    Plugins read their own settings with it too."""
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a valid {kind.__name__}") from None
    if not value > 0:  # also refuses nan
        raise ConfigError(f"{name}={raw!r} must be greater than zero")
    return value


def retention_age(env: Mapping[str, str]) -> float | None:
    """``TOREN_RETENTION``: the fleet's default retention age in seconds (``30d``, ``12h``;
    unset or ``never``: ``None``)."""
    from toren.core.retention import parse_age

    raw = env.get("TOREN_RETENTION", "").strip()
    if not raw:
        return None
    try:
        return parse_age(raw)
    except ValueError as exc:
        raise ConfigError(f"TOREN_RETENTION: {exc}") from None
