"""One read-only query: a fresh connection, a READ ONLY transaction, a prepared cursor, caps."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import errors, pq, sql
from psycopg.conninfo import conninfo_to_dict

from toren.plugin import ToolError
from toren_sql.screen import refused_function

#: The cursor's name: one per connection, and each call has its own connection.
CURSOR = "toren_sql_query"
#: Rows fetched from the server per round trip.
BATCH_ROWS = 200
#: Bytes of the JSON envelope around the rows (keys, counts, the flags): kept free.
ENVELOPE_ROOM = 256
RULE = ("sql_query runs exactly one read-only SELECT (WITH ... SELECT, VALUES and TABLE too) "
        "per call")
RECIPE = "docs/tools/database.md, 'A SELECT-only role'"
#: Predefined roles that reach outside the database, and what a member's query could do.
PRIVILEGED_ROLES = {
    "pg_execute_server_program": "run programs on the database server",
    "pg_read_server_files": "read any file the database server can",
    "pg_signal_backend": "cancel or terminate other sessions",
    "pg_write_server_files": "write files on the database server",
}
#: First statement of each call: the server-side timeout (a first line only: the query may
#: reset it) and what the login role is: a superuser, or a member of which PRIVILEGED_ROLES.
#: The session user, not current_user: SET ROLE (set_config('role', ...), which a query may
#: call) reaches any role it is a member of, and 'none' goes back to it. MEMBER counts
#: memberships through other roles and NOINHERIT ones.
PREPARE = """
SELECT pg_catalog.set_config('statement_timeout', %(timeout)s, true), session_user::text,
       ARRAY(SELECT r.rolname::text FROM pg_catalog.pg_roles r
             WHERE r.rolsuper AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
             ORDER BY r.rolname = session_user DESC, r.rolname),
       ARRAY(SELECT r.rolname::text FROM pg_catalog.pg_roles r
             WHERE r.rolname::text = ANY(%(predefined)s)
               AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
             ORDER BY r.rolname)
"""
#: Seconds to wait for the server to take a cancel request after the deadline.
CANCEL_TIMEOUT_S = 5.0
#: Queries longer than this are screened in a thread, off the event loop.
INLINE_SCREEN_CHARS = 20_000


@dataclass
class QueryResult:
    """What ``sql_query`` returns to the model, as JSON."""

    columns: list[dict[str, str]] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    #: ``None``, or why rows are missing: ``max_rows`` or ``max_bytes``.
    truncated: str | None = None

    def to_json(self) -> str:
        return json.dumps({"columns": self.columns, "rows": self.rows,
                           "row_count": len(self.rows), "truncated": self.truncated is not None,
                           "truncated_by": self.truncated}, default=json_value,
                          ensure_ascii=False, allow_nan=False)


def json_value(value: Any) -> Any:
    """A JSON form of the values psycopg returns that ``json`` does not know."""
    if isinstance(value, Decimal):
        return str(value)  # exact: a float would round money
    if isinstance(value, dt.date | dt.time | dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, uuid.UUID | dt.timedelta):
        return str(value)
    return repr(value)


def _finite(value: Any) -> Any:
    """NaN and infinities (valid in Postgres floats) as strings: JSON has no word for them."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    return value


