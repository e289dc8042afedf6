"""Several statements in one round trip and one transaction, without ``BEGIN``/``COMMIT``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import psycopg


@contextlib.asynccontextmanager
async def one_transaction(conn: psycopg.AsyncConnection[object]) -> AsyncIterator[None]:
    """Run the statements executed inside as one pipeline, in the implicit transaction Postgres
    runs up to the pipeline's sync: committed together, or (one failing) rolled back
    together. ``conn`` must be in autocommit mode (the pool's connections are).

    Used by a group commit's batch that mixes agents and by reading a run with its events:
    psycopg's ``transaction()`` inside a pipeline adds a sync, ``BEGIN`` and ``COMMIT``,
    measured at about 0.45 ms of the worker's CPU each time. When a statement fails, Postgres
    skips the rest of the pipeline, including any ``PREPARE`` psycopg sent for a statement it
    then believes prepared (only a rollback of its own clears that belief): the connection is
    closed, so the pool replaces it instead of lending out one that fails every later
    execution of that statement ("prepared statement ... does not exist").
    """
    if not conn.autocommit:
        raise RuntimeError("one_transaction needs a connection in autocommit mode")
    try:
        async with conn.pipeline():
            yield
    except psycopg.Error:
        await conn.close()
        raise
