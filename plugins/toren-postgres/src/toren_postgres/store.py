"""The ``postgres`` store driver: every store interface on one Postgres database.

One class per interface, each in its module and each usable alone (they share
``PostgresConnection``): ``PostgresMigrator`` (``migrations``), ``PostgresRunLog`` (``runs``),
``PostgresRunReader`` (``reader``), ``PostgresWorkerRegistry`` (``workers``),
``PostgresGuardian`` (``guardian``), ``PostgresKeyStore`` (``keys``) and ``PostgresOutbox``
(``outbox``). ``PostgresStore`` is all of them over one connection pool.
"""

from __future__ import annotations

from toren.seams.store import Store
from toren_postgres.guardian import PostgresGuardian
from toren_postgres.keys import PostgresKeyStore
from toren_postgres.migrations import PostgresMigrator
from toren_postgres.outbox import PostgresOutbox
from toren_postgres.reader import PostgresRunReader
from toren_postgres.runs import PostgresRunLog
from toren_postgres.workers import PostgresWorkerRegistry


class PostgresStore(PostgresMigrator, PostgresRunLog, PostgresRunReader, PostgresWorkerRegistry,
                    PostgresGuardian, PostgresKeyStore, PostgresOutbox, Store):
    """State in Postgres: ``DATABASE_URL`` if set, else the embedded server under TOREN_HOME.

    Its outbox is the queue table, so the ``postgres`` queue reads it directly.
    """
