"""toren-sql: the ``sql_query`` tool, read-only SELECTs against ``SQL_DATABASE_URL``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toren_sql.query import QueryResult, run_readonly_query

__all__ = ["QueryResult", "run_readonly_query"]


def __getattr__(name: str) -> Any:
    # the query module (and psycopg) load when first asked for: every toren command imports
    # this package through the plugin's entry point, for its help
    if name in __all__:
        from toren_sql import query

        return getattr(query, name)
    raise AttributeError(f"module 'toren_sql' has no attribute {name!r}")
