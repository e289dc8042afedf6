"""Test helpers for Toren and for plugin authors; importable without pytest (benchmarks use it).

- ``ScriptedModel`` / ``ScriptedProvider``: the offline model, with a per-call ``delay``, a call
  counter (``calls``, and ``call_log`` for a counter outside the process) and an optional script.
- ``write_agent_dir``: writes an agent directory from a few keyword arguments.
- ``tool_call``: a context in which ``toren.current_tool_call()`` works, to call a tool's
  function directly in a test.
- ``OutputProcess``: a subprocess (a ``toren worker``, a fake provider server) whose stdout
  lines can be awaited with a timeout; for crash tests that SIGKILL real processes.

The pytest fixtures built on them (``scripted_model``, ``make_agent_dir``) live in
``toren.pytest_plugin``, a ``pytest11`` plugin: available in any pytest run where toren is
installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import signal
import stat
import struct
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toren.default_plugins.scripted import ScriptedModel, ScriptedProvider, respond_with_tools
from toren.execution.context import ToolCallContext, _current
from toren.seams.plugins import PluginHost

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "OutputProcess",
    "PluginHost",
    "ScriptedModel",
    "ScriptedProvider",
    "ServerThread",
    "pdf_bytes",
    "png_bytes",
    "respond_with_tools",
    "serve_on_free_port",
    "tool_call",
    "wait_for",
    "write_agent_dir",
    "writers_for_fifos",
]


@contextmanager
def tool_call(**fields: Any) -> Iterator[ToolCallContext]:
    """Run a tool's function as Toren would: ``toren.current_tool_call()`` returns a context
    made of ``fields`` (``max_output_bytes=``, ``env_names=``...) over test defaults."""
    context = ToolCallContext(**{"agent": "test-agent", "run_id": "test-run", "task_id": "main",
                                 "step": 1, "call_id": "call_1", "idempotency_key": "test-key",
                                 **fields})
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def png_bytes(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (200, 40, 40)
              ) -> bytes:
    """A real PNG of one colour (``width`` x ``height``): what a test attaches or a test tool
    returns to show a model an image."""
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    row = b"\x00" + bytes(rgb) * width
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b""))


def pdf_bytes(*pages: str) -> bytes:
    """A real PDF with one page per text in ``pages`` (Helvetica, one line each)."""
    texts = pages or ("Hello from Toren.",)
    count = len(texts)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [" + b" ".join(
                   f"{3 + 2 * i} 0 R".encode() for i in range(count)) + b"] /Count "
               + str(count).encode() + b" >>"]
    font = 3 + 2 * count
    for index, text in enumerate(texts):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 18 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1")
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents "
                       f"{4 + 2 * index} 0 R /Resources << /Font << /F1 {font} 0 R >> >> >>"
                       .encode())
        objects.append(b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream
                       + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
            .encode())
    return bytes(out)


def write_agent_dir(
    parent: Path,
    name: str = "test-agent",
    *,
    agent_yaml: str | None = None,
    prompt: str | None = "You are a test agent.\n",
    tools_py: str | None = None,
    subagents: dict[str, str] | None = None,
    **yaml_fields: Any,
) -> Path:
    """Create ``parent/name`` holding an agent definition; return its path.

    ``agent_yaml`` is written verbatim when given; otherwise a minimal one is made from
    ``yaml_fields`` (``model`` defaults to ``toren/scripted``). ``prompt=None`` omits prompt.md.
    """
    import yaml

    directory = parent / name
    directory.mkdir(parents=True, exist_ok=True)
    if agent_yaml is None:
        fields = {"model": "toren/scripted", **yaml_fields}
        agent_yaml = yaml.safe_dump(fields, sort_keys=False)
    (directory / "agent.yaml").write_text(textwrap.dedent(agent_yaml))
    if prompt is not None:
        (directory / "prompt.md").write_text(prompt)
    if tools_py is not None:
        (directory / "tools.py").write_text(textwrap.dedent(tools_py))
    for sub_name, text in (subagents or {}).items():
        (directory / "subagents").mkdir(exist_ok=True)
        (directory / "subagents" / f"{sub_name}.md").write_text(textwrap.dedent(text))
    return directory


class OutputProcess:
    """A subprocess whose stdout lines a background thread reads, so a test can wait for a
    line with a timeout: ``toren dev --json``'s ready line, a fake server printing its port.

    Its stderr goes to ``stderr_path`` (``.stderr`` reads it back for failure messages).
    """

    def __init__(self, args: Sequence[str], *, env: Mapping[str, str], stderr_path: Path,
                 cwd: Path | None = None) -> None:
        self.stderr_path = stderr_path
        with stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(list(args), env=dict(env), cwd=cwd,
                                         stdout=subprocess.PIPE, stderr=stderr, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def next_json(self, timeout: float = 60.0) -> Any:
        """The next stdout line, parsed as JSON; fails the test if none comes in time."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output from {self.proc.args!r} within {timeout}s; "
                                 f"stderr:\n{self.stderr}") from None
        if line is None:
            self.proc.wait(timeout=10)
            raise AssertionError(f"{self.proc.args!r} exited with {self.proc.returncode} "
                                 f"before printing; stderr:\n{self.stderr}")
        return json.loads(line)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` (if still running) and wait for the exit code; SIGKILL after
        ``timeout``. The stdout pipe is closed afterwards."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=10)
        self.close()
        return code

    def close(self) -> None:
        """Release the stdout pipe once the process has exited."""
        self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.2) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds passed; whether it became
    true (checked once more at the deadline). For tests that watch other processes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


async def serve_on_free_port(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve the aiohttp ``app`` on 127.0.0.1 at a free port, for a test: its runner (``await
    runner.cleanup()`` stops it) and its base URL (``http://127.0.0.1:PORT``)."""
    from aiohttp import web

    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


class ServerThread:
    """An aiohttp app served on 127.0.0.1 from a thread with its own event loop: the fake of a
    platform (a chat API, a model API) that a test's real Toren processes call.

    ``make_app`` is called in that thread, so it may create what belongs to its loop
    (``asyncio.Condition``, queues). ``start()`` returns once the server listens (on ``port``,
    or a free port); ``url`` is ``http://127.0.0.1:PORT``; ``loop`` runs its handlers (for
    ``call_soon_threadsafe``); ``stop()`` closes it. The fakes of toren-telegram,
    toren-whatsapp, toren-slack and the plugin template are built on it.
    """

    def __init__(self, make_app: Callable[[], web.Application], *, port: int = 0,
                 name: str = "fake-server") -> None:
        self._make_app = make_app
        self.port = port
        self._name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        from aiohttp import web

        ready = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                runner = web.AppRunner(self._make_app())
                loop.run_until_complete(runner.setup())
                site = web.TCPSite(runner, "127.0.0.1", self.port)
                loop.run_until_complete(site.start())
            except BaseException as exc:  # reported by start() in the test's thread
                failed.append(exc)
                ready.set()
                loop.close()
                return
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, daemon=True, name=self._name)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{self._name} did not start listening within 10 s")
        if failed:
            raise failed[0]
        return self

    def stop(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None:
            self._thread.join(10)


@contextmanager
def writers_for_fifos(find: Callable[[], Iterable[Path]], after_s: float) -> Iterator[None]:
    """For tests of code that must never block on a FIFO: after ``after_s``, keep opening the
    write end of every FIFO ``find()`` names while a reader waits on it, so that code blocked
    on one (the bug the test is about) is let go and its test fails instead of hanging.

    ``find`` is called again at each look (a run's directories may appear later); paths that
    are gone or not FIFOs are passed over.
    """
    done = threading.Event()

    def release() -> None:
        if done.wait(after_s):
            return
        while not done.is_set():
            for path in find():
                with contextlib.suppress(OSError):  # ENXIO: no reader; ENOENT: gone
                    if stat.S_ISFIFO(path.lstat().st_mode):
                        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            time.sleep(0.1)

    thread = threading.Thread(target=release, daemon=True, name="toren-fifo-writers")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(5)
