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
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from aiohttp import web

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

SHUTDOWN_COMMENT = b": the server is shutting down; reconnect with Last-Event-ID\n\n"


class ClientGone(Exception):
    """The client of a stream disconnected."""


class StreamSlot:
    """One open stream: woken by its run's notices (``notice``), by the hub's looks for events a
    lost notice would have announced (``look``) and, in between, by pieces of its run's model
    text (``text``).

    A wait has a deadline but no timer of its own: one timer per slot, re-armed only when a
    deadline comes before it, checks the client and the deadline every
    ``SSE_CLIENT_CHECK_S`` (a wake-up costs a stream no timer set and cancelled, which was
    the larger part of its cost with 1,000 streams woken for every piece of model text).
    """

    def __init__(self, hub: StreamHub, run_id: str) -> None:
        self.hub = hub
        self.run_id = run_id
        self.signal = asyncio.Event()
        self.noticed = False
        self.looking = False
        self.text_waiting = False
        #: When the current ``wait`` returns ``None`` (loop time).
        self.deadline = 0.0
        self._request: web.Request | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._gone = False

    def notice(self) -> None:
        """The run may have new events."""
        self.noticed = True
        self.signal.set()

    def look(self) -> None:
        """No notice came for a while: look for events a lost one would have announced."""
        self.looking = True
        self.signal.set()

    def text(self) -> None:
        """Pieces of the run's model text are waiting."""
        self.text_waiting = True
        self.signal.set()

    def close(self) -> None:
        """The stream has ended: stop checking on it."""
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
            await self.signal.wait()
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

    A notice wakes every stream of its run at once, and the streams that were up to date all
    ask for the run's row and the events after the same position: the first one's read is
    shared by the others (1,000 viewers of a run cost one round trip per notice, not 1,000).

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


class StreamHub:
    """The open streams of one server process.

    One task calls ``RunReader.wait_for_appends`` with the runs of the open streams (the store
    keeps one LISTEN connection per process, opened with the first stream) and wakes the
    streams of each run it returns; ``None`` wakes them all. The streams of a run share their
    reads of it (``SharedReads``).
    ``open`` counts streams per API key (``max_per_key``); ``close`` ends them all at shutdown.
    """

    def __init__(self, store: RunReader, live: LiveTextHub, *, max_per_key: int) -> None:
        self.store = store
        #: Pieces of model text as they are generated (``text_delta`` events between events).
        self.live = live
        self.max_per_key = max_per_key
        self.closing = False
        self._slots: dict[str, set[StreamSlot]] = {}
        self._per_owner: Counter[str] = Counter()
        self._watcher: asyncio.Task[None] | None = None
        self._next_look: dict[str, float] = {}
        self.reads = SharedReads()
        #: Wake-ups of a run's streams so far (a notice of the run, or a look at every run).
        self.notices = 0
        #: Looks so far at a run that no notice woke for ``SSE_FALLBACK_POLL_S``.
        self.looks = 0

    async def load_events(self, store: RunReader, agent: str, run_id: str,
                          after: dict[str, int]) -> EventBatch:
        """The run's events after ``after``, read (and encoded) once for all of its streams
        that have seen the same and ask at the same time."""
        seen = dict(after)

        async def fetch() -> EventBatch:
            return EventBatch(await store.load_events(agent, run_id, seen), seen)

        if store is not self.store:
            return await fetch()
        return await self.reads.read(("events", run_id, frozenset(seen.items())), run_id, fetch)

    async def load_run_and_events(self, store: RunReader, agent: str, run_id: str,
                                  after: dict[str, int]
                                  ) -> tuple[RunRecord | None, EventBatch]:
        """The run's row and then its events after ``after`` (``get_run_and_events``: one
        round trip with the ``postgres`` store), read once for all of its streams that have
        seen the same and ask at the same time (from the hub's store: a stream reading
        elsewhere, such as an archived run's, reads alone)."""
        seen = dict(after)

        async def fetch() -> tuple[RunRecord | None, EventBatch]:
            record, events = await store.get_run_and_events(agent, run_id, seen)
            return record, EventBatch(events, seen)

        if store is not self.store:
            return await fetch()
        return await self.reads.read(("events", run_id, frozenset(seen.items()), "run"),
                                     run_id, fetch)

    @contextlib.contextmanager
    def open(self, run_id: str, owner: str) -> Iterator[StreamSlot | None]:
        """A slot for a stream of ``run_id`` held by ``owner`` (a key id, or ``""`` without
        keys), or ``None`` when the owner already holds ``max_per_key`` streams."""
        if self._per_owner[owner] >= self.max_per_key:
            yield None
            return
        if not self.closing and (self._watcher is None or self._watcher.done()):
            self._watcher = asyncio.create_task(self._watch(), name="toren-sse-notices")
        slot = StreamSlot(self, run_id)
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
                self.reads.forget(run_id)

    def _wake(self, run_id: str) -> None:
        self.notices += 1
        if run_id in self._next_look:
            self._next_look[run_id] = _look_after()
        self.reads.noticed(run_id)
        for slot in self._slots.get(run_id, ()):
            slot.notice()

    def _wake_all(self) -> None:
        for run_id in list(self._slots):
            self._wake(run_id)

    async def _watch(self) -> None:
        while True:
            try:
                found = await self.store.wait_for_appends(set(self._slots), SSE_WATCH_SYNC_S)
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
def _text_frame(piece: TextDelta) -> str:
    """A piece of model text as an SSE event without ``id:`` (it is never replayed); cached,
    as every stream of the run writes the same piece."""
    return f"event: text_delta\ndata: {json.dumps(piece.to_json(), ensure_ascii=False)}\n\n"


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
    with hub.open(record.id, key.id if key is not None else "") as slot:
        if slot is None:
            return too_many_streams(hub, key is not None)
        with hub.live.watch(record.id, slot.text) as pieces:
            return await _respond(request, store, record, position, slot, pieces)


