"""One read-only query: a fresh connection, a READ ONLY transaction, a prepared cursor, caps."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.conninfo import conninfo_to_dict

from toren.errors import ToolError

#: The cursor's name: one per connection, and each call has its own connection.
CURSOR = "toren_sql_query"
#: Rows fetched from the server per round trip.
BATCH_ROWS = 200
#: Bytes of the JSON envelope around the rows (keys, counts, the flags): kept free.
ENVELOPE_ROOM = 256
RULE = ("sql_query runs exactly one read-only SELECT (WITH ... SELECT, VALUES and TABLE too) "
        "per call")


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
                             timeout_s: float, connect_timeout_s: float = 10) -> QueryResult:
    """Run ``query`` read-only and return at most ``max_rows`` rows in ``max_bytes`` of JSON.

    Why each layer is there (a hostile model writes the query):

    - a fresh connection per call, closed after it: no session state (``SET``, temporary
      tables, advisory locks, a changed ``default_transaction_read_only``) outlives the call;
    - ``BEGIN READ ONLY`` plus ``default_transaction_read_only=on`` for the session: writes,
      ``nextval``, ``SELECT ... FOR UPDATE`` and functions that write are refused by Postgres;
    - the query is wrapped in ``DECLARE ... CURSOR FOR`` and sent as a prepared statement
      (extended protocol), which holds exactly one statement: ``COMMIT; DELETE ...`` cannot
      stack, and ``DECLARE`` only takes a SELECT (no DO, COPY, CALL or data-modifying WITH);
    - ``SET LOCAL statement_timeout``: a ``pg_sleep(60)`` or a huge sort is cancelled;
    - rows come through the cursor in batches, so a 10-million-row result costs one batch.

    The real guarantee is still the database role: give the tool a role that may only SELECT.
    Raises ``ToolError`` with Postgres's reason for anything refused.
    """
    text = query.strip().rstrip(";").strip()
    if not text:
        raise ToolError(f"the query is empty; {RULE}")
    try:
        # keep the URL's own options (a search_path, say) and add ours after them
        options = f"{conninfo_to_dict(url).get('options') or ''} " \
                  "-c default_transaction_read_only=on"
        conn = await psycopg.AsyncConnection.connect(
            url, connect_timeout=max(1, round(connect_timeout_s)), options=options.strip())
    except psycopg.Error as exc:
        raise ToolError(f"cannot connect to the database: {_reason(exc)}") from None
    try:
        await conn.set_read_only(True)
        async with conn.cursor() as cursor:
            await cursor.execute("SELECT set_config('statement_timeout', %s, true)",
                                 (f"{max(1, round(timeout_s * 1000))}ms",))
            declare = sql.SQL("DECLARE {} NO SCROLL CURSOR FOR {}").format(
                sql.Identifier(CURSOR), sql.SQL(text))
            await cursor.execute(declare, prepare=True)
            return await _fetch(cursor, max_rows, max_bytes)
    except errors.QueryCanceled:
        raise ToolError(f"the query ran longer than {timeout_s:g} s and was cancelled "
                        "(TOREN_SQL_TIMEOUT); add a LIMIT, filter on indexed columns, or "
                        "aggregate") from None
    except psycopg.Error as exc:
        raise ToolError(_refusal(exc)) from None
    finally:
        await conn.close()  # ends the transaction: nothing it did is kept


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
