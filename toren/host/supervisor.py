"""The worker-process supervisor: ``toren worker --processes N`` (and ``toren serve --workers
--processes N``) runs N ``toren worker`` processes on one machine, so one machine's workers use
all its cores (one CPython process works on one).

The supervisor holds no database connection and works no runs. It starts each child as this
command's ``toren worker`` (same directories, lane and environment, plus ``TOREN_SUPERVISOR``:
its id, which each child records with its sign-in, so ``GET /fleet`` and ``toren top`` show the
N workers as one supervisor's), restarts a child that dies (exit or signal) after a backoff
that doubles with each death in a row (``restart_delay``) and is forgotten once a child stayed
up ``STABLE_AFTER_S``, and logs every death with its exit code or signal. On SIGTERM or SIGINT
it forwards SIGTERM to every child: each drains as a lone worker does (work in hand gets
``TOREN_SHUTDOWN_GRACE`` to finish, the rest is handed back), and a child still running
``STOP_MARGIN_S`` after that grace is killed (its leases expire and another worker takes its
work over, as after any crash).

The decisions (backoff, when a failure streak ends, what an exit says) are pure functions;
``Supervisor`` is the part with effects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: The first restart's delay; each further death in a row doubles it, up to the cap.
RESTART_BASE_S = 0.5
RESTART_CAP_S = 30.0
#: A child that stayed up this long had recovered: its next death starts a new streak.
STABLE_AFTER_S = 60.0
#: Deaths in a row after which a child is said to be crash-looping (logged as an error).
CRASH_LOOP_AFTER = 3
#: What a stopping child may take beyond the grace: handing back what it holds, signing out
#: (``toren.host.worker.SIGN_OUT_TIMEOUT_S``) and closing its pool.
STOP_MARGIN_S = 8.0

#: Seconds a dead child's last output lines are still read.
OUTPUT_DRAIN_S = 1.0

#: Receives each event of the supervisor (a JSON-able dict with an ``event`` key).
Announce = Callable[[dict[str, Any]], None]


# -- decisions (pure) ---------------------------------------------------------------------------


def restart_delay(failures: int, base_s: float = RESTART_BASE_S,
                  cap_s: float = RESTART_CAP_S) -> float:
    """Seconds to wait before restarting a child that died ``failures`` times in a row
    (1 for the first death): ``base_s``, doubling with each death, at most ``cap_s``."""
    if failures <= 0:
        return 0.0
    return min(cap_s, base_s * 2.0 ** min(failures - 1, 62))


def failures_after_exit(failures: int, uptime_s: float,
                        stable_after_s: float = STABLE_AFTER_S) -> int:
    """The deaths in a row once a child that was up ``uptime_s`` died, after ``failures``
    before it: a child that stayed up ``stable_after_s`` had recovered, so the streak restarts
    at 1; otherwise it grows by one."""
    return 1 if uptime_s >= stable_after_s else failures + 1


def exit_description(returncode: int) -> tuple[int | None, str | None, str]:
    """``(exit code, signal name, words)`` for a child's ``returncode`` (negative: the signal
    that killed it, as ``subprocess`` reports it)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return None, name, f"killed by {name}"
    return returncode, None, f"exit code {returncode}"


def child_command(dirs: Sequence[str], *, lane: str | None) -> list[str]:
    """The argument list (after the interpreter) that starts one child: this ``toren``'s
    ``worker`` command on the same directories and lane, one process, JSON output (its ready
    line names its worker id)."""
    command = [sys.executable, "-m", "toren", "worker", "--processes", "1", "--json"]
    for directory in dirs:
        command += ["--dir", directory]
    if lane is not None:
        command += ["--lane", lane]
    return command


