"""The event-loop watchdog: notices a blocked loop and says which code blocked it.

An ``async def`` tool that calls blocking code (``time.sleep``, a synchronous HTTP client, a
long computation) stops the whole process: API requests, heartbeats (so leases are lost) and
every other run. The loop cannot see this itself, so a thread watches a beat the loop updates;
when the beat is older than ``TOREN_BLOCKED_LOOP_WARN`` seconds, it reads the loop thread's
stack and logs the async tool (and run) or the code at fault, once per blockage, and again
when the loop runs again. Blocking code belongs in a sync tool (``def``), which runs in a
thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import sysconfig
import threading
import time
from types import FrameType

from toren.execution.context import RUNNING_ASYNC_TOOLS

log = logging.getLogger(__name__)

_LIBRARY_PATHS = tuple({sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib")}
                       # the frozen standard library: importlib's frames while a module loads
                       # (a first start on a fresh install compiles every module it imports)
                       | {"<frozen "})


def describe_blocker(frame: FrameType | None) -> str:
    """What the loop thread is running: the async tool whose code is on its stack (with its
    run), else the innermost frame outside the standard library and installed packages."""
    return find_blocker(frame)[0]


def find_blocker(frame: FrameType | None) -> tuple[str, bool]:
    """``(description, toren's own)``: ``describe_blocker``'s description, and whether the
    code at fault is Toren's (the kernel or a ``toren_*`` plugin, e.g. ``build_server`` of
    toren-mcp while ``toren dev`` starts) rather than an agent's tools or other user code. A
    plugin installed in editable mode lives outside the installed packages, so its frames
    would otherwise be taken for the user's."""
    tools = {id(tool.code): tool for tool in list(RUNNING_ASYNC_TOOLS.values()) if tool.code}
    innermost: FrameType | None = None
    walk = frame
    while walk is not None:
        tool = tools.get(id(walk.f_code))
        if tool is not None:
            call = tool.context
            return (f"async tool {tool.name!r} (agent {call.agent}, run {call.run_id}, task "
                    f"{call.task_id}) at {walk.f_code.co_filename}:{walk.f_lineno}", False)
        if innermost is None and not walk.f_code.co_filename.startswith(_LIBRARY_PATHS):
            innermost = walk
        walk = walk.f_back
    if innermost is not None:
        return (f"{innermost.f_code.co_qualname} ({innermost.f_globals.get('__name__', '?')}) "
                f"at {innermost.f_code.co_filename}:{innermost.f_lineno}",
                is_toren_module(str(innermost.f_globals.get("__name__", ""))))
    return "code in a library (no frame of this program on the stack)", False


def is_toren_module(name: str) -> bool:
    """Whether module ``name`` is Toren's: the kernel (``toren``) or a plugin package
    (``toren_mcp``), not an agent's ``tools.py``/``workflow.py`` (``toren_crew_*``)."""
    package = name.partition(".")[0]
    return package == "toren" or (package.startswith("toren_")
                                  and not package.startswith("toren_crew_"))


class LoopWatchdog:
    """Started by the host with its event loop; ``stop`` ends both the beat and the thread."""

    def __init__(self, threshold_s: float) -> None:
        self.threshold_s = threshold_s
        self._beat = time.monotonic()
        self._stopped = threading.Event()
        self._beater: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._loop_thread = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Blockages seen so far (for tests and metrics).
        self.blockages = 0

    async def start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._loop = asyncio.get_running_loop()
        self._beat = time.monotonic()
        self._beater = asyncio.create_task(self._keep_beating(), name="toren-loop-beat")
        self._thread = threading.Thread(target=self._watch, name="toren-loop-watchdog",
                                        daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stopped.set()
        if self._beater is not None:
            self._beater.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beater
        # the thread wakes within a quarter of the threshold and sees the flag: no join, so a
        # stopping loop never waits on it

    async def _keep_beating(self) -> None:
        while True:
            self._beat = time.monotonic()
            await asyncio.sleep(self.threshold_s / 4)

    def _watch(self) -> None:
        blocked_since: float | None = None
        ours = False  # whether the blockage under way is Toren's own code
        while not self._stopped.wait(self.threshold_s / 4):
            beat = self._beat
            lag = time.monotonic() - beat
            if self._loop is not None and not self._loop.is_running():
                # a loop that is not running (between asyncio.Runner.run calls) is not blocked
                blocked_since = None
                self._beat = time.monotonic()
                continue
            if lag > self.threshold_s and blocked_since is None:
                blocked_since = beat
                self.blockages += 1
                culprit, own = find_blocker(sys._current_frames().get(self._loop_thread))
                ours = own
                if own:  # not the user's to fix: said for Toren's developers (INFO)
                    log.info("the event loop has been blocked for %.1f s by Toren's own code, "
                             "not an agent's tool: %s (a loaded machine slows start-up work "
                             "such as building the HTTP app)", lag, culprit)
                else:
                    log.warning("the event loop has been blocked for %.1f s by %s: API "
                                "requests, heartbeats (leases) and other runs wait meanwhile; "
                                "blocking code belongs in a sync tool (def, not async def), "
                                "which runs in a thread", lag, culprit)
            elif blocked_since is not None and beat > blocked_since:
                log.log(logging.INFO if ours else logging.WARNING,
                        "the event loop runs again after being blocked for %.1f s",
                        beat - blocked_since)
                blocked_since = None
