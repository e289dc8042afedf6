"""``one_transaction``: a pipeline's statements commit together or not at all, with no
``BEGIN``/``COMMIT``; a failure drops the connection (psycopg may believe in a statement it
prepared in the aborted pipeline)."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql
from toren_postgres.pipelines import one_transaction


async def test_statements_commit_together_or_not_at_all(database_url: str) -> None:
    table = sql.Identifier(f"one_tx_{uuid.uuid4().hex[:8]}")
    insert = sql.SQL("INSERT INTO {} (id) VALUES (%s)").format(table)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as setup:
        await setup.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY)").format(table))
    try:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            async with one_transaction(conn):
                ids = [await conn.execute("SELECT txid_current()") for _ in range(2)]
                for n in range(1, 9):  # the same statement often enough to be prepared
                    await conn.execute(insert, [n])
            first, second = [await cursor.fetchone() for cursor in ids]
            assert first == second  # one transaction
            with pytest.raises(psycopg.errors.UniqueViolation):
                async with one_transaction(conn):
                    await conn.execute(insert, [100])
                    await conn.execute(insert, [1])  # taken: the pipeline aborts
                    await conn.execute(insert, [101])
            assert conn.closed  # not lent out again with a stale idea of what is prepared
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            cursor = await conn.execute(sql.SQL("SELECT array_agg(id ORDER BY id) FROM {}")
                                        .format(table))
            assert await cursor.fetchone() == (list(range(1, 9)),)  # 100 rolled back with 1
            with pytest.raises(RuntimeError, match="autocommit"):
                await conn.set_autocommit(False)
                async with one_transaction(conn):
                    pass
    finally:
        async with await psycopg.AsyncConnection.connect(database_url,
                                                         autocommit=True) as cleanup:
            await cleanup.execute(sql.SQL("DROP TABLE {}").format(table))