async def run_readonly_query(url: str, query: str, *, max_rows: int, max_bytes: int,
                             timeout_s: float, connect_timeout_s: float = 10,
                             allow_privileged_role: bool = False) -> QueryResult:
    """Run ``query`` read-only and return at most ``max_rows`` rows in ``max_bytes`` of JSON.

    Why each layer is there (a hostile model writes the query):

    - functions that act outside the transaction (``pg_terminate_backend``, advisory locks,
      large objects, ``nextval``, ... : ``toren_sql.screen``) are refused by name before
      anything is sent, however the query spells them;
    - a fresh connection per call, closed after it: no session state (``SET``, temporary
      tables, advisory locks, a changed ``default_transaction_read_only``) outlives the call;
    - a role that is a superuser or a member of a predefined role that reaches outside the
      database (``PRIVILEGED_ROLES``) is refused unless ``allow_privileged_role``;
    - ``BEGIN READ ONLY`` plus ``default_transaction_read_only=on`` for the session: writes,
      ``SELECT ... FOR UPDATE`` and functions that write are refused by Postgres;
    - the query is wrapped in ``DECLARE ... CURSOR FOR`` and sent as a prepared statement
      (extended protocol), which holds exactly one statement: ``COMMIT; DELETE ...`` cannot
      stack, and ``DECLARE`` only takes a SELECT (no DO, COPY, CALL or data-modifying WITH);
    - one deadline of ``timeout_s`` over the whole call (connect, every statement, every
      FETCH): when it passes the backend is cancelled and the connection closed. The
      ``statement_timeout`` set too is only a first line: the query may reset it
      (``set_config('statement_timeout', '0', true)``) for the FETCHes after the first;
    - rows come through the cursor in batches, so a 10-million-row result costs one batch.

    The real guarantee is still the database role: give the tool a role that may only SELECT.
    Raises ``ToolError`` with Postgres's reason for anything refused.
    """
    text = query.strip().rstrip(";").strip()
    if not text:
        raise ToolError(f"the query is empty; {RULE}")
    # a long text is parsed off the event loop
    refused = (refused_function(text) if len(text) < INLINE_SCREEN_CHARS
               else await asyncio.to_thread(refused_function, text))
    if refused is not None:
        name, why = refused
        raise ToolError(f"refused: the query calls {name}, which {why}; sql_query never runs "
                        f"it, whatever the role; {RULE}")
    conn: psycopg.AsyncConnection[Any] | None = None
    try:
        async with asyncio.timeout(timeout_s):
            conn = await _connect(url, connect_timeout_s)
            return await _run(conn, text, max_rows=max_rows, max_bytes=max_bytes,
                              timeout_s=timeout_s, allow_privileged_role=allow_privileged_role)
    except TimeoutError:
        if conn is None:
            raise ToolError(f"cannot connect to the database: no answer within {timeout_s:g} s "
                            "(TOREN_SQL_TIMEOUT)") from None
        raise ToolError(_ran_too_long(timeout_s)) from None
    except errors.QueryCanceled as exc:
        if "statement timeout" not in _reason(exc):
            raise ToolError(f"the query failed: {_reason(exc)}") from None
        raise ToolError(_ran_too_long(timeout_s)) from None
    except psycopg.Error as exc:
        raise ToolError(_refusal(exc)) from None
    finally:
        if conn is not None:
            await _cancel_and_close(conn)  # ends the transaction: nothing it did is kept


async def _connect(url: str, connect_timeout_s: float) -> psycopg.AsyncConnection[Any]:
    try:
        # keep the URL's own options (a search_path, say) and add ours after them: the
        # lexing settings make the server read the text as toren_sql.screen read it
        options = f"{conninfo_to_dict(url).get('options') or ''} " \
                  "-c default_transaction_read_only=on -c standard_conforming_strings=on"
        return await psycopg.AsyncConnection.connect(
            url, connect_timeout=max(1, round(connect_timeout_s)), options=options.strip(),
            client_encoding="UTF8")
    except psycopg.Error as exc:
        raise ToolError(f"cannot connect to the database: {_reason(exc)}") from None


async def _run(conn: psycopg.AsyncConnection[Any], text: str, *, max_rows: int, max_bytes: int,
               timeout_s: float, allow_privileged_role: bool) -> QueryResult:
    await conn.set_read_only(True)
    async with conn.cursor() as cursor:
        await cursor.execute(PREPARE, {"timeout": f"{max(1, round(timeout_s * 1000))}ms",
                                       "predefined": list(PRIVILEGED_ROLES)})
        _, role, superusers, memberships = await cursor.fetchone() or ("", "", [], [])
        if (superusers or memberships) and not allow_privileged_role:
            raise ToolError(_privileged(role, superusers, memberships))
        declare = sql.SQL("DECLARE {} NO SCROLL CURSOR FOR {}").format(
            sql.Identifier(CURSOR), sql.SQL(text))
        await cursor.execute(declare, prepare=True)
        return await _fetch(cursor, max_rows, max_bytes)