async def _respond(request: web.Request, store: RunReader, record: RunRecord,
                   position: dict[str, int], slot: StreamSlot,
                   pieces: asyncio.Queue[TextDelta]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no"})
        try:
            await response.prepare(request)
            await _pump(request, response, slot, store, record, position, pieces)
            await response.write_eof()
        except (ConnectionResetError, ClientGone):
            # a client going away is how streams usually end
            log.debug("the client of the event stream of run %s went away", record.id)
        return response


async def _pump(request: web.Request, response: web.StreamResponse, slot: StreamSlot,
                store: RunReader, record: RunRecord, position: dict[str, int],
                pieces: asyncio.Queue[TextDelta]) -> None:
    loop = asyncio.get_running_loop()
    hub = slot.hub
    order = LiveOrder()  # pieces go after the events before them, never after their call
    last_write = next_key_check = loop.time()

    async def write_text() -> bool:
        """Write the pieces waiting; whether one waits for its call's start to be read."""
        nonlocal last_write
        frames = []
        held = False
        while not pieces.empty():
            piece = pieces.get_nowait()
            admitted = order.admit(piece)
            if admitted == "now":
                frames.append(_text_frame(piece))
            held = held or admitted == "held"
        if frames:
            await response.write("".join(frames).encode())
            last_write = loop.time()
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
                # one write for the batch: its frames, with the pieces of text each event
                # releases right after it
                chunks: list[bytes] = []
                for event, frame in zip(batch.events, batch.frames(), strict=True):
                    chunks.append(frame)
                    chunks.extend(_text_frame(piece).encode() for piece in order.saw(event))
                position.update(batch.position())
                await response.write(b"".join(chunks))
                last_write = loop.time()
            if current.status in ev.TERMINAL_STATUSES:
                end = json.dumps({"status": current.status,
                                  "stop_reason": current.stop_reason})
                await response.write(f"event: end\ndata: {end}\n\n".encode())
                return
        now = loop.time()
        if now - last_write >= SSE_HEARTBEAT_S:
            await response.write(b": heartbeat\n\n")
            last_write = now
        if key_check is not None and now >= next_key_check:
            if await _key_revoked(key_check, record):
                await response.write(b'event: error\ndata: {"error": {"code": '
                                     b'"api_key_revoked", "message": "the API key of this '
                                     b'stream was revoked; reconnect with an active key"}}\n\n')
                return
            next_key_check = now + SSE_KEY_CHECK_S
        if full_read is not None:
            own_look_at = now + SSE_STREAM_LOOK_S * random.uniform(0.8, 1.2)
        wait_s = min(own_look_at - now, last_write + SSE_HEARTBEAT_S - now)
        if key_check is not None:
            wait_s = min(wait_s, next_key_check - now)
        full_read = await slot.wait(max(wait_s, 0.0), request, write_text)
        if full_read is None and loop.time() >= own_look_at:
            full_read = False  # the hub did not look (its task is gone): look alone


async def _key_revoked(key_check: KeyCheck, record: RunRecord) -> bool:
    try:
        return not await key_check.still_active()
    except Exception as exc:  # the database is unreachable: the reads above wait it out
        log.debug("could not re-check the key of the event stream of run %s: %s", record.id,
                  exc)
        return False
