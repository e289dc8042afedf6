"""Live event streams (Server-Sent Events): woken by one listener per process, capped per key,
ended at shutdown and when their key is revoked."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterator
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_writer import HttpVersion11

from toren.core import events as ev
from toren.core.events import Event
from toren.core.runs import RunRecord
from toren.errors import RunNotFound
from toren.host.live import LiveOrder, LiveTextHub
from toren.seams.shapes import TextDelta
from toren.seams.store import RunReader
from toren.server.auth import API_KEY, KEY_CHECK, KeyCheck
from toren.server.cursors import encode_event_cursor
from toren.server.errors import json_error

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds between looks at the log of a run whose streams no notice woke: a lost notice costs
#: at most this much delay, never an event. The hub looks once for all of a run's streams (they
#: share the read), each run drawing within +-20% so that runs do not align.
SSE_FALLBACK_POLL_S = 5.0
#: Seconds after which a stream looks by itself if the hub has not woken it (only if the hub's
#: task were gone: its looks come every ``SSE_FALLBACK_POLL_S``).
SSE_STREAM_LOOK_S = 3 * SSE_FALLBACK_POLL_S
#: Seconds without events after which a stream sends a heartbeat comment.
SSE_HEARTBEAT_S = 15.0
#: Seconds between re-checks of the API key of an open stream (through the key cache, so at
#: most one query per key per ``toren.server.auth.CACHE_TTL_S``).
SSE_KEY_CHECK_S = 5.0
#: Longest wait for notices before the hub hands the store the runs to watch again: a new
#: stream's run is watched within this (the stream reads once more then, missing nothing).
SSE_WATCH_SYNC_S = 0.5
#: Seconds between in-memory checks that the client is still connected.
SSE_CLIENT_CHECK_S = 1.0
#: While the database is unreachable: seconds between tries, and how long before giving up
#: (the stream then ends without an ``end`` event and the client reconnects).
SSE_RETRY_S = 1.0
SSE_GIVE_UP_S = 30.0
#: Seconds a client is told to wait before opening another stream over its cap.
SSE_CAP_RETRY_AFTER_S = 5

#: Seconds between the hub's writes of model text to the idle streams of a run: the pieces
#: made meanwhile go together in one write (the first piece after a pause goes at once). A
#: model streams a piece every 10-50 ms; 1,000 streams of a run cost a write each per piece.
SSE_TEXT_WRITE_INTERVAL_S = 0.1
#: Bytes a client may have unread in its connection's send buffer for the hub to still write
#: to it directly; past that, its stream's task writes (and waits for the client to read).
DIRECT_WRITE_LIMIT = 64 * 1024

SHUTDOWN_COMMENT = b": the server is shutting down; reconnect with Last-Event-ID\n\n"


class ClientGone(Exception):
    """The client of a stream disconnected."""


class StreamSlot:
    """One open stream: woken by its run's notices (``notice``), by the hub's looks for events a
    lost notice would have announced (``look``) and, in between, by pieces of its run's model
    text (``text``).

    A stream whose task is idle in ``wait`` (nothing pending) and whose client reads what it
    is sent is written to directly, without waking its task: the hub writes a run's new
    events to all such streams of the run from one read (``push``), and each piece of model
    text is written as it comes (``text``). The stream's task keeps everything else: its
    first read, catching up, a client that reads slowly, the run's end, heartbeats and key
    checks. With 1,000 streams, a notice or a piece of text costs 1,000 writes, not 1,000
    task wake-ups each followed by a write.

    A wait has a deadline but no timer of its own: one timer per slot, re-armed only when a
    deadline comes before it, checks the client and the deadline every
    ``SSE_CLIENT_CHECK_S`` (a wake-up costs a stream no timer set and cancelled).
    """

    def __init__(self, hub: StreamHub, run_id: str, agent: str = "") -> None:
        self.hub = hub
        self.run_id = run_id
        self.agent = agent
        self.signal = asyncio.Event()
        self.noticed = False
        self.looking = False
        self.text_waiting = False
        #: When the current ``wait`` returns ``None`` (loop time).
        self.deadline = 0.0
        #: The stream's position in the run's log (shared with its task: whoever writes
        #: events moves it).
        self.position: dict[str, int] = {}
        #: Where pieces of text go among the events written (shared likewise).
        self.order = LiveOrder()
        #: The pieces of model text waiting (``LiveTextHub.watch``).
        self.pieces: asyncio.Queue[TextDelta] | None = None
        #: When the stream last wrote (loop time): heartbeats are sent after
        #: ``SSE_HEARTBEAT_S`` without a write.
        self.last_write = 0.0
        #: When the hub last read the run's new events for the stream (loop time): the stream
        #: looks by itself only ``SSE_STREAM_LOOK_S`` after that.
        self.pushed_at = 0.0
        #: Whether the stream's task is in ``wait`` (only then may the hub write).
        self.parked = False
        #: The run's row once the hub wrote the run's last events (it had ended): the task
        #: ends the stream without reading again.
        self.ended: RunRecord | None = None
        self._transport: asyncio.Transport | None = None
        self._request: web.Request | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._gone = False

    def write_directly(self, transport: asyncio.Transport) -> None:
        """The response has started, chunked, on ``transport``: the hub may write to it while
        the stream's task waits."""
        self._transport = transport

    def look_at(self, own_look_at: float) -> float:
        """When the stream looks by itself: at ``own_look_at`` (set at its own last read), or
        later if the hub read for it since (the hub's reads count as its looks)."""
        return max(own_look_at, self.pushed_at + SSE_STREAM_LOOK_S)

    def idle(self) -> bool:
        """Whether the hub may write to the stream now: its task waits with nothing pending
        and its client has read all but ``DIRECT_WRITE_LIMIT`` bytes of what it was sent."""
        transport = self._transport
        return (self.parked and not self.signal.is_set() and transport is not None
                and not transport.is_closing()
                and transport.get_write_buffer_size() <= DIRECT_WRITE_LIMIT)

    def push(self, record: RunRecord | None, batch: EventBatch) -> bool:
        """Write the events of ``batch`` (read after this stream's position, for the run as
        ``record`` was) with the pieces of text they release; ``False`` when the stream's
        task must take over: the stream is busy or the run is gone (nothing written), or the
        run has ended (the task ends the stream after the events written here)."""
        if record is None or not self.idle():
            return False
        self.pushed_at = asyncio.get_running_loop().time()
        if batch.events:
            data = self.take_events(batch)
            self._write(batch.chunk() if data is None else _chunked(data))
        if record.status in ev.TERMINAL_STATUSES:
            self.ended = record
            return False
        return True

    def take_events(self, batch: EventBatch) -> bytes | None:
        """The frames to write for ``batch`` (read at this stream's position, which moves
        past it): the pieces of text waiting first (those of a call go before its
        ``ModelCallCompleted``), then each event with the pieces it releases; ``None`` when
        that is the batch's frames alone (``EventBatch.chunk``, the same for every stream)."""
        shown, _ = self.admit_pieces()
        released = [self.order.saw(event) for event in batch.events]
        self.position.update(batch.position())
        if not shown and not any(released):
            return None
        chunks = [_text_frame(piece) for piece in shown]
        for frame, pieces in zip(batch.frames(), released, strict=True):
            chunks.append(frame)
            chunks.extend(_text_frame(piece) for piece in pieces)
        return b"".join(chunks)

    def notice(self) -> None:
        """The run may have new events."""
        self.noticed = True
        self.signal.set()

    def look(self) -> None:
        """No notice came for a while: look for events a lost one would have announced."""
        self.looking = True
        self.signal.set()

    def text(self) -> None:
        """Pieces of the run's model text are waiting: the hub writes them when the stream
        is idle (``write_text``), else its task does."""
        if self.pieces is not None and self.idle():
            self.hub.write_text_soon(self)
            return
        self.text_waiting = True
        self.signal.set()

    def write_text(self) -> None:
        """Write the pieces waiting, in one chunk (a piece whose call's start the stream has
        not shown yet is held, and the hub reads the run's new events); the stream's task
        does it if the stream is no longer idle."""
        if not self.idle():
            self.text_waiting = True
            self.signal.set()
            return
        shown, held = self.admit_pieces()
        if len(shown) == 1:
            self._write(_text_chunk(shown[0]))
        elif shown:
            self._write(_chunked(b"".join(_text_frame(piece) for piece in shown)))
        if held:
            self.hub.read_soon(self.run_id)

    def admit_pieces(self) -> tuple[list[TextDelta], bool]:
        """The pieces waiting to show now, in order (``LiveOrder.admit``: stale ones dropped);
        whether one is held until its call's start is read."""
        shown: list[TextDelta] = []
        held = False
        pieces = self.pieces
        while pieces is not None and not pieces.empty():
            piece = pieces.get_nowait()
            admitted = self.order.admit(piece)
            if admitted == "now":
                shown.append(piece)
            held = held or admitted == "held"
        return shown, held

    def _write(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)
        self.hub.direct_writes += 1
        self.last_write = asyncio.get_running_loop().time()

    def close(self) -> None:
        """The stream has ended: stop checking on it."""
        self._transport = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def wait(self, timeout_s: float, request: web.Request,
                   write_text: Callable[[], Awaitable[bool]] | None = None) -> bool | None:
        """Wait for a notice (``True``), a look (``False``) or ``timeout_s`` (``None``),
        calling ``write_text`` whenever model text is waiting meanwhile (``True`` when it says
        the run's events must be read first); ``ClientGone`` as soon as the client has
        disconnected (checked every ``SSE_CLIENT_CHECK_S``, in memory)."""
        loop = asyncio.get_running_loop()
        self._request = request
        self.deadline = loop.time() + timeout_s
        if timeout_s <= 0:
            return None
        self._arm(loop)
        while True:
            self.parked = True
            try:
                await self.signal.wait()
            finally:
                self.parked = False
            self.signal.clear()
            if self._gone:
                raise ClientGone
            if self.text_waiting:
                self.text_waiting = False
                if write_text is not None and await write_text():
                    self.noticed = True
            if self.noticed:
                self.noticed = self.looking = False  # a full read looks too
                return True
            if self.looking:
                self.looking = False
                return False
            if loop.time() >= self.deadline:
                return None

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have the timer fire by the deadline and within ``SSE_CLIENT_CHECK_S``."""
        now = loop.time()
        when = now + SSE_CLIENT_CHECK_S
        if self.deadline > now:
            when = min(when, self.deadline)
        if self._timer is not None:
            if self._timer.when() <= when:
                return
            self._timer.cancel()
        self._timer = loop.call_at(when, self._tick)

    def _tick(self) -> None:
        """Wake the wait if the client has gone or its deadline has passed; come back."""
        self._timer = None
        transport = self._request.transport if self._request is not None else None
        if transport is None or transport.is_closing():
            self._gone = True
            self.signal.set()
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= self.deadline:
            self.signal.set()
        self._arm(loop)


class SharedReads:
    """One database read for the streams of a run that ask the same thing at the same time.

    A notice wakes the streams of its run that the hub does not write to itself (``push``)
    at once, a look wakes all of them, and the streams that were up to date all ask for the
    run's row and the events after the same position: the first one's read is shared by the
    others (1,000 viewers of a run cost one round trip per notice, not 1,000).

    A read may only be joined by a stream that was woken before it began: ``generation``
    counts a run's notices, and a read started at generation ``g`` serves askers at ``g`` or
    earlier, so an event announced after a read began is never hidden by that read.
    """

    def __init__(self) -> None:
        self._generation: Counter[str] = Counter()
        self._reads: dict[tuple[Any, ...], tuple[int, asyncio.Future[Any]]] = {}
        #: Reads made so far, by the first item of their key (``"events"``, with or without the
        #: run's row): for tests and benchmarks, which compare them with the notices (one read
        #: per notice, not per stream).
        self.made: Counter[str] = Counter()

    def noticed(self, run_id: str) -> None:
        """The run has (or may have) new events: reads begun before now are stale."""
        self._generation[run_id] += 1

    def forget(self, run_id: str) -> None:
        """No stream of the run is open any more."""
        self._generation.pop(run_id, None)

    async def read(self, key: tuple[Any, ...], run_id: str,
                   fetch: Callable[[], Awaitable[T]]) -> T:
        """``fetch()``'s result, from a read of ``key`` in flight if one began no earlier than
        this run's latest notice, else from a new one. A cancelled asker does not cancel the
        read for the others."""
        generation = self._generation[run_id]
        found = self._reads.get(key)
        task: asyncio.Future[Any]
        if found is None or found[0] < generation:
            self.made[key[0]] += 1
            task = asyncio.ensure_future(fetch())
            self._reads[key] = (generation, task)
            task.add_done_callback(functools.partial(self._done, key))
        else:
            task = found[1]
        result: T = await asyncio.shield(task)
        return result

    def _done(self, key: tuple[Any, ...], task: asyncio.Future[Any]) -> None:
        if key in self._reads and self._reads[key][1] is task:
            del self._reads[key]
        if not task.cancelled():
            task.exception()  # retrieved: an asker that went away leaves no warning behind


class EventBatch:
    """A run's events after a position, as one read found them, with their SSE frames
    encoded once for every stream sharing the read (1,000 viewers of a run cost one encoding
    of each event, not 1,000: each frame carries the cursor after its event, the same for all
    of them since they had seen the same).
    """

    def __init__(self, events: list[Event], after: dict[str, int]) -> None:
        #: The events, in log order (shared: read them, never change them).
        self.events = events
        self._after = after
        self._frames: list[bytes] | None = None
        self._position: dict[str, int] = after
        self._chunk: bytes | None = None

    def frames(self) -> list[bytes]:
        """One SSE frame per event (``id:`` its cursor), encoded at the first call."""
        if self._frames is None:
            position, frames = dict(self._after), []
            for event in self.events:
                position[event.stream] = max(position.get(event.stream, 0), event.seq)
                cursor = encode_event_cursor(position)
                payload = json.dumps(event_json(event, cursor), default=str)
                frames.append(f"id: {cursor}\nevent: {event.type}\ndata: {payload}\n\n"
                              .encode())
            self._frames, self._position = frames, position
        return self._frames

    def position(self) -> dict[str, int]:
        """The position after the batch's last event (a copy)."""
        self.frames()
        return dict(self._position)

    def chunk(self) -> bytes:
        """All the frames as one chunk of a chunked response, made at the first call (the
        hub writes the same bytes to every stream of the run)."""
        if self._chunk is None:
            self._chunk = _chunked(b"".join(self.frames()))
        return self._chunk


