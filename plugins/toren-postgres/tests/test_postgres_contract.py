"""toren-postgres runs Toren's driver contracts (``toren.testing.contracts``): the store's
(every interface of ``Store``: files, chat channels and the archive index included), appends
alone as well as group-committed, and the queue's."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
import pytest_asyncio
from toren_postgres.queue import PostgresQueue
from toren_postgres.store import PostgresStore
from toren_postgres.testing import create_database, drop_database

from toren.config import Settings
from toren.seams.queue import Queue
from toren.testing.contracts import QueueContract, RunLogContract, StoreContract


@pytest.fixture(scope="module")
def contract_database(postgres_server_url: str, toren_template_database: str) -> Iterator[str]:
    """One database for the module: each contract test reads only its own writes."""
    name = f"toren_contract_{uuid.uuid4().hex[:12]}"
    url = create_database(postgres_server_url, name, template=toren_template_database)
    try:
        yield url
    finally:
        drop_database(postgres_server_url, name)


async def opened_store(url: str, **settings: object) -> PostgresStore:
    store = PostgresStore(Settings(database_url=url, **settings))  # type: ignore[arg-type]
    await store.open()
    await store.migrate([])
    return store


class TestPostgresStore(StoreContract):
    @pytest_asyncio.fixture
    async def store(self, contract_database: str) -> AsyncIterator[PostgresStore]:
        store = await opened_store(contract_database)
        yield store
        await store.close()


class TestPostgresRunLogWithoutGroupCommit(RunLogContract):
    """Appends each in its own transaction (``TOREN_GROUP_COMMIT=0``): the other path."""

    @pytest_asyncio.fixture
    async def store(self, contract_database: str) -> AsyncIterator[PostgresStore]:
        store = await opened_store(contract_database, group_commit=False)
        yield store
        await store.close()


class TestPostgresQueue(QueueContract):
    @pytest_asyncio.fixture
    async def make_queue(self, contract_database: str
                         ) -> AsyncIterator[Callable[[], Awaitable[Queue]]]:
        made: list[tuple[PostgresStore, PostgresQueue]] = []

        async def make() -> Queue:
            store = await opened_store(contract_database)
            queue = PostgresQueue(store.settings, store)
            await queue.open()
            made.append((store, queue))
            return queue

        yield make
        for store, queue in made:
            await queue.close()
            await store.close()
