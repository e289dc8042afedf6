"""The ``postgres`` queue driver: messages in ``toren_control.queue``, sharing the store's pool."""

from __future__ import annotations

from toren.config import Settings
from toren.errors import ConfigError
from toren.interfaces import Queue, Store


class PostgresQueue(Queue):
    """Messages in the same database as the event log, so enqueue and append share a transaction.

    Needs the ``postgres`` store driver (it uses the store's connection pool).
    """

    def __init__(self, settings: Settings, store: Store) -> None:
        from toren_postgres.store import PostgresStore

        if not isinstance(store, PostgresStore):
            raise ConfigError("TOREN_QUEUE=postgres needs TOREN_STORE=postgres (the queue lives "
                              "in the store's database)")
        super().__init__(settings, store)
        self.pg_store = store

    @property
    def description(self) -> str:
        return "Postgres (toren_control.queue, in the store's database)"

    async def open(self) -> None:
        """Nothing to connect: the queue uses the store's pool."""

    async def close(self) -> None:
        """Nothing to release: the store owns the pool."""