class StreamHub:
    """The open streams of one server process.

    One task calls ``RunReader.wait_for_appends`` with the runs of the open streams (the store
    keeps one LISTEN connection per process, opened with the first stream) and, for each run
    it returns, reads the run's new events once and writes them to the run's idle streams
    (``StreamSlot.push``), waking the others; ``None`` wakes them all. The streams of a run
    share their reads of it (``SharedReads``).
    ``open`` counts streams per API key (``max_per_key``); ``close`` ends them all at shutdown.
    """

    def __init__(self, reader: RunReader, live: LiveTextHub, *, max_per_key: int) -> None:
        #: The hot tables' reader (``runtime.runs.reader``), whose reads streams share.
        self.reader = reader
        #: Pieces of model text as they are generated (``text_delta`` events between events).
        self.live = live
        self.max_per_key = max_per_key
        self.closing = False
        self._slots: dict[str, set[StreamSlot]] = {}
        self._per_owner: Counter[str] = Counter()
        self._watcher: asyncio.Task[None] | None = None
        self._next_look: dict[str, float] = {}
        #: The task writing runs' new events to their idle streams, and the runs due for it.
        self._pusher: asyncio.Task[None] | None = None
        self._push_due: dict[str, None] = {}
        #: By run: its idle streams with pieces of text waiting, written together
        #: (``write_text_soon``), and when its streams may next be written text.
        self._text_due: dict[str, dict[StreamSlot, None]] = {}
        self._text_next: dict[str, float] = {}
        self.reads = SharedReads()
        #: Wake-ups of a run's streams so far (a notice of the run, or a look at every run).
        self.notices = 0
        #: Looks so far at a run that no notice woke for ``SSE_FALLBACK_POLL_S``.
        self.looks = 0
        #: Writes the hub made to idle streams so far (events, and pieces of text), where
        #: each stream's task would have been woken to write.
        self.direct_writes = 0

    async def load_events(self, store: RunReader, agent: str, run_id: str,
                          after: dict[str, int]) -> EventBatch:
        """The run's events after ``after``, read (and encoded) once for all of its streams
        that have seen the same and ask at the same time."""
        seen = dict(after)

        async def fetch() -> EventBatch:
            return EventBatch(await store.load_events(agent, run_id, seen), seen)

        if store is not self.reader:
            return await fetch()
        return await self.reads.read(("events", run_id, frozenset(seen.items())), run_id, fetch)

    async def load_run_and_events(self, store: RunReader, agent: str, run_id: str,
                                  after: dict[str, int]
                                  ) -> tuple[RunRecord | None, EventBatch]:
        """The run's row and then its events after ``after`` (``get_run_and_events``: one
        round trip with the ``postgres`` store), read once for all of its streams that have
        seen the same and ask at the same time (from the hub's reader: a stream reading
        elsewhere, such as an archived run's, reads alone)."""
        seen = dict(after)

        async def fetch() -> tuple[RunRecord | None, EventBatch]:
            record, events = await store.get_run_and_events(agent, run_id, seen)
            return record, EventBatch(events, seen)

        if store is not self.reader:
            return await fetch()
        return await self.reads.read(("events", run_id, frozenset(seen.items()), "run"),
                                     run_id, fetch)

    @contextlib.contextmanager
    def open(self, run_id: str, owner: str, agent: str = "") -> Iterator[StreamSlot | None]:
        """A slot for a stream of ``run_id`` (of ``agent``) held by ``owner`` (a key id, or
        ``""`` without keys), or ``None`` when the owner already holds ``max_per_key``
        streams."""
        if self._per_owner[owner] >= self.max_per_key:
            yield None
            return
        if not self.closing and (self._watcher is None or self._watcher.done()):
            self._watcher = asyncio.create_task(self._watch(), name="toren-sse-notices")
        slot = StreamSlot(self, run_id, agent)
        self._slots.setdefault(run_id, set()).add(slot)
        self._next_look.setdefault(run_id, _look_after())
        self._per_owner[owner] += 1
        try:
            yield slot
        finally:
            slot.close()
            self._per_owner[owner] -= 1
            if not self._per_owner[owner]:
                del self._per_owner[owner]
            slots = self._slots[run_id]
            slots.discard(slot)
            if not slots:
                del self._slots[run_id]
                self._next_look.pop(run_id, None)
                self._text_next.pop(run_id, None)
                self.reads.forget(run_id)

    def _wake(self, run_id: str) -> None:
        self.notices += 1
        if run_id in self._next_look:
            self._next_look[run_id] = _look_after()
        self.reads.noticed(run_id)
        pushed = False
        for slot in self._slots.get(run_id, ()):
            if not self.closing and slot.idle():
                pushed = True
            else:
                slot.notice()
        if pushed:
            self.read_soon(run_id)

    def write_text_soon(self, slot: StreamSlot) -> None:
        """Have ``slot`` write its pieces of text with the others waiting for its run: once
        the pieces heard with this one are queued too (they come from one notification
        read, in one turn of the loop), and ``SSE_TEXT_WRITE_INTERVAL_S`` after the run's
        last such write."""
        run_id = slot.run_id
        due = self._text_due.get(run_id)
        if due is None:
            due = self._text_due[run_id] = {}
            loop = asyncio.get_running_loop()
            loop.call_at(max(loop.time(), self._text_next.get(run_id, 0.0)),
                         self._write_texts, run_id)
        due[slot] = None

    def _write_texts(self, run_id: str) -> None:
        due = self._text_due.pop(run_id, {})
        if run_id in self._slots:
            self._text_next[run_id] = (asyncio.get_running_loop().time()
                                       + SSE_TEXT_WRITE_INTERVAL_S)
        for slot in due:
            slot.write_text()

    def read_soon(self, run_id: str) -> None:
        """Read the run's new events and write them to its idle streams: with the other runs
        due, now or right after the read under way (which may have begun before what is new
        was committed)."""
        self._push_due[run_id] = None
        if self._pusher is None or self._pusher.done():
            self._pusher = asyncio.create_task(self._push(), name="toren-sse-push")

    async def _push(self) -> None:
        """Until no run is due: one read of the runs due, their events written to their idle
        streams (``_push_runs``); if that fails unexpectedly, the streams read for
        themselves."""
        while self._push_due:
            due, self._push_due = self._push_due, {}
            try:
                await self._push_runs(due)
            except Exception:
                log.exception("writing new events to event streams failed; they read alone")
                for run_id in due:
                    for slot in self._slots.get(run_id, ()):
                        slot.notice()

    async def _push_runs(self, due: Collection[str]) -> None:
        """One read of the runs ``due`` (``get_runs_and_events``, per agent), each run's events
        written to its idle streams at the position the read was made for; a stream that is
        not idle there, or that the read cannot serve (it failed, the run has ended or is
        gone), is woken to read for itself."""
        by_agent: dict[str, dict[str, tuple[dict[str, int], list[StreamSlot]]]] = {}
        for run_id in due:
            at: dict[frozenset[tuple[str, int]], list[StreamSlot]] = {}
            for slot in self._slots.get(run_id, ()):
                if slot.idle():
                    at.setdefault(frozenset(slot.position.items()), []).append(slot)
            if not at:
                continue
            # the streams of a run are usually all at one position: the others read alone
            most = max(at, key=lambda position: len(at[position]))
            for position, slots in at.items():
                if position != most:
                    for slot in slots:
                        slot.notice()
            by_agent.setdefault(at[most][0].agent, {})[run_id] = (dict(most), at[most])
        for agent, runs in by_agent.items():
            self.reads.made["push"] += 1
            try:
                found = await self.reader.get_runs_and_events(
                    agent, {run_id: after for run_id, (after, _) in runs.items()})
            except Exception as exc:  # each stream waits the failure out itself
                log.debug("reading the new events of %d run(s) failed: %s", len(runs), exc)
                found = {}
            for run_id, (after, slots) in runs.items():
                if run_id not in found:
                    for slot in slots:
                        slot.notice()
                    continue
                record, events = found[run_id]
                batch = EventBatch(events, after)
                for slot in slots:
                    if slot.position != after or not slot.push(record, batch):
                        slot.notice()

    def _wake_all(self) -> None:
        for run_id in list(self._slots):
            self._wake(run_id)

    async def _watch(self) -> None:
        while True:
            try:
                found = await self.reader.wait_for_appends(set(self._slots), SSE_WATCH_SYNC_S)
            except Exception:
                # streams fall back to their slow look meanwhile
                log.exception("waiting for new events failed; trying again")
                self._wake_all()
                await asyncio.sleep(SSE_RETRY_S)
                continue
            if found is None:
                self._wake_all()
                continue
            for run_id in found:
                self._wake(run_id)
            self._look_where_due()

    def _look_where_due(self) -> None:
        """Wake the streams of each run that no notice woke for ``SSE_FALLBACK_POLL_S`` to
        look for new events, all at once: they share the read (one per run, not per stream)."""
        now = asyncio.get_running_loop().time()
        for run_id, due in list(self._next_look.items()):
            if due <= now:
                self._next_look[run_id] = _look_after()
                self.looks += 1
                for slot in self._slots.get(run_id, ()):
                    slot.look()

    async def close(self) -> None:
        """End every open stream (each sends a comment saying why, then closes) and stop
        listening. For ``on_shutdown``: streams never end by themselves."""
        self.closing = True
        self._wake_all()
        if self._pusher is not None:
            self._pusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pusher
            self._pusher = None
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None


