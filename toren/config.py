"""Settings read from the environment (every option has a ``TOREN_*`` variable)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from toren import crashpoints
from toren.core.forwarded import Network, parse_trusted_proxies
from toren.core.rate_limits import RateLimitConfigError, RateLimits, parse_rate_limits
from toren.errors import ConfigError
from toren.seams.load_plugins import parse_load_plugins

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
    #: Which agents this process's workers claim (``TOREN_LANE``, ``toren worker --lane``):
    #: ``short`` (agents without ``runtime: long``), ``long`` (agents with it) or ``all``.
    lane: str = "all"
    #: Worker processes ``toren worker`` (and ``toren serve --workers``) runs on this machine
    #: (``TOREN_PROCESSES``, ``--processes``: a number or ``auto``, one per available CPU); 1
    #: runs the worker in the command's own process, more start a supervisor
    #: (``toren.host.supervisor``).
    processes: int = 1
    #: The id of the supervisor that started this worker process (set by the supervisor for
    #: its children, ``TOREN_SUPERVISOR``; ``None`` for a worker started on its own): it is
    #: recorded with the worker's sign-in, so ``toren top`` shows which workers are one
    #: supervisor's processes.
    supervisor: str | None = None
    #: This worker process's place (1 to N) among its supervisor's (``TOREN_SUPERVISOR_SLOT``,
    #: set with ``TOREN_SUPERVISOR``): what one process per machine does (a plugin's health
    #: endpoint, ECS task protection) is decided by it. ``None`` without a supervisor.
    supervisor_slot: int | None = None
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
    #: Seconds a waiting queue message takes to gain one point of priority (aging), so that
    #: low-priority work is never starved (docs/guides/flow-control.md).
    priority_aging_s: float = 30.0
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
    #: Seconds after which a database connection whose other end went silent (a partition, a
    #: half-open link: no FIN, no RST) is given up by the kernel: libpq's ``tcp_user_timeout``
    #: and TCP keepalives (``TOREN_DB_TCP_TIMEOUT``), unless ``DATABASE_URL`` names them.
    db_tcp_timeout_s: float = 30.0
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
    #: Completion webhooks (docs/guides/webhooks.md): the deployment's signing secret
    #: (``TOREN_WEBHOOK_SECRET``; an agent's ``notify:`` may name its own variable), whether
    #: private, loopback and link-local destinations are allowed, seconds one attempt may
    #: take, the first retry's delay (doubling, with jitter, up to the cap), and how long after
    #: the event retries go on before the delivery is marked failed.
    webhook_secret: str | None = field(default=None, repr=False)
    webhook_allow_private: bool = False
    webhook_timeout_s: float = 10.0
    webhook_retry_base_s: float = 5.0
    webhook_retry_max_delay_s: float = 3600.0
    webhook_retry_for_s: float = 86400.0
    #: How long ended (delivered or failed) deliveries are kept for ``toren jobs show``.
    webhook_keep_s: float = 30 * 86400.0
    #: Provider rate limits the fleet shares (docs/guides/flow-control.md), read from the file
    #: ``TOREN_RATE_LIMITS`` names; ``None``: none (no statement is added to a model call).
    rate_limits: RateLimits | None = None
    #: How long the audit trail keeps an entry (``TOREN_AUDIT_RETENTION``: ``365d``, ``90d``;
    #: ``never``: ``None``, kept for good); the workers delete older ones hourly.
    audit_retention_s: float | None = 365 * 86400.0
    #: The proxies whose ``X-Forwarded-For`` names the client (``TOREN_TRUSTED_PROXIES``:
    #: addresses and CIDR blocks, comma-separated; none by default: the connection's address).
    trusted_proxies: tuple[Network, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = env.get("TOREN_HOME")
        concurrency = positive_number(env, "TOREN_CONCURRENCY", 8, int)
        return cls(
            database_url=env.get("DATABASE_URL") or None,
            home=Path(home).expanduser().resolve() if home else Path.cwd() / ".toren",
            queue_driver=env.get("TOREN_QUEUE") or "postgres",
            store_driver=env.get("TOREN_STORE") or "postgres",
            runtime_driver=env.get("TOREN_RUNTIME") or "inprocess",
            lane=worker_lane(env.get("TOREN_LANE") or "all", "TOREN_LANE"),
            processes=worker_processes(env.get("TOREN_PROCESSES") or "1", "TOREN_PROCESSES"),
            supervisor=env.get("TOREN_SUPERVISOR") or None,
            supervisor_slot=(positive_number(env, "TOREN_SUPERVISOR_SLOT", 1, int)
                             if env.get("TOREN_SUPERVISOR_SLOT") else None),
            load_plugins=parse_load_plugins(env.get("TOREN_LOAD_PLUGINS")),
            connect_timeout_s=positive_number(env, "TOREN_CONNECT_TIMEOUT", 5.0, float),
            concurrency=concurrency,
            pool_size=positive_number(env, "TOREN_POOL_SIZE", 10, int),
            lease_ttl_s=positive_number(env, "TOREN_LEASE_TTL", 5.0, float),
            poll_interval_s=positive_number(env, "TOREN_POLL_INTERVAL", 1.0, float),
            guardian_interval_s=positive_number(env, "TOREN_GUARDIAN_INTERVAL", 5.0, float),
            schedule_interval_s=positive_number(env, "TOREN_SCHEDULE_INTERVAL", 5.0, float),
            max_deliveries=positive_number(env, "TOREN_MAX_DELIVERIES", 5, int),
            priority_aging_s=positive_number(env, "TOREN_PRIORITY_AGING_S", 30.0, float),
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
            db_tcp_timeout_s=positive_number(env, "TOREN_DB_TCP_TIMEOUT", 30.0, float),
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
            webhook_secret=env.get("TOREN_WEBHOOK_SECRET") or None,
            webhook_allow_private=switch(env, "TOREN_WEBHOOK_ALLOW_PRIVATE", False),
            webhook_timeout_s=positive_number(env, "TOREN_WEBHOOK_TIMEOUT", 10.0, float),
            webhook_retry_base_s=positive_number(env, "TOREN_WEBHOOK_RETRY_BASE", 5.0, float),
            webhook_retry_max_delay_s=positive_number(env, "TOREN_WEBHOOK_RETRY_MAX_DELAY",
                                                      3600.0, float),
            webhook_retry_for_s=positive_number(env, "TOREN_WEBHOOK_RETRY_FOR", 86400.0,
                                                float),
            webhook_keep_s=positive_number(env, "TOREN_WEBHOOK_KEEP", 30 * 86400.0, float),
            rate_limits=rate_limits_file(env),
            audit_retention_s=retention_age(env, "TOREN_AUDIT_RETENTION", 365 * 86400.0),
            trusted_proxies=trusted_proxies(env),
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


def retention_age(env: Mapping[str, str], name: str = "TOREN_RETENTION",
                  default: float | None = None) -> float | None:
    """``TOREN_RETENTION`` (or ``name``): an age in seconds (``30d``, ``12h``; ``never``:
    ``None``; unset: ``default``)."""
    from toren.core.retention import parse_age

    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return parse_age(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def trusted_proxies(env: Mapping[str, str]) -> tuple[Network, ...]:
    """``TOREN_TRUSTED_PROXIES``: the proxies (addresses, CIDR blocks) whose
    ``X-Forwarded-For`` is believed; ``ConfigError`` naming the entry that is neither."""
    try:
        return parse_trusted_proxies(env.get("TOREN_TRUSTED_PROXIES", ""))
    except ValueError as exc:
        raise ConfigError(f"TOREN_TRUSTED_PROXIES: {exc}") from None


#: The lanes a worker may serve (``TOREN_LANE``): an agent's ``runtime:``, or ``all``.
WORKER_LANES = ("short", "long", "all")


def worker_lane(value: str, source: str) -> str:
    """``value`` if it names a worker lane, else ``ConfigError`` naming ``source`` (the
    variable or option it came from) and the lanes there are."""
    lane = value.strip().lower()
    if lane not in WORKER_LANES:
        raise ConfigError(f"{source}={value[:40]!r} is not a lane: use short (agents without "
                          "runtime: long), long (agents with runtime: long) or all")
    return lane


def worker_processes(value: str, source: str) -> int:
    """``value`` as a count of worker processes: a whole number from 1 to
    ``MAX_WORKER_PROCESSES``, or ``auto`` (``available_cpus``); else ``ConfigError`` naming
    ``source`` (the variable or option it came from) and what to write."""
    raw = value.strip().lower()
    if raw == "auto":
        return available_cpus()
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_WORKER_PROCESSES:
        raise ConfigError(f"{source}={value[:40]!r} is not a number of worker processes: use "
                          f"a whole number from 1 to {MAX_WORKER_PROCESSES} (1: the worker "
                          "runs in this process), or auto (one per CPU available here)")
    return count


#: More worker processes than this on one machine is a typo, not a plan.
MAX_WORKER_PROCESSES = 256
#: Where a cgroup v2 container's CPU quota is (``max 100000`` or ``200000 100000``).
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def cgroup_cpu_limit(text: str) -> float | None:
    """The CPUs a cgroup v2 ``cpu.max`` line allows (quota / period), or ``None`` for no
    quota (``max``) or a line this does not understand."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def available_cpus(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The CPUs this process may use: the CPUs it may be scheduled on
    (``os.sched_getaffinity``, else ``os.cpu_count``), capped by the container's CPU quota
    when one is set (cgroup v2 ``cpu.max``, rounded up: 1.5 CPUs is 2 processes); at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    try:
        limit = cgroup_cpu_limit(cpu_max.read_text()[:100])
    except OSError:  # no cgroup v2 here (macOS, cgroup v1): the CPU count decides
        limit = None
    if limit is not None:
        cpus = min(cpus, math.ceil(limit))
    return max(1, min(cpus, MAX_WORKER_PROCESSES))


