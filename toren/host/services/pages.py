"""Keyset pages: a page of records and where the next one starts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar


class Keyed(Protocol):
    """A record listed newest first by ``(created_at, id)``."""

    @property
    def id(self) -> str: ...

    @property
    def created_at(self) -> datetime | None: ...


T = TypeVar("T", bound=Keyed)
#: ``(created_at, id)`` of the last record of a page: the next page lists only older ones.
Position = tuple[datetime, str]


@dataclass(frozen=True)
class Page(Generic[T]):
    """At most ``limit`` records, and ``after``: where the next page starts (the last
    record's ``(created_at, id)``), ``None`` on the last page."""

    items: list[T]
    after: Position | None


async def read_page(fetch: Callable[[int, Position | None], Awaitable[Sequence[T]]],
                    limit: int, before: Position | None) -> Page[T]:
    """One page of ``limit`` records after ``before``: ``fetch(limit + 1, before)`` asks one
    more than the page holds, so whether a next page exists costs no second query."""
    found = list(await fetch(limit + 1, before))
    items = found[:limit]
    last = items[-1] if items else None
    if len(found) > limit and last is not None and last.created_at is not None:
        return Page(items, (last.created_at, last.id))
    return Page(items, None)
