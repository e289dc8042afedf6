"""toren-sql: the ``sql_query`` tool, read-only SELECTs against ``SQL_DATABASE_URL``."""

from __future__ import annotations

from toren_sql.query import QueryResult, run_readonly_query

__all__ = ["QueryResult", "run_readonly_query"]