#: A limits file is a few dozen lines; this bounds what a mistaken path makes us read.
MAX_RATE_LIMITS_BYTES = 1_000_000


def rate_limits_file(env: Mapping[str, str]) -> RateLimits | None:
    """The limits file ``TOREN_RATE_LIMITS`` names (YAML or JSON), validated; ``None`` when
    unset. ``ConfigError`` names the file, the key and what to write instead."""
    raw = env.get("TOREN_RATE_LIMITS", "").strip()
    if not raw:
        return None
    import yaml  # only a deployment with limits pays for it

    path = Path(raw).expanduser()
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_RATE_LIMITS_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"TOREN_RATE_LIMITS={raw!r}: cannot read the limits file "
                          f"({exc.strerror or exc}); point it at a YAML file with a "
                          "'limits:' mapping, or unset it") from None
    if len(data) > MAX_RATE_LIMITS_BYTES:
        raise ConfigError(f"{path}: the limits file is larger than "
                          f"{MAX_RATE_LIMITS_BYTES:,} bytes")
    try:
        parsed = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid YAML or JSON: {' '.join(str(exc).split())}"
                          ) from None
    try:
        return parse_rate_limits(parsed, str(path))
    except RateLimitConfigError as exc:
        raise ConfigError(str(exc)) from None
