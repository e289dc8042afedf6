"""Live text across processes: pieces of model text published by workers, heard by servers."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Mapping, Sequence


class LiveText(abc.ABC):  # noqa: B024 - every method has a default (publish and hear nothing)
    """A best-effort channel for what is never written to the log: the pieces of a model's
    text as it is generated (``toren.seams.shapes.TextDelta``, encoded by the host).

    The host's live fan-out (``toren.host.live.LiveTextHub``) calls ``publish_texts`` from the
    worker that makes model calls (the pieces of every run made since its last send), and
    runs ``listen_text`` in a server process that has a watcher of a run (an open event
    stream), so a watcher in another process than the worker sees the text too. Payloads may
    be lost (a listener reconnecting); readers render the completed call from the log in any
    case.

    A run is watched while a reader of some process waits for its appends
    (``RunReader.wait_for_appends`` has it in its set: the stream hub of a server with a live
    event stream of the run open). The defaults publish nothing and hear nothing: with a store
    that cannot notify, only
    watchers in the worker's own process see text live. The ``postgres`` store uses NOTIFY
    (each payload must stay under its 8000-byte limit).
    """

    async def publish_text(self, run_id: str, payloads: Sequence[str]) -> bool:
        """Send ``payloads`` (in order) to the listeners of other processes if anyone watches
        ``run_id`` (a live event stream is open); return whether someone did."""
        return False

    async def publish_texts(self, payloads: Mapping[str, Sequence[str]]) -> set[str]:
        """``publish_text`` for several runs at once (``payloads`` by run id); return the runs
        someone watches. A store that can should do it in one round trip: a worker with
        thousands of runs in model calls has text for many of them at any moment, and most
        of them are watched by nobody. The default calls ``publish_text`` once per run."""
        return {run_id for run_id, texts in payloads.items()
                if await self.publish_text(run_id, texts)}

    def on_run_watched(self, seen: Callable[[str, bool], None]) -> None:  # noqa: B027
        """Have ``seen(run_id, watched)`` called whenever the store learns, in the course of
        other work, whether anyone watches a run live: the ``postgres`` store's leased appends
        check it anyway (to wake the run's streams), so a worker whose append just found a
        run unwatched sends no text of it for a moment (``toren.host.live``) instead of
        asking with ``publish_texts``. By default never called."""

    async def listen_text(self, deliver: Callable[[str], None]) -> None:
        """Call ``deliver`` with every payload published (by any process) until cancelled;
        reconnect by itself when the connection is lost."""
        await asyncio.Event().wait()
