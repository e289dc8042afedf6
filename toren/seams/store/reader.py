"""Reading runs and their events: what the host API, the CLI and the HTTP API show."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from toren.core.costs import ModelCosts, Period
from toren.core.receipts import run_totals
from toren.core.runs import RunRecord, RunSearch, RunTotals

if TYPE_CHECKING:
    from toren.core.events import Event


class RunReader(abc.ABC):
    """Runs and events as committed, read without a lease (read models over the log).

    Called by the host API (``Runtime.get_run``, ``list_runs``, ``events``, ``follow``,
    ``receipt``, ``get_session``) on every request of ``toren jobs``, the HTTP API and its
    event stream; never by execution, which reads its stream with the lease
    (``RunLog.acquire_and_load``).
    """

    @abc.abstractmethod
    async def get_run(self, run_id: str, agent: str | None = None) -> RunRecord | None:
        """One run, looked up in ``agent``'s schema or, if ``None``, in every registered one.
        ``None`` if there is none, whatever the form of ``run_id`` (the HTTP API passes on
        what it is given)."""

    @abc.abstractmethod
    async def list_runs(self, *, agent: str | None = None, status: str | None = None,
                        limit: int = 50, agents: Sequence[str] | None = None,
                        before: tuple[datetime, str] | None = None,
                        kind: str | None = None, schedule: str | None = None
                        ) -> list[RunRecord]:
        """Newest runs first (by ``created_at``, then id), at most ``limit``, optionally
        filtered by agent (``agent``, else ``agents``, else every registered agent), status,
        kind and the schedule that started them; ``before`` is the ``(created_at, id)`` of the
        last run of the previous page (keyset pagination: only runs strictly older)."""

    async def search_runs(self, search: RunSearch) -> list[RunRecord]:
        """Runs of ``search.agents`` (every registered agent's when empty) that match
        ``search`` (``RunSearch``: words in the input or output, a version, a creation date
        range, the filters of ``list_runs``), ordered by ``search.sort``, ``search.limit`` at
        most after skipping ``search.offset``.

        Called by ``RunsService.page`` (``GET /runs`` with ``q``, ``version``, ``since``,
        ``until`` or ``sort``: the console's runs list) instead of ``list_runs``. Plugin API
        1.6; a store that does not search leaves this as it is, and those requests answer
        501 (the plain filters keep working through ``list_runs``).
        """
        raise NotImplementedError(f"the store {type(self).__name__} does not search runs")

    async def run_totals(self, agent: str, run_ids: Sequence[str]) -> dict[str, RunTotals]:
        """``RunTotals`` (model calls, steps, cost) of each of ``run_ids`` of ``agent``, as
        their receipts count them; a run without model calls is absent (all zero).

        Called by ``RunsService.page`` for every page of ``GET /runs`` (at most 200 runs).
        Plugin API 1.6. This default reads each run's events (``load_events``) and adds them
        up (``toren.core.receipts.run_totals``); the ``postgres`` store sums the model calls
        of the whole page in one query.
        """
        found: dict[str, RunTotals] = {}
        for run_id in run_ids:
            totals = run_totals(await self.load_events(agent, run_id))
            if totals.model_calls:
                found[run_id] = totals
        return found

    async def fork_runs(self, agent: str, run_id: str) -> list[RunRecord]:
        """The forks made from run ``run_id`` of ``agent`` (``ForkStore.create_fork``; a fork is
        of its source's agent), oldest first. Called by ``ForksService.forks_of`` (``GET
        /runs/{id}/forks``, the console's family links). Plugin API 1.5; a store that does
        not list forks leaves this as it is and the route answers 501."""
        raise NotImplementedError(f"the store {type(self).__name__} does not list a run's forks")

    async def costs(self, agents: Sequence[str], since: datetime, until: datetime,
                    period: Period) -> list[ModelCosts]:
        """What the model calls of ``agents`` completed in ``[since, until)`` (UTC midnights:
        the starts of days or weeks) cost, one row per agent, model and UTC ``period``
        (``day``, or ISO ``week`` from Monday) that had any (``ModelCosts``: calls, cost of
        the priced ones, calls without a price, tokens), by the time each
        ``ModelCallCompleted`` was appended. A fork's calls copied from its source (before
        its task's ``TaskForked``) are left out: the source made and paid them (the
        receipt's rule). An agent that never ran has no rows. A store may keep counting the
        calls of runs archived since (the ``postgres`` store does: its ``model_call_costs``
        outlive their events, so a year's history stays whole).

        Called by ``CostsService.report`` (``GET /costs``, the console's Costs page) with a
        window of at most a year; it must stay fast over the whole log. Plugin API 1.6; a
        store that does not add up costs leaves this as it is and the route answers 501."""
        raise NotImplementedError(f"the store {type(self).__name__} does not add up costs")

    @abc.abstractmethod
    async def child_runs(self, run_id: str) -> list[RunRecord]:
        """The runs that ``run_id``'s tasks started (peer calls, background runs), in every
        registered agent's schema, oldest first. Called by ``Runtime.children`` (``toren jobs
        show``, ``GET /runs/{id}/children``) and ``Runtime.cancel_run``, which cancels them.
        ``[]`` for an id that names no run, whatever its form."""

    @abc.abstractmethod
    async def load_events(self, agent: str, run_id: str,
                          after: Mapping[str, int] | None = None) -> list[Event]:
        """Events of a run, every stream, oldest first (each stream in sequence order, an
        earlier append's events before a later one's); with ``after`` (stream -> last seq
        seen) only the ones a reader has not seen (a stream not named starts at 1)."""

    async def get_run_and_events(self, agent: str, run_id: str,
                                 after: Mapping[str, int] | None = None
                                 ) -> tuple[RunRecord | None, list[Event]]:
        """The run's row (``None`` if there is no such run) and then its events after
        ``after`` (as ``load_events``), the events read after the row: when the row says the
        run has ended, its last events are among them.

        Called by the HTTP API's event streams when a notice says a run has new events (one
        read shared by all of the run's streams). This default makes the two reads one after
        the other; the ``postgres`` store sends both statements in one round trip.
        """
        record = await self.get_run(run_id, agent)
        if record is None:
            return None, []
        return record, await self.load_events(agent, run_id, after)

    async def get_runs_and_events(self, agent: str,
                                  positions: Mapping[str, Mapping[str, int]]
                                  ) -> dict[str, tuple[RunRecord | None, list[Event]]]:
        """``get_run_and_events`` for several runs of ``agent`` at once: for each run id of
        ``positions``, its row (``None`` if there is no such run) and its events after its
        position, read after the rows.

        Called by the HTTP API's stream hub with the runs a batch of notices announced (one
        read for the streams of all of them). This default reads the runs one after the
        other; the ``postgres`` store reads them all in one round trip.
        """
        return {run_id: await self.get_run_and_events(agent, run_id, after)
                for run_id, after in positions.items()}

    @abc.abstractmethod
    async def load_stream(self, agent: str, run_id: str, stream: str) -> list[Event]:
        """Every event of one stream, in sequence order (a session's transcript)."""

    async def queue_state(self, agent: str, run_id: str) -> dict[str, Any] | None:
        """Where the run stands in the queue (docs/guides/flow-control.md): ``priority``,
        ``concurrency_key`` and ``waiting``: ``None`` while a worker works it (or when it has
        nothing queued: it waits for a person, a signal or a child, or has ended),
        ``concurrency`` (ready, but its key's slots are all taken), ``queued`` (ready, for a
        worker) or ``delayed`` (a retry or a wake-up not due yet).

        Called by ``GET /runs/{id}``. This default knows nothing (``None``): the ``postgres``
        store reads its queue.
        """
        return None

    async def wait_for_appends(self, run_ids: Collection[str],
                               timeout_s: float) -> set[str] | None:
        """Wait until an append to one of ``run_ids`` commits, or ``timeout_s`` passes.

        Returns the ids among ``run_ids`` that may have new events: appended to since the
        previous call, or watched only since this call (their watch is now in place, so a
        reader should look once); an empty set after ``timeout_s`` without any; ``None`` when
        any run may have been appended to unseen (the listener reconnected): readers look again.
        ``run_ids`` is the whole set to watch: runs left out of a call are no longer watched.

        Called in a loop by one task per server process (the HTTP API's stream hub), which
        wakes the live event streams (SSE) of the runs returned; they then read their new
        events with ``load_events``. The answers are hints, not data: readers still look now
        and then in case one is lost.

        This default waits ``timeout_s`` and returns nothing: with a store that cannot notify,
        readers poll. The ``postgres`` store makes appends to watched runs NOTIFY.
        """
        await asyncio.sleep(timeout_s)
        return set()
