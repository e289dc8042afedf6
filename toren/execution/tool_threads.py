"""Where sync tools run: a bounded set of daemon threads, made once per worker process.

A sync tool (a plain ``def``) runs in a thread so that it cannot block the event loop. Python
cannot stop a running thread, so three rules keep a slow or stuck tool from holding anything
else hostage:

- at most ``size`` tool threads run at once (``TOREN_TOOL_THREADS``); further calls wait their
  turn, and a call whose run was cancelled (or whose task gave up on it) while it waited is
  never started;
- whoever awaits a call may stop waiting (cancellation, ``limits.toolTimeoutSeconds``): the
  thread runs on, holding its slot, until the function returns;
- the threads are daemons, so a stopping process does not wait for them: a SIGTERM finishes
  within ``TOREN_SHUTDOWN_GRACE`` whatever tools are doing.

A thread whose call returned waits (up to ``IDLE_THREAD_S``) for the next call rather than
exiting: starting a thread per call was a measurable share of a tool call's cost on the hot
path (bench/README.md, figure 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

#: Seconds an idle tool thread waits for another call before it exits.
IDLE_THREAD_S = 60.0


class ToolNotStarted(Exception):
    """The call waited for a thread and was no longer wanted when one came free."""


class ToolThreads:
    """Runs sync tool functions, at most ``size`` at once, in daemon threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._slots: asyncio.Semaphore | None = None
        #: Threads whose function has not returned (including ones nobody waits for now).
        self.running = 0
        #: Threads waiting for a call, each on its own hand-over queue.
        self._idle: list[queue.SimpleQueue[tuple[Callable[[], None], str]]] = []
        self._idle_lock = threading.Lock()

    async def run(self, function: Callable[[], Any], *, name: str,
                  wanted: Callable[[], bool] = lambda: True) -> Any:
        """``function()`` in a thread, once a slot is free and if ``wanted()`` still says so
        then (else ``ToolNotStarted``). Cancelling the caller stops the waiting, not the
        thread."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        slots = self._slots
        await slots.acquire()
        if not wanted():
            slots.release()
            raise ToolNotStarted(name)
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[Any] = loop.create_future()

        def settle(error: BaseException | None, value: Any) -> None:
            self.running -= 1
            slots.release()
            if outcome.done():  # the caller stopped waiting
                return
            if error is not None:
                outcome.set_exception(error)
            else:
                outcome.set_result(value)

        def body() -> None:
            error: BaseException | None = None
            value: Any = None
            try:
                value = function()
            except BaseException as exc:  # handed to the awaiting task, which decides
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
                loop.call_soon_threadsafe(settle, error, value)

        self.running += 1
        self._start(body, name)
        return await outcome

    def _start(self, body: Callable[[], None], name: str) -> None:
        """``body`` on an idle thread if one waits, else on a new daemon thread (at most
        ``size`` are busy: the slots bound them)."""
        with self._idle_lock:
            handover = self._idle.pop() if self._idle else None
        if handover is not None:
            handover.put((body, name))
            return
        threading.Thread(target=self._serve, args=(body,), name=f"toren-tool-{name}",
                         daemon=True).start()

    def _serve(self, body: Callable[[], None]) -> None:
        handover: queue.SimpleQueue[tuple[Callable[[], None], str]] = queue.SimpleQueue()
        job = body
        while True:
            job()
            with self._idle_lock:
                self._idle.append(handover)
            try:
                job, name = handover.get(timeout=IDLE_THREAD_S)
            except queue.Empty:
                with self._idle_lock:
                    if handover in self._idle:
                        self._idle.remove(handover)
                        return
                job, name = handover.get()  # handed a call just as the wait ran out
            threading.current_thread().name = f"toren-tool-{name}"