def child_env(env: Mapping[str, str], supervisor_id: str, slot: int) -> dict[str, str]:
    """The environment of the child in ``slot`` (1 to N): this process's, plus
    ``TOREN_SUPERVISOR`` (recorded with its sign-in), ``TOREN_SUPERVISOR_SLOT`` (for what one
    process per machine must do: ``toren-fargate``'s health port and task protection) and
    ``TOREN_PROCESSES=1``; a worker's own metrics listener (``TOREN_METRICS_PORT``) moves to
    the port ``slot - 1`` above it, so N listeners do not ask for one port."""
    found = dict(env) | {"TOREN_SUPERVISOR": supervisor_id,
                         "TOREN_SUPERVISOR_SLOT": str(slot), "TOREN_PROCESSES": "1"}
    port = env.get("TOREN_METRICS_PORT", "").strip()
    if port.isdigit() and int(port) > 0:
        found["TOREN_METRICS_PORT"] = str(int(port) + slot - 1)
    return found


def new_supervisor_id() -> str:
    """An id for this supervisor: host, pid and a random suffix, as a worker's id."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# -- the supervisor ------------------------------------------------------------------------------


@dataclass
class Child:
    """One worker slot (1 to N): its current process, and its streak of deaths."""

    slot: int
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    failures: int = 0
    restarts: int = 0
    worker_id: str | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def to_json(self) -> dict[str, Any]:
        return {"slot": self.slot, "pid": self.process.pid if self.process else None,
                "worker": self.worker_id, "restarts": self.restarts,
                "failures_in_a_row": self.failures}


class Supervisor:
    """Runs ``processes`` children of ``command`` and keeps them running until ``stop``.

    Args:
        command: the argument list that starts one child (``child_command``).
        processes: how many children run at once.
        env: the environment the children's is made from (``child_env``).
        grace_s: the children's ``TOREN_SHUTDOWN_GRACE``: ``stop`` waits that long plus
            ``STOP_MARGIN_S`` before killing a child still running.
        announce: called with each event (``child_ready``, ``child_exited``); the command
            prints them.
        supervisor_id: this supervisor's id (default ``new_supervisor_id()``).
    """

    def __init__(self, command: Sequence[str], processes: int, *, env: Mapping[str, str],
                 grace_s: float, announce: Announce | None = None,
                 supervisor_id: str | None = None) -> None:
        self.id = supervisor_id or new_supervisor_id()
        self.command = list(command)
        self.env = env  # read at each start: a SIGHUP may have refreshed secrets in it
        self.grace_s = grace_s
        self.announce = announce or (lambda event: None)
        self.children = [Child(slot) for slot in range(1, processes + 1)]
        self._stopping = asyncio.Event()
        self._keepers: list[asyncio.Task[bool]] = []

    def describe(self) -> dict[str, Any]:
        """The supervisor and its children now (the ``ready`` event's fields)."""
        return {"supervisor": self.id, "supervisor_pid": os.getpid(),
                "processes": len(self.children),
                "children": [child.to_json() for child in self.children]}

    async def start(self) -> None:
        """Start every child (and keep it running); return at once."""
        self._keepers = [asyncio.create_task(self._keep(child), name=f"toren-child-{child.slot}")
                         for child in self.children]

    async def wait_ready(self) -> None:
        """Until every child printed its ready line once (a child that keeps dying before
        that keeps this waiting: its deaths are logged)."""
        await asyncio.gather(*(child.ready.wait() for child in self.children))

    def begin_stop(self) -> None:
        """Stop restarting children and send each running one SIGTERM (it drains)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        for child in self.children:
            if child.process is not None and child.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.process.send_signal(signal.SIGTERM)

    def forward(self, sig: signal.Signals) -> None:
        """Send ``sig`` to every running child (SIGHUP: each reads its secrets again)."""
        for child in self.children:
            if child.process is not None and child.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.process.send_signal(sig)

    async def stop(self) -> bool:
        """Drain every child (``begin_stop``), kill those still running after the grace plus
        ``STOP_MARGIN_S``; whether every child exited on its own with status 0."""
        self.begin_stop()
        keepers = list(self._keepers)
        if not keepers:
            return True
        _done, pending = await asyncio.wait(keepers, timeout=self.grace_s + STOP_MARGIN_S)
        clean = not pending
        for child in self.children:
            process = child.process
            if process is not None and process.returncode is None:
                log.error("worker process %d (pid %d) did not stop within %gs "
                          "(TOREN_SHUTDOWN_GRACE + %gs): killing it; its work is taken over "
                          "when its leases expire", child.slot, process.pid,
                          self.grace_s, STOP_MARGIN_S)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        results = await asyncio.gather(*keepers, return_exceptions=True)
        self._keepers = []
        return clean and all(result is True for result in results)

    # -- one slot ------------------------------------------------------------------------------

    async def _keep(self, child: Child) -> bool:
        """Run ``child``'s slot until stopping: start it, wait for it, restart it after the
        backoff when it dies. Returns whether its last process exited with status 0 when
        asked to stop."""
        while not self._stopping.is_set():
            try:
                process = await asyncio.create_subprocess_exec(
                    *self.command, env=child_env(self.env, self.id, child.slot),
                    stdout=asyncio.subprocess.PIPE,
                    stdin=asyncio.subprocess.DEVNULL)
            except OSError as exc:
                child.failures += 1
                log.error("could not start worker process %d: %s", child.slot, exc)
                await self._pause(restart_delay(child.failures))
                continue
            child.process, child.started_at = process, time.monotonic()
            if self._stopping.is_set():  # a stop raced the start: it gets its SIGTERM too
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
            reader = asyncio.create_task(self._read_output(child, process))
            returncode = await process.wait()
            # a grandchild (a tool's subprocess) may hold the pipe open: do not wait for it
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), OUTPUT_DRAIN_S)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            if self._stopping.is_set():
                code, signame, words = exit_description(returncode)
                if returncode != 0:
                    log.warning("worker process %d (pid %d) stopped: %s", child.slot,
                                process.pid, words)
                self.announce({"event": "child_stopped", "slot": child.slot,
                               "pid": process.pid, "exit_code": code, "signal": signame})
                return returncode == 0
            self._died(child, process.pid, returncode)
            await self._pause(restart_delay(child.failures))
        return True

    def _died(self, child: Child, pid: int, returncode: int) -> None:
        """Log and announce a death the supervisor did not ask for."""
        uptime = time.monotonic() - child.started_at
        child.failures = failures_after_exit(child.failures, uptime)
        child.restarts += 1
        child.worker_id = None
        code, signame, words = exit_description(returncode)
        delay = restart_delay(child.failures)
        looping = child.failures >= CRASH_LOOP_AFTER
        (log.error if looping else log.warning)(
            "worker process %d (pid %d) died after %.1fs (%s); restarting it in %.1fs%s",
            child.slot, pid, uptime, words, delay,
            f" (crash-looping: {child.failures} deaths in a row, each within "
            f"{STABLE_AFTER_S:g}s of its start)" if looping else "")
        self.announce({"event": "child_exited", "slot": child.slot, "pid": pid,
                       "exit_code": code, "signal": signame, "uptime_s": round(uptime, 3),
                       "failures_in_a_row": child.failures, "crash_looping": looping,
                       "restart_in_s": delay})

    async def _read_output(self, child: Child, process: asyncio.subprocess.Process) -> None:
        """Read the child's stdout until it closes: its ready line names its worker; its
        error line is left out (it printed the error on its stderr, which it shares with this
        process); any other line goes to this process's stderr, marked with its slot."""
        assert process.stdout is not None
        while line := await process.stdout.readline():
            text = line.decode("utf-8", "replace").rstrip("\n")
            try:
                event = json.loads(text)
            except ValueError:
                event = None
            if isinstance(event, dict) and event.get("event") == "ready":
                child.worker_id = str(event.get("worker") or "") or None
                first = not child.ready.is_set()
                child.ready.set()
                self.announce({"event": "child_ready", "slot": child.slot, "pid": process.pid,
                               "worker": child.worker_id, "restarted": not first,
                               "info": event})
                continue
            if isinstance(event, dict) and "error" in event:
                continue  # the child said it on its stderr too, which is this process's
            sys.stderr.write(f"[worker process {child.slot}] {text}\n")
            sys.stderr.flush()

    async def _pause(self, delay_s: float) -> None:
        """Wait ``delay_s`` or until stopping, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), delay_s)
