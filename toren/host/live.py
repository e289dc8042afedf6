"""Live model text: the pieces of text a model generates, fanned out to the watchers of its run
in this process at once, and to other processes through the store (``LiveText``).

Nothing here is durable. The log keeps the completed call (``ModelCallCompleted``); a watcher
that misses pieces (it connected late, a notification was lost, its queue was full) shows the
completed text when that event arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator

from toren.core.events import MODEL_CALL_COMPLETED, MODEL_CALL_STARTED, Event
from toren.seams.shapes import TextDelta
from toren.seams.store import LiveText

log = logging.getLogger(__name__)

#: Pieces a watcher may have waiting before newer ones are dropped (a stalled client).
WATCHER_QUEUE_MAX = 10_000
#: Seconds a run nobody watches in another process is not published for (a NOTIFY saved per
#: piece); a stream opened meanwhile misses at most this much of the text.
UNWATCHED_PAUSE_S = 0.25


class LiveTextHub:
    """One per ``Runtime``. Workers ``publish`` each piece (never blocks); the HTTP API's event
    streams and ``Runtime.follow_live`` ``watch`` a run.

    Publishing hands the piece to every watcher of its run in this process, and sends it to
    other processes through ``store.publish_texts``, one send in flight at a time for all
    runs (pieces made meanwhile, of any run, go together in the next one, so a slow database
    delays text, it does not pile up sends; a worker with 1,000 runs in model calls sends one
    statement where it sent one per run). A run nobody watches is not sent for
    ``UNWATCHED_PAUSE_S``. A process with watchers listens (``store.listen_text``) and
    hands its watchers what other processes published; its own pieces come back that way too
    and are skipped (they carry this hub's ``origin``).
    """

    def __init__(self, store: LiveText) -> None:
        self.store = store
        #: Identifies this process's pieces among those heard from the store.
        self.origin = uuid.uuid4().hex[:12]
        self._watchers: dict[str, set[asyncio.Queue[TextDelta]]] = {}
        self._unsent: dict[str, list[TextDelta]] = {}
        self._sender: asyncio.Task[None] | None = None
        self._unwatched_until: dict[str, float] = {}
        self._pruned_at = 0.0
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._listener: asyncio.Task[None] | None = None

    def publish(self, delta: TextDelta) -> None:
        """Hand ``delta`` to its run's watchers here, and queue it for other processes."""
        run_id = delta.run_id
        # membership tests first: a piece nobody here watches, of a run paused as unwatched
        # elsewhere (most pieces), costs one clock read
        if run_id in self._watchers:
            self._deliver(delta)
        unwatched = self._unwatched_until
        if run_id in unwatched and time.monotonic() < unwatched[run_id]:
            return
        self._unsent.setdefault(run_id, []).append(delta)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send(), name="toren-live-text")

    def seen_watched(self, run_id: str, watched: bool) -> None:
        """The store learned whether anyone watches ``run_id`` (``LiveText.on_run_watched``):
        a run nobody watches is paused as if a send had found so; a watched one is sent at
        once."""
        if watched:
            self._unwatched_until.pop(run_id, None)
            return
        now = time.monotonic()
        self._unwatched_until[run_id] = now + UNWATCHED_PAUSE_S
        self._prune(now)

    @contextlib.contextmanager
    def watch(self, run_id: str, on_piece: Callable[[], None] | None = None
              ) -> Iterator[asyncio.Queue[TextDelta]]:
        """A queue that gets the pieces of ``run_id``'s model text from now on, while the
        ``with`` block lasts; ``on_piece`` is called after each piece is queued."""
        queue: asyncio.Queue[TextDelta] = asyncio.Queue(WATCHER_QUEUE_MAX)
        if on_piece is not None:
            self._callbacks[id(queue)] = on_piece
        self._watchers.setdefault(run_id, set()).add(queue)
        if self._listener is None or self._listener.done():
            self._listener = asyncio.create_task(self._listen(), name="toren-live-text-listener")
        try:
            yield queue
        finally:
            self._callbacks.pop(id(queue), None)
            queues = self._watchers.get(run_id, set())
            queues.discard(queue)
            if not queues:
                self._watchers.pop(run_id, None)

    async def close(self) -> None:
        """Stop listening and sending (pieces not sent yet are dropped)."""
        tasks = [task for task in (self._sender, self._listener) if task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._sender = None
        self._unsent.clear()
        self._listener = None

    def encode(self, delta: TextDelta) -> str:
        """The payload other processes hear (under 8000 bytes: ``TEXT_DELTA_MAX_CHARS``)."""
        return json.dumps({"origin": self.origin, **delta.to_json()}, ensure_ascii=False,
                          separators=(",", ":"))

    def _deliver(self, delta: TextDelta) -> None:
        for queue in self._watchers.get(delta.run_id, ()):
            with contextlib.suppress(asyncio.QueueFull):  # a stalled watcher misses pieces
                queue.put_nowait(delta)
                callback = self._callbacks.get(id(queue))
                if callback is not None:
                    callback()

    async def _send(self) -> None:
        """Send what every run has unsent, in one ``publish_texts`` call, until nothing is
        left; a run found unwatched is paused (its unsent pieces dropped)."""
        while self._unsent:
            batch, self._unsent = self._unsent, {}
            try:
                watched = await self.store.publish_texts(
                    {run_id: [self.encode(d) for d in pieces] for run_id, pieces in batch.items()})
            except Exception as exc:  # best-effort: text is lost, the log is not
                log.debug("could not publish live text of %d run(s): %s", len(batch), exc)
                watched = set(batch)
            now = time.monotonic()
            for run_id in batch:
                if run_id not in watched:
                    self._unwatched_until[run_id] = now + UNWATCHED_PAUSE_S
                    self._unsent.pop(run_id, None)
            self._prune(now)

    def _prune(self, now: float) -> None:
        """Forget the pauses that are over (at most once a second: one pass over them)."""
        if now - self._pruned_at >= 1.0:
            self._pruned_at = now
            for stale in [r for r, until in self._unwatched_until.items() if until < now]:
                del self._unwatched_until[stale]

    def _heard(self, payload: str) -> None:
        try:
            data = json.loads(payload)
            if data.get("origin") == self.origin or data.get("run_id") not in self._watchers:
                return
            delta = TextDelta.from_json(data)
        except (ValueError, KeyError, TypeError, AttributeError):
            log.debug("ignoring a malformed live text payload")
            return
        self._deliver(delta)

    async def _listen(self) -> None:
        try:
            await self.store.listen_text(self._heard)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("listening for live text failed; watchers see text from this "
                          "process only")


class LiveOrder:
    """Keeps a watcher's pieces in their place among the run's events: a piece is shown only
    after its call's ``ModelCallStarted`` (so never before the tool results of the step before
    it), and a piece of a call whose ``ModelCallCompleted`` was shown is dropped (the event
    has the whole text).

    A reader calls ``saw`` after each event it hands on (and hands on the pieces it returns),
    and ``admit`` for each piece: ``"now"`` to hand it on, ``"held"`` when its call's start is
    not read yet (the reader should read its new events at once), ``"stale"`` to drop it.
    """

    def __init__(self) -> None:
        self.started: set[tuple[str, int]] = set()
        self.completed: set[tuple[str, int]] = set()
        self.held: list[TextDelta] = []

    def saw(self, event: Event) -> list[TextDelta]:
        if event.type not in (MODEL_CALL_STARTED, MODEL_CALL_COMPLETED) or event.data.get(
                "purpose") is not None:
            return []
        call = (event.stream.removeprefix("task:"), int(event.data["step"]))
        if event.type == MODEL_CALL_COMPLETED:
            self.completed.add(call)
            self.held = [piece for piece in self.held if (piece.task_id, piece.step) != call]
            return []
        self.started.add(call)
        released = [piece for piece in self.held if (piece.task_id, piece.step) == call]
        self.held = [piece for piece in self.held if (piece.task_id, piece.step) != call]
        return released

    def admit(self, piece: TextDelta) -> str:
        call = (piece.task_id, piece.step)
        if call in self.completed:
            return "stale"
        if call in self.started:
            return "now"
        self.held.append(piece)
        return "held"
