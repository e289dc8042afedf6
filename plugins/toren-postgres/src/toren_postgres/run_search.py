"""The SQL of ``RunReader.search_runs``: one statement per agent schema, holding only the
conditions a search asks for (so each plan fits its search: the words through the
``runs_text_idx`` GIN index, a date range through ``runs_created_idx``), ordered as asked.

Agent migration ``0029_run_search`` made the indexes; ``run_totals`` in ``sql/queries.sql``
counts a page's totals the way the sort by totals here does.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from psycopg import sql

from toren.plugin.drivers import RunSearch

COLUMNS = sql.SQL(
    "r.id, r.kind, r.status, r.input, r.output, r.stop_reason, r.error, r.idempotency_key, "
    "r.created_at, r.updated_at, r.finished_at, r.schedule, r.parent_agent, "
    "r.parent_run_id::text, r.parent_task, r.child_kind, r.depth, r.agent_version, "
    "r.agent_human_version")

#: The words of a run: the same expression as the index ``runs_text_idx`` (or it is not used).
TEXT = sql.SQL(
    "(to_tsvector('simple', left(COALESCE(r.input #>> '{{}}', ''), 100000))"
    " || to_tsvector('simple', left(COALESCE(r.output #>> '{{}}', ''), 100000)))"
    " @@ websearch_to_tsquery('simple', {})")

#: What each sort orders by: a column of the run's row or an expression of it (returned as
#: ``sort_key`` too, so the runs of several agents are merged in the same order). The totals
#: (``TOTALS``) are columns kept once a run has finished.
SORT_KEYS: dict[str, str] = {
    "created": "extract(epoch FROM r.created_at)",
    "duration": "extract(epoch FROM COALESCE(r.finished_at, now()) - r.created_at)",
    "cost": "cost_usd",
    "model_calls": "model_calls",
    "steps": "steps",
}
TOTALS = ("cost", "model_calls", "steps")

#: A sort by a total: the finished runs in the order of the total's index (runs_cost_idx and
#: its kin, agent migration 0029), only as many as the page needs, and the runs that keep
#: none (still working: runs_unsettled_idx) with theirs added up now; then both, in order.
BY_TOTAL = """SELECT * FROM (
    (SELECT {columns}, r.{column} AS sort_key FROM {runs} r
     WHERE r.model_calls IS NOT NULL{conditions}
     ORDER BY r.{column} {direction}, r.created_at DESC, r.id DESC
     LIMIT %(limit)s + %(offset)s)
    UNION ALL
    (SELECT {columns}, (SELECT t.{column} FROM {run_totals}(r.id) t) AS sort_key FROM {runs} r
     WHERE r.model_calls IS NULL{conditions})
) found
ORDER BY sort_key {direction} NULLS LAST, created_at DESC, id DESC
LIMIT %(limit)s OFFSET %(offset)s"""

def search_statement(schema: str, search: RunSearch, limit: int, offset: int
                     ) -> tuple[sql.Composed, dict[str, Any]]:
    """The statement listing ``search``'s runs of one agent schema, and its parameters:
    ``limit`` runs after skipping ``offset``, each with its ``sort_key`` last."""
    conditions: list[sql.Composable] = []
    params: dict[str, Any] = {"limit": limit, "offset": offset}

    def where(condition: str, **values: Any) -> None:
        conditions.append(sql.SQL(condition))
        params.update(values)

    if search.status:
        where("r.status = %(status)s", status=search.status)
    if search.kind:
        where("r.kind = %(kind)s", kind=search.kind)
    if search.schedule:
        where("r.schedule = %(schedule)s", schedule=search.schedule)
    if search.since:
        where("r.created_at >= %(since)s", since=_aware(search.since))
    if search.until:
        where("r.created_at < %(until)s", until=_aware(search.until))
    if search.version:
        prefix = search.version.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where("(r.agent_human_version = %(version)s OR (length(%(version)s) >= 4"
              " AND r.agent_version LIKE %(version_prefix)s))",
              version=search.version, version_prefix=prefix + "%")
    if search.before:
        where("(r.created_at, r.id) < (%(before_at)s, %(before_id)s::uuid)",
              before_at=search.before[0], before_id=search.before[1])
    if search.text:
        conditions.append(TEXT.format(sql.Placeholder("text")))
        params["text"] = search.text
    direction = sql.SQL("DESC" if search.descending else "ASC")
    runs = sql.Identifier(schema, "runs")
    if search.sort in TOTALS:
        statement = sql.SQL(BY_TOTAL).format(
            columns=COLUMNS, column=sql.Identifier(SORT_KEYS[search.sort]), runs=runs,
            run_totals=sql.Identifier(schema, "run_totals"), direction=direction,
            conditions=sql.SQL("").join(sql.SQL(" AND ") + c for c in conditions))
        return statement, params
    # newest (or oldest) first: in the order of runs_created_idx, which then serves the page
    order = (sql.SQL("r.created_at {d}, r.id {d}").format(d=direction)
             if search.sort == "created" else
             sql.SQL("sort_key {d} NULLS LAST, r.created_at DESC, r.id DESC").format(d=direction))
    statement = sql.SQL("SELECT {columns}, {key} AS sort_key FROM {runs} r{where} ORDER BY "
                        "{order} LIMIT %(limit)s OFFSET %(offset)s").format(
        columns=COLUMNS, key=sql.SQL(SORT_KEYS[search.sort]), runs=runs,
        where=sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions
        else sql.SQL(""), order=order)
    return statement, params


def _aware(moment: datetime) -> datetime:
    """A naive datetime is UTC (the API's dates without an offset are)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment
