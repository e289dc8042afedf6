"""``toren chat AGENT [--session ID]``: a durable session in the terminal.

Locally the session is worked in this process, on the database ``toren dev`` uses; with
``TOREN_URL`` (and ``TOREN_API_KEY``) it talks to a deployment through ``toren.client``.
Either way the conversation lives in the event log: resuming replays the whole transcript,
and leaving prints the command that resumes it.
"""

from __future__ import annotations

import abc
import asyncio
import os
import sys
import threading
from collections.abc import AsyncIterator
from typing import Annotated, Any

import typer
from rich.markup import escape

from toren.cli.common import DirsOption, load_runtime
from toren.cli.output import JSON_OPTION_HELP, console, err_console, print_json
from toren.cli.render import event_line
from toren.core import events as ev
from toren.core.events import Event
from toren.errors import ConfigError
from toren.host.runtime import Runtime

HELP = ("Type a message and press Enter. /exit leaves (the session stays open: resume it "
        "later), /close ends the session, /help shows this.")
#: Events after which the agent's turn is over and the prompt is the user's again.
_TURN_OVER = {ev.TURN_ENDED, ev.RUN_FINISHED, ev.RUN_CANCELLED, ev.RUN_DEAD_LETTERED}


def chat(
    agent: Annotated[str, typer.Argument(help="The agent to talk to (its agent.yaml name).")],
    session: Annotated[str | None, typer.Option(
        "--session", "-s", help="Resume this session: its transcript is replayed first.")] = None,
    dirs: DirsOption = None,
    url: Annotated[str | None, typer.Option(
        envvar="TOREN_URL",
        help="A deployment's API to talk to (with TOREN_API_KEY) instead of working the "
             "session in this process.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP + " One JSON "
                                          "document per line: the transcript, then events.")
                       ] = False,
) -> None:
    """Talk to AGENT in a durable session (resume one with --session)."""
    backend: Backend = (RemoteBackend(url, os.environ.get("TOREN_API_KEY")) if url
                        else LocalBackend(load_runtime(dirs)))
    try:
        asyncio.run(_chat(backend, agent, session, as_json=as_json))
    except KeyboardInterrupt:
        raise typer.Exit(code=130) from None


class Backend(abc.ABC):
    """Where the session lives: this process's runtime, or a deployment over HTTP."""

    session_id: str = ""

    @abc.abstractmethod
    async def open(self, agent: str, session_id: str | None) -> dict[str, Any]:
        """Start or find the session; return it (status and transcript)."""

    @abc.abstractmethod
    async def send(self, text: str) -> None:
        """Give the session the user's message (the agent's turn starts)."""

    @abc.abstractmethod
    async def close_session(self) -> None:
        """End the session: the agent is not called again."""

    @abc.abstractmethod
    def events(self) -> AsyncIterator[Event]:
        """The session's events after the last one seen, live, each once."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Let go of the runtime or the HTTP client."""


class LocalBackend(Backend):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.position: dict[str, int] = {}

    async def open(self, agent: str, session_id: str | None) -> dict[str, Any]:
        await self.runtime.start(workers=True)
        self.session_id = session_id or await self.runtime.start_session(agent)
        found = await self.runtime.get_session(self.session_id)
        for event in await self.runtime.events(self.session_id):
            self.position[event.stream] = max(self.position.get(event.stream, 0), event.seq)
        return found

    async def send(self, text: str) -> None:
        await self.runtime.send_message(self.session_id, text)

    async def close_session(self) -> None:
        await self.runtime.close_session(self.session_id, "closed from toren chat")

    async def events(self) -> AsyncIterator[Event]:
        async for event in self.runtime.follow(self.session_id, after=self.position):
            self.position[event.stream] = max(self.position.get(event.stream, 0), event.seq)
            yield event

    async def aclose(self) -> None:
        await self.runtime.stop()


class RemoteBackend(Backend):
    def __init__(self, url: str, api_key: str | None) -> None:
        from toren.client import TorenClient  # aiohttp: only for a remote chat

        self.client = TorenClient(url, api_key)
        self.cursor: str | None = None

    async def open(self, agent: str, session_id: str | None) -> dict[str, Any]:
        self.session_id = session_id or (await self.client.create_session(agent))["id"]
        found = dict(await self.client.get_session(self.session_id))
        self.cursor = (await self.client.events(self.session_id))["cursor"]
        return found

    async def send(self, text: str) -> None:
        await self.client.send_message(self.session_id, text)

    async def close_session(self) -> None:
        await self.client.close_session(self.session_id)

    async def events(self) -> AsyncIterator[Event]:
        async for item in self.client.stream_events(self.session_id, after=self.cursor):
            self.cursor = item["cursor"]
            yield Event(item["run_id"], item["stream"], item["seq"], item["type"], item["data"])

    async def aclose(self) -> None:
        await self.client.aclose()


