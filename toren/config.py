"""Settings read from the environment (every option has a ``TOREN_*`` variable)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


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

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        load = env.get("TOREN_LOAD_PLUGINS")
        home = env.get("TOREN_HOME")
        return cls(
            database_url=env.get("DATABASE_URL") or None,
            home=Path(home).expanduser().resolve() if home else Path.cwd() / ".toren",
            queue_driver=env.get("TOREN_QUEUE") or "postgres",
            store_driver=env.get("TOREN_STORE") or "postgres",
            runtime_driver=env.get("TOREN_RUNTIME") or "inprocess",
            load_plugins=None if load is None else tuple(
                name.strip() for name in load.split(",") if name.strip()
            ),
            connect_timeout_s=float(env.get("TOREN_CONNECT_TIMEOUT") or 5.0),
            concurrency=int(env.get("TOREN_CONCURRENCY") or 8),
        )
