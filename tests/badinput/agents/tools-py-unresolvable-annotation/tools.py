from __future__ import annotations


def find(query: Query) -> str:  # noqa: F821
    return str(query)