async def _cancel_and_close(conn: psycopg.AsyncConnection[Any]) -> None:
    """Stop what the backend may still run, then close: closing alone leaves a running query
    running until it next writes to the socket. (psycopg also cancels the query its own
    wait is interrupted in; this covers any other way out.)"""
    try:
        if not conn.closed and conn.pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
            with contextlib.suppress(psycopg.Error):
                await conn.cancel_safe(timeout=CANCEL_TIMEOUT_S)
    finally:
        await conn.close()


def _ran_too_long(timeout_s: float) -> str:
    return (f"the query ran past its {timeout_s:g} s limit and was cancelled "
            "(TOREN_SQL_TIMEOUT); add a LIMIT, filter on indexed columns, or aggregate")


def _privileged(role: str, superusers: list[str], memberships: list[str]) -> str:
    """Why ``role`` is refused: what it is, what a query could do with it, the way out."""
    if role in superusers:
        what, could = "is a superuser", "do anything the server can"
    elif superusers:
        what = f"is a member of the superuser role {superusers[0]!r} (SET ROLE makes it one)"
        could = "do anything the server can"
    else:
        what = (f"is a member of {' and '.join(memberships)} (directly or through other "
                "roles)")
        could = " and ".join(PRIVILEGED_ROLES[name] for name in memberships)
    return (f"refused to run: the database role {role!r} {what}, so a query could {could}; "
            f"give sql_query a role that may only SELECT ({RECIPE}), or set "
            "sql: {allowPrivilegedRole: true} in the agent's agent.yaml to accept that")


async def _fetch(cursor: psycopg.AsyncCursor[Any], max_rows: int,
                 max_bytes: int) -> QueryResult:
    result = QueryResult()
    budget = max_bytes - ENVELOPE_ROOM
    fetch = sql.SQL("FETCH FORWARD {} FROM {}").format(
        sql.Literal(min(BATCH_ROWS, max_rows + 1)), sql.Identifier(CURSOR))
    while True:
        await cursor.execute(fetch)
        if not result.columns and cursor.description is not None:
            result.columns = [{"name": column.name, "type": column.type_display}
                              for column in cursor.description]
            budget -= len(json.dumps(result.columns, ensure_ascii=False).encode())
        batch = await cursor.fetchall()
        for row in batch:
            if len(result.rows) >= max_rows:
                result.truncated = "max_rows"
                return result
            values = [_finite(value) for value in row]
            size = len(json.dumps(values, default=json_value, ensure_ascii=False).encode()) + 1
            if size > budget:
                result.truncated = "max_bytes"
                return result
            budget -= size
            result.rows.append(values)
        if len(batch) < min(BATCH_ROWS, max_rows + 1):
            return result


def _reason(exc: psycopg.Error) -> str:
    """Postgres's message without its ``LINE 1: DECLARE ...`` context (the wrapper is ours)."""
    message = exc.diag.message_primary or str(exc)
    if exc.diag.message_hint:
        message = f"{message} (hint: {exc.diag.message_hint})"
    return " ".join(message.split()) or type(exc).__name__


def _refusal(exc: psycopg.Error) -> str:
    """The model's error for a refused query: what Postgres said, and the rule it broke."""
    reason = _reason(exc)
    if "multiple commands" in reason:
        return f"refused: more than one statement; {RULE}"
    if isinstance(exc, errors.ReadOnlySqlTransaction | errors.InsufficientPrivilege):
        return f"refused: the database is read-only for this tool ({reason}); {RULE}"
    if isinstance(exc, errors.SyntaxError):
        return f"refused: {reason}; {RULE}"
    return f"the query failed: {reason}"
