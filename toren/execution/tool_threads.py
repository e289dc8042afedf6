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
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any


class ToolNotStarted(Exception):
    """The call waited for a thread and was no longer wanted when one came free."""


class ToolThreads:
    """Runs sync tool functions, at most ``size`` at once, in daemon threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._slots: asyncio.Semaphore | None = None
        #: Threads whose function has not returned (including ones nobody waits for now).
        self.running = 0

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
        threading.Thread(target=body, name=f"toren-tool-{name}", daemon=True).start()
        return await outcome