async def _chat(backend: Backend, agent: str, session_id: str | None, *,
                as_json: bool) -> None:
    lines = _stdin_lines()
    try:
        found = await backend.open(agent, session_id)
        if found["agent"] != agent:
            raise ConfigError(f"session {backend.session_id} is a session with "
                              f"{found['agent']!r}, not {agent!r}; run `toren chat "
                              f"{found['agent']} --session {backend.session_id}`")
        _show_transcript(found, as_json)
        status = found["status"]
        if status in ("queued", "running"):
            status = await _follow_turn(backend, as_json)
        while status not in ev.TERMINAL_STATUSES:
            if not as_json:
                console.print("[bold cyan]you>[/] ", end="")
            line = await lines.get()
            if line is not None and not as_json and not sys.stdin.isatty():
                console.print(line, markup=False)  # piped input: show what was sent
            if line is None or line.strip() in ("/exit", "/quit"):
                if line is None and not as_json:
                    console.print()
                break
            text = line.strip()
            if not text:
                continue
            if text == "/help":
                console.print(HELP)
                continue
            if text == "/close":
                await backend.close_session()
            else:
                await backend.send(text)
            status = await _follow_turn(backend, as_json)
        _goodbye(backend.session_id, agent, status, as_json)
    except asyncio.CancelledError:  # Ctrl-C
        if backend.session_id:
            _goodbye(backend.session_id, agent, "interrupted", as_json)
        raise
    finally:
        await backend.aclose()


async def _follow_turn(backend: Backend, as_json: bool) -> str:
    """Show the agent's turn as it happens; return the session's status when it is over."""
    async for event in backend.events():
        if as_json:
            print_json(event.to_json())
        else:
            _show_event(event)
        if event.type in _TURN_OVER:
            if event.type == ev.TURN_ENDED:
                return "awaiting_input"
            return str(event.data.get("status", "cancelled"))
    return "completed"


def _show_event(event: Event) -> None:
    data = event.data
    if event.type == ev.MODEL_CALL_COMPLETED and data.get("purpose") is None:
        if data["tool_calls"]:
            if data["text"]:
                console.print(f"  [dim]{escape(data['text'])}[/]")
            return
        console.print(f"[bold green]{escape('agent>')}[/] ", end="")
        console.print(data["text"], markup=False)
        return
    if event.type == ev.TURN_ENDED and data["stop_reason"] == "max_steps":
        console.print(f"[yellow]The turn used its {data['steps']} steps (limits.maxSteps); "
                      "say \"go on\" to continue.[/]")
        return
    line = event_line(event)
    if line and event.type != ev.MODEL_CALL_COMPLETED and event.type != ev.TASK_STARTED:
        console.print(line)


def _show_transcript(found: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json({"session": found["id"], "agent": found["agent"], "status": found["status"],
                    "transcript": found["transcript"]})
        return
    entries = found["transcript"]
    if entries:
        err_console.print(f"[dim]Resuming session {found['id']} with {found['agent']}: "
                          f"{found['turns']} turn(s) so far[/]")
    else:
        err_console.print(f"[dim]Session {found['id']} with {found['agent']}. {HELP}[/]")
    for entry in entries:
        if entry["role"] == "user":
            console.print("[bold cyan]you>[/] ", end="")
            console.print(entry["text"], markup=False)
        elif entry["role"] == "assistant" and not entry["tool_calls"]:
            console.print("[bold green]agent>[/] ", end="")
            console.print(entry["text"], markup=False)
        elif entry["role"] == "tool":
            colour = "red" if entry["is_error"] else "green"
            output = " ".join(entry["output"].split())
            short = output if len(output) <= 100 else output[:99] + "…"
            console.print(f"    [{colour}]↳ {escape(entry['name'])}[/] {escape(short)}")


def _goodbye(session_id: str, agent: str, status: str, as_json: bool) -> None:
    resume = f"toren chat {agent} --session {session_id}"
    if as_json:
        print_json({"session": session_id, "status": status,
                    "resume": resume if status not in ev.TERMINAL_STATUSES else None})
        return
    if status in ev.TERMINAL_STATUSES:
        err_console.print(f"Session {session_id} has ended ({status}).")
    else:
        err_console.print(f"The session stays open. Resume it with: [bold]{resume}[/]")


def _stdin_lines() -> asyncio.Queue[str | None]:
    """Lines from stdin, read on a daemon thread (``None`` at end of input), so that leaving
    never waits for a blocked read."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, line.rstrip("\n"))
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=read, name="toren-chat-stdin", daemon=True).start()
    return queue

