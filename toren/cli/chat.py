"""``toren chat AGENT [--session ID]``: a durable session in the terminal.

Locally the session is worked in this process, on the database ``toren dev`` uses; with
``TOREN_URL`` (and ``TOREN_API_KEY``) it talks to a deployment through ``toren.client``: the
two operator backends of ``toren.cli.operator``, as for ``toren jobs``.
Either way the conversation lives in the event log: resuming replays the whole transcript,
and leaving prints the command that resumes it. ``/attach PATH`` queues files for the next
message: sending it uploads them and attaches them (``files``).
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toren.cli.common import DirsOption, run_interruptible, served_dirs
from toren.cli.files import attachment_lines, attachment_source
from toren.cli.operator import LocalOperator, Operator, make_operator
from toren.cli.output import (
    JSON_OPTION_HELP,
    console,
    err_console,
    plain,
    print_json,
    safe,
    toren_command,
)
from toren.cli.render import LiveTextPrinter, event_line
from toren.core import events as ev
from toren.core.approvals import waiting_text
from toren.core.events import Event
from toren.core.questions import question_text
from toren.errors import ConfigError, PolicyRejected, TorenError
from toren.seams.shapes import TextDelta

if TYPE_CHECKING:
    from toren.host.runtime import Runtime

HELP = ("Type a message and press Enter. /attach PATH adds a file to your next message "
        "(/attach alone lists them, /detach drops them; Enter alone sends the files by "
        "themselves). /exit leaves (the session stays open: resume it later), /close ends the "
        "session, /help shows this.")
#: Events after which the agent's turn is over and the prompt is the user's again.
_TURN_OVER = {ev.TURN_ENDED, ev.RUN_FINISHED, ev.RUN_CANCELLED, ev.RUN_DEAD_LETTERED}


def chat(
    agent: Annotated[str, typer.Argument(
        metavar="AGENT", help="The agent to talk to (the `name:` in its agent.yaml).")],
    session: Annotated[str | None, typer.Option(
        "--session", "-s", metavar="ID",
        help="Resume this session: its transcript is replayed first.")] = None,
    dirs: DirsOption = None,
    subject: Annotated[str | None, typer.Option(
        metavar="SUBJECT", envvar="TOREN_SUBJECT",
        help="Who you are to the agent's memory (memory:): a new session's user memories "
             "are this subject's. See docs/guides/memory.md.")] = None,
    url: Annotated[str | None, typer.Option(
        envvar="TOREN_URL", metavar="URL",
        help="A deployment's API to talk to (with TOREN_API_KEY) instead of working the "
             "session in this process.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP + " One JSON "
                                          "document per line: the transcript, then events.")
                       ] = False,
) -> None:
    """Talk to AGENT in a durable session (resume one with --session)."""
    backend = make_operator(url, dirs=dirs, agent=agent, workers=True)
    if isinstance(backend, LocalOperator):
        resume = _local_resume(backend.runtime, agent, dirs)
    else:
        resume = [toren_command(), "chat", shlex.quote(agent), "--url", shlex.quote(url or "")]
    run_interruptible(_chat(backend, agent, session, " ".join(resume), as_json=as_json,
                            subject=subject))


def _local_resume(runtime: Runtime, agent: str, dirs: list[Path] | None) -> list[str]:
    """``toren chat AGENT`` with what makes it work from any directory: the agent directories
    as absolute paths and, for the embedded Postgres, its ``TOREN_HOME``. (``DATABASE_URL``
    may hold a password, so it is never printed; it is in the environment already.)"""
    words = [toren_command(), "chat", shlex.quote(agent)]
    for directory in served_dirs(dirs):
        words += ["--dir", shlex.quote(str(directory))]
    if runtime.settings.database_url is None:
        words.insert(0, "TOREN_HOME=" + shlex.quote(str(runtime.settings.home.absolute())))
    return words


async def _chat(backend: Operator, agent: str, session_id: str | None, resume: str, *,
                as_json: bool, subject: str | None = None) -> None:
    lines = _stdin_lines()
    # chatter about files goes to stdout with the conversation, to stderr beside --json's lines
    say = err_console.print if as_json else console.print
    queued: list[Path | str] = []  # /attach: the files of the next message
    try:
        await backend.start()
        found = await backend.open_session(agent, session_id, subject)
        if found["agent"] != agent:
            raise ConfigError(f"session {backend.session_id} is a session with "
                              f"{found['agent']!r}, not {agent!r}; run `toren chat "
                              f"{found['agent']} --session {backend.session_id}`")
        _show_transcript(found, as_json)
        status = found["status"]
        if not as_json:
            for approval in found.get("pending_approvals", []):
                _show_waiting(approval["tool"], approval["id"])
            for question in found.get("pending_questions", []):
                _show_question(question["question"], question["choices"])
        if status in ("queued", "running", "awaiting_approval", "waiting"):
            status = await _follow_turn(backend, as_json)
        while status not in ev.TERMINAL_STATUSES:
            if not as_json:
                console.print("[bold cyan]you>[/] ", end="")
            line = await lines.get()
            if line is not None and not as_json and not sys.stdin.isatty():
                console.print(plain(line), markup=False)  # piped input: show what was sent
            if line is None or line.strip() in ("/exit", "/quit"):
                if line is None and not as_json:
                    console.print()
                break
            text = line.strip()
            if text == "/attach" or text.startswith("/attach "):
                _queue(queued, text.removeprefix("/attach").strip(), say)
                continue
            if text == "/detach":
                queued.clear()
                say("No file is attached to your next message now.")
                continue
            if not text and not queued:
                continue
            if text == "/help":
                console.print(HELP)
                continue
            if text == "/close":
                await backend.close_session()
            elif not queued:
                try:
                    await backend.send_message(text)
                except PolicyRejected as exc:  # the agent's policies refused this message
                    say(f"[red]Not sent:[/] {safe(exc.message)}")
                    continue
            elif not await _send_with_files(backend, text, queued, say):
                continue  # nothing was sent: the files stay queued
            status = await _follow_turn(backend, as_json)
        _goodbye(backend.session_id, resume, status, as_json)
    except asyncio.CancelledError:  # Ctrl-C
        if backend.session_id:
            _goodbye(backend.session_id, resume, "interrupted", as_json)
        raise
    finally:
        await backend.aclose()


def _queue(queued: list[Path | str], words: str, say: Callable[[str], None]) -> None:
    """``/attach WORDS``: queue the files WORDS names (a path, which may hold spaces, or
    several, quoted as a shell would, or uploaded files' ids); ``/attach`` lists the queue."""
    if words:
        try:
            named = [words] if Path(words).expanduser().exists() else shlex.split(words)
        except ValueError:  # an unclosed quote: the words are one name
            named = [words]
        try:
            sources = [attachment_source(word) for word in named]
        except TorenError as exc:
            say(f"[red]Not attached:[/] {safe(exc.message)}")
            return
        queued += [source for source in sources if source not in queued]
    if not queued:
        say("No file is attached to your next message. /attach PATH adds one.")
        return
    say(f"Attached to your next message ({len(queued)}; /detach drops them, Enter alone "
        "sends them without text):")
    for source in queued:
        say(f"  📎 {safe(str(source)) if isinstance(source, Path) else 'file id ' + source}")


async def _send_with_files(backend: Operator, text: str, queued: list[Path | str],
                           say: Callable[[str], None]) -> bool:
    """Upload the queued files and send them with ``text`` (which may be empty); whether the
    message was sent (else the error was shown and the files stay queued)."""
    try:
        files = await backend.attach(queued, say)
        ids = [str(stored["id"]) for stored in files]
        queued[:] = ids  # uploaded once: if the message is refused, sending again names them
        await backend.send_message(text, ids)
    except TorenError as exc:
        say(f"[red]Not sent:[/] {safe(exc.message)}")
        return False
    queued.clear()
    return True


async def _follow_turn(backend: Operator, as_json: bool) -> str:
    """Show the agent's turn as it happens; return the session's status when it is over."""
    printer = LiveTextPrinter(prefix="[bold green]agent>[/] ", style="")
    async for event in backend.session_events():
        if isinstance(event, TextDelta):
            if not as_json:
                printer.piece(event)  # the model's text as it is generated
            continue
        if as_json:
            print_json(event.to_json())
        elif not printer.completed(event):
            _show_event(event)
        if event.type == ev.QUESTION_ASKED:
            return "awaiting_input"  # the user's next line answers it
        if event.type in _TURN_OVER:
            if event.type == ev.TURN_ENDED:
                return "awaiting_input"
            return str(event.data.get("status", "cancelled"))
    return "completed"


def _show_event(event: Event) -> None:
    data = event.data
    if event.type == ev.BACKGROUND_RUN_FINISHED:
        _show_background(ev.background_notice(data["agent"], data["run_id"], data["status"],
                                              data.get("output"), data.get("error")))
        return
    if event.type == ev.TURN_ENDED and data["stop_reason"] == "max_steps":
        console.print(f"[yellow]The turn used its {data['steps']} steps (limits.maxSteps); "
                      "say \"go on\" to continue.[/]")
        return
    if event.type == ev.APPROVAL_REQUESTED:
        _show_waiting(data["name"], data["approval_id"])
        return
    if event.type == ev.QUESTION_ASKED:
        _show_question(data["question"], data.get("choices") or [])
        return
    line = event_line(event)
    if line and event.type != ev.MODEL_CALL_COMPLETED and event.type != ev.TASK_STARTED:
        console.print(line)
    if event.type in (ev.USER_MESSAGE, ev.TOOL_CALL_COMPLETED):
        _show_attachments(data.get("attachments"),
                          "      " if event.type == ev.TOOL_CALL_COMPLETED else "    ")


def _show_attachments(attachments: list[dict[str, Any]] | None, indent: str) -> None:
    """The files a message or a tool result showed the model, a line each."""
    for shown in attachment_lines(attachments):
        console.print(indent + shown)


def _show_waiting(tool: str, approval_id: str) -> None:
    """Say that the turn waits for a person, and how to decide (from another terminal)."""
    toren = safe(toren_command())  # runnable as printed, toren on PATH or not
    console.print(f"[yellow]The agent is {safe(waiting_text(tool, approval_id))}. Approve it "
                  f"with `{toren} approvals approve {safe(approval_id)}` or deny it with "
                  f"`{toren} approvals deny {safe(approval_id)} --reason ...` (or `edit` it "
                  "with --args JSON, `answer` it with --answer TEXT, approve it --always); "
                  "the turn "
                  "continues here once it is decided (Ctrl-C leaves; the session stays "
                  "open).[/]")


def _show_question(question: str, choices: list[str]) -> None:
    """The agent's question (``ask_user``): the user's next line answers it."""
    console.print("[bold yellow]agent asks>[/] ", end="")
    console.print(plain(question_text(question, choices)), markup=False)


def _show_background(text: str) -> None:
    """A background run's notice (docs/guides/background-runs.md)."""
    console.print("[bold magenta]background>[/] ", end="")
    console.print(plain(text), markup=False)


def _show_transcript(found: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json({"session": found["id"], "agent": found["agent"], "status": found["status"],
                    "transcript": found["transcript"]})
        return
    entries = found["transcript"]
    if entries:
        err_console.print(f"[dim]Resuming session {safe(found['id'])} with "
                          f"{safe(found['agent'])}: "
                          f"{found['turns']} turn(s) so far[/]")
    else:
        err_console.print(f"[dim]Session {safe(found['id'])} with {safe(found['agent'])}. "
                          f"{HELP}[/]")
    for entry in entries:
        if entry["role"] == "user":
            console.print("[bold cyan]you>[/] ", end="")
            console.print(plain(entry["text"]), markup=False)
            _show_attachments(entry.get("attachments"), "    ")
        elif entry["role"] == "assistant" and not entry["tool_calls"]:
            console.print("[bold green]agent>[/] ", end="")
            console.print(plain(entry["text"]), markup=False)
        elif entry["role"] == "background":
            _show_background(entry["text"])
        elif entry["role"] == "tool":
            colour = "red" if entry["is_error"] else "green"
            output = " ".join(entry["output"].split())
            short = output if len(output) <= 100 else output[:99] + "…"
            console.print(f"    [{colour}]↳ {safe(entry['name'])}[/] {safe(short)}")
            _show_attachments(entry.get("attachments"), "      ")


def _goodbye(session_id: str, resume: str, status: str, as_json: bool) -> None:
    """Say how the session ended, or print the command that resumes it, wherever it is
    pasted."""
    command = f"{resume} --session {shlex.quote(session_id)}"
    if as_json:
        print_json({"session": session_id, "status": status,
                    "resume": command if status not in ev.TERMINAL_STATUSES else None})
        return
    if status in ev.TERMINAL_STATUSES:
        err_console.print(f"Session {safe(session_id)} has ended ({status}).")
    else:
        err_console.print(f"The session stays open. Resume it with: [bold]{safe(command)}[/]")


def _stdin_lines() -> asyncio.Queue[str | None]:
    """Lines from stdin, read on a daemon thread (``None`` at end of input), so that leaving
    never waits for a blocked read."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        try:
            for line in sys.stdin:
                loop.call_soon_threadsafe(queue.put_nowait, line.rstrip("\n"))
            loop.call_soon_threadsafe(queue.put_nowait, None)
        except RuntimeError:  # the loop is closed: the chat ended (or failed) first
            return

    threading.Thread(target=read, name="toren-chat-stdin", daemon=True).start()
    return queue