#: The application's stream hub.
STREAMS = web.AppKey("streams", StreamHub)


def _look_after() -> float:
    """When the hub next looks at a run no notice woke (within +-20%, so runs do not align)."""
    return asyncio.get_running_loop().time() + SSE_FALLBACK_POLL_S * random.uniform(0.8, 1.2)


def event_json(event: Event, cursor: str) -> dict[str, Any]:
    """An event as the API shows it, with the cursor that resumes after it."""
    return event.to_json() | {"cursor": cursor}


@functools.lru_cache(maxsize=256)
def _text_frame(piece: TextDelta) -> bytes:
    """A piece of model text as an SSE event without ``id:`` (it is never replayed); cached,
    as every stream of the run writes the same piece."""
    return (f"event: text_delta\ndata: {json.dumps(piece.to_json(), ensure_ascii=False)}\n\n"
            .encode())


@functools.lru_cache(maxsize=256)
def _text_chunk(piece: TextDelta) -> bytes:
    """``_text_frame`` as one chunk of a chunked response (what the hub writes)."""
    return _chunked(_text_frame(piece))


def _end_frame(record: RunRecord) -> bytes:
    """The ``end`` event of a stream whose run has ended as ``record`` says."""
    end = json.dumps({"status": record.status, "stop_reason": record.stop_reason})
    return f"event: end\ndata: {end}\n\n".encode()


def _chunked(data: bytes) -> bytes:
    """``data`` as one chunk of an HTTP/1.1 chunked response body (RFC 9112, 7.1)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def too_many_streams(hub: StreamHub, keyed: bool) -> web.Response:
    whose = "this API key has" if keyed else "this server has"
    response = json_error(
        429, "too_many_streams",
        f"{whose} {hub.max_per_key} event streams open, the most allowed "
        "(TOREN_MAX_STREAMS_PER_KEY); close one (or read GET /runs/{id}/events as JSON) and "
        "try again")
    response.headers["Retry-After"] = str(SSE_CAP_RETRY_AFTER_S)
    return response


async def stream_events(request: web.Request, store: RunReader, record: RunRecord,
                        position: dict[str, int]) -> web.StreamResponse:
    """Server-Sent Events: every event once, in order, each with an ``id:`` a client sends
    back as ``Last-Event-ID`` to continue exactly where it left; comments as heartbeats;
    ``text_delta`` events (no ``id:``, best-effort, never replayed) with pieces of a model's
    text as it is generated, before that call's ``ModelCallCompleted``; an ``end`` event
    when the run has ended; an ``error`` event when the stream's API key was
    revoked; a comment when the server shuts down. 429 over the per-key cap."""
    hub = request.app[STREAMS]
    key = request.get(API_KEY)
    with hub.open(record.id, key.id if key is not None else "", record.agent) as slot:
        if slot is None:
            return too_many_streams(hub, key is not None)
        slot.position = position
        with hub.live.watch(record.id, slot.text) as slot.pieces:
            return await _respond(request, store, record, slot)


async def _respond(request: web.Request, store: RunReader, record: RunRecord,
                   slot: StreamSlot) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no"})
        # chunked, as aiohttp does by itself for HTTP/1.1, but said: the hub writes chunks
        direct = request.version == HttpVersion11 and store is slot.hub.reader
        if direct:
            response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            if direct and request.transport is not None:
                slot.write_directly(request.transport)
            await _pump(request, response, slot, store, record)
            await response.write_eof()
        except (ConnectionResetError, ClientGone):
            # a client going away is how streams usually end
            log.debug("the client of the event stream of run %s went away", record.id)
        return response


async def _pump(request: web.Request, response: web.StreamResponse, slot: StreamSlot,
                store: RunReader, record: RunRecord) -> None:
    loop = asyncio.get_running_loop()
    hub = slot.hub
    position = slot.position
    slot.last_write = next_key_check = loop.time()

    async def write(data: bytes) -> None:
        await response.write(data)
        slot.last_write = loop.time()

    async def write_text() -> bool:
        """Write the pieces waiting; whether one waits for its call's start to be read."""
        shown, held = slot.admit_pieces()
        if shown:
            await write(b"".join(_text_frame(piece) for piece in shown))
        return held

    key_check = request.get(KEY_CHECK)
    failing_since: float | None = None
    # True: the run's row and its new events; False: only a look for new events; None: no read
    # (a wake for a heartbeat or a key check)
    full_read: bool | None = True
    own_look_at = loop.time() + SSE_STREAM_LOOK_S
    while True:
        if hub.closing:
            await response.write(SHUTDOWN_COMMENT)
            return
        try:
            if full_read is False:
                # no notice woke us: look for events a lost notice would have announced. The
                # run's status never changes without an event, so new events are the only sign
                full_read = bool((await hub.load_events(store, record.agent, record.id,
                                                        position)).events)
            if full_read:
                # the row first: if it is terminal, the events read after it include its last
                found, batch = await hub.load_run_and_events(store, record.agent, record.id,
                                                             position)
                if found is None:
                    raise RunNotFound(f"run {record.id} is gone")
                current = found
        except Exception as exc:  # the database went away: the response is already started
            failing_since = failing_since or loop.time()
            if loop.time() - failing_since > SSE_GIVE_UP_S:
                # end without an `end` event: the client reconnects with Last-Event-ID
                log.warning("ending the event stream of run %s: %s", record.id, exc)
                return
            await slot.wait(SSE_RETRY_S, request, write_text)
            full_read = True
            continue
        failing_since = None
        if full_read:
            if batch.events:
                # one write for the batch: the pieces of text waiting, then its frames, with
                # the pieces of text each event releases right after it
                data = slot.take_events(batch)
                await write(b"".join(batch.frames()) if data is None else data)
            if current.status in ev.TERMINAL_STATUSES:
                await response.write(_end_frame(current))
                return
        now = loop.time()
        if now - slot.last_write >= SSE_HEARTBEAT_S:
            await write(b": heartbeat\n\n")
        if key_check is not None and now >= next_key_check:
            if await _key_revoked(key_check, record):
                await response.write(b'event: error\ndata: {"error": {"code": '
                                     b'"api_key_revoked", "message": "the API key of this '
                                     b'stream was revoked; reconnect with an active key"}}\n\n')
                return
            next_key_check = now + SSE_KEY_CHECK_S
        if full_read is not None:
            own_look_at = now + SSE_STREAM_LOOK_S * random.uniform(0.8, 1.2)
        wait_s = min(slot.look_at(own_look_at) - now, slot.last_write + SSE_HEARTBEAT_S - now)
        if key_check is not None:
            wait_s = min(wait_s, next_key_check - now)
        full_read = await slot.wait(max(wait_s, 0.0), request, write_text)
        if slot.ended is not None:  # the hub wrote the run's last events
            await response.write(_end_frame(slot.ended))
            return
        if full_read is None and loop.time() >= slot.look_at(own_look_at):
            full_read = False  # the hub did not look (its task is gone): look alone


async def _key_revoked(key_check: KeyCheck, record: RunRecord) -> bool:
    try:
        return not await key_check.still_active()
    except Exception as exc:  # the database is unreachable: the reads above wait it out
        log.debug("could not re-check the key of the event stream of run %s: %s", record.id,
                  exc)
        return False
