"""The operator backend: what ``toren jobs``, ``toren approvals``, ``toren schedules`` and
``toren chat`` do, behind one interface with two implementations.

``LocalOperator`` works on the database this machine reaches (``DATABASE_URL`` or the embedded
Postgres) through ``toren.Runtime``; ``RemoteOperator`` works on a deployment's HTTP API through
``toren.client`` (``TOREN_URL``, with ``TOREN_API_KEY``). Each command has one code path: it
asks ``operate`` for the backend the environment names and renders what the backend returns,
so ``--json`` prints the same document either way (the server's JSON is the runtime's JSON).
``make_operator`` picks the implementation; ``operate`` runs one command's work on it.
"""

from __future__ import annotations

import abc
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast
from urllib.parse import urlsplit

import typer

from toren.cli.common import load_runtime, require_database, run_async, stop_runtime
from toren.cli.files import add_path, cli_uploader, describe_stored
from toren.cli.output import safe
from toren.core import events as ev
from toren.core.actors import cli_actor
from toren.core.audit import AuditQuery, parse_moment
from toren.core.costs import costs_window
from toren.core.events import Event
from toren.core.run_search import parse_run_search
from toren.core.runs import RunTotals
from toren.core.webhooks import WebhookSubscription
from toren.errors import ApprovalNotFound, ConfigError, RunNotFound, TorenError
from toren.files import FileNotFound, max_file_bytes
from toren.seams.shapes import TextDelta

if TYPE_CHECKING:
    from toren.client import Event as ClientEvent
    from toren.client import TorenClient
    from toren.host.runtime import Runtime
    from toren.host.services.audit import AuditNote

T = TypeVar("T")
JsonDict = dict[str, Any]

UrlOption = Annotated[str | None, typer.Option(
    "--url", envvar="TOREN_URL", metavar="URL",
    help="A deployment's API to work on (with TOREN_API_KEY) instead of this machine's "
         "database.")]

#: Runs read per page while looking for the runs whose id starts with a prefix (locally; the
#: HTTP API pages by at most 200).
_PAGE = 1000
_REMOTE_PAGE = 200
#: Candidates named in the error for an ambiguous prefix.
_SHOWN_CANDIDATES = 10
#: Approvals searched for an id prefix (the latest ones).
_APPROVAL_SEARCH = 200
_ID_PREFIX = re.compile(r"[0-9a-f][0-9a-f-]{0,35}")


class AmbiguousRunId(TorenError):
    """More than one run's id starts with that prefix."""

    code = "ambiguous_run_id"
    http_status = 400


class Operator(abc.ABC):
    """What an operator command can ask of a deployment. Every answer is the JSON the HTTP API
    gives (``RunRecord.to_json()``, ``runtime.receipt()``, ``ApprovalRecord.to_json()``,
    ``ScheduleRecord.to_json()``). Called by the ``toren jobs/approvals/schedules`` commands
    through ``operate``."""

    #: Where the commands act, for messages: "this database" or the deployment's URL.
    where: str = ""
    @property
    def database(self) -> str:
        """Which database the commands read, in words (the store's description, or the
        deployment's URL): named when a listing is empty, so an empty answer from the wrong
        database is told from an empty database."""
        return self.where

    #: The session ``open_session`` started or found (``toren chat``).
    session_id: str = ""

    @abc.abstractmethod
    async def start(self) -> None:
        """Get ready (locally: start the runtime, with workers for ``toren chat``)."""

    @abc.abstractmethod
    async def list_runs(self, *, agent: str | None, status: str | None, limit: int,
                        schedule: str | None,
                        find: Mapping[str, str] | None = None) -> list[JsonDict]:
        """Runs, newest first, each with its ``totals``; ``find``: ``GET /runs``' search
        parameters (``q``, ``version``, ``since``, ``until``, ``sort``), as strings."""

    @abc.abstractmethod
    def run_pages(self) -> AsyncIterator[list[JsonDict]]:
        """Every run, newest first, a page at a time (to match an id prefix)."""

    @abc.abstractmethod
    async def receipt(self, run_id: str) -> JsonDict:
        """What ``toren jobs receipt --json`` prints (``GET /runs/{id}/receipt``)."""

    @abc.abstractmethod
    async def children(self, run_id: str) -> list[JsonDict]:
        """The runs the run's tasks started (peer calls, background runs), oldest first."""

    @abc.abstractmethod
    async def webhooks(self, run_id: str) -> list[JsonDict]:
        """The run's completion webhook deliveries with their attempts, oldest first."""

    @abc.abstractmethod
    async def queue_state(self, run_id: str) -> JsonDict | None:
        """The run's place in the queue (``GET /runs/{id}``'s ``queue``): its ``priority``,
        ``concurrency_key`` and why it is ``waiting`` (docs/guides/flow-control.md)."""

    @abc.abstractmethod
    async def cancel_run(self, run_id: str, reason: str) -> JsonDict:
        """Cancel the run; the run as it is afterwards."""

    @abc.abstractmethod
    async def send_signal(self, run_id: str, name: str, payload: Any,
                          idempotency_key: str | None) -> JsonDict:
        """Send a signal to the run: ``{"run_id", "name", "number", "created", "status"}``."""

    @abc.abstractmethod
    async def list_approvals(self, *, agent: str | None = None, run_id: str | None = None,
                             status: str | None = None, limit: int = 50) -> list[JsonDict]:
        """Approvals, newest request first."""

    @abc.abstractmethod
    async def get_approval(self, approval_id: str) -> JsonDict:
        """One approval by its whole id."""

    @abc.abstractmethod
    async def decide_approval(self, approval_id: str, outcome: str, reason: str | None, *,
                              digest: str | None = None, scope: str = "call",
                              arguments: JsonDict | None = None,
                              answer: str | None = None) -> JsonDict:
        """Decide (``outcome``: approved, denied, edited with ``arguments``, answered with
        ``answer``) on the arguments of ``digest``, as the CLI's user (locally) or the API key
        (remotely). ``scope="run"``: approve always."""

    @abc.abstractmethod
    async def list_questions(self, run_id: str, status: str | None = None) -> list[JsonDict]:
        """The questions the run's agent asked (``ask_user``), oldest first."""

    @abc.abstractmethod
    async def answer_question(self, run_id: str, question_id: str, answer: str) -> JsonDict:
        """Answer a question as the CLI's user (locally) or the API key (remotely)."""

    @abc.abstractmethod
    async def list_schedules(self, agent: str | None) -> list[JsonDict]:
        """Every schedule (removed ones too)."""

    @abc.abstractmethod
    async def schedule_action(self, action: str, agent: str, name: str) -> JsonDict:
        """``get``, ``pause``, ``resume`` a schedule (its JSON afterwards) or ``trigger`` it
        (``{"agent", "schedule", "run_id", "slot_at", "trigger"}``)."""

    @abc.abstractmethod
    async def open_session(self, agent: str, session_id: str | None,
                           subject: str | None = None) -> JsonDict:
        """Start a session with ``agent`` (about ``subject``, for its ``memory:``), or find
        ``session_id``; return it (status and transcript, as ``GET /sessions/{id}``). Later
        session calls are about this one."""

    @abc.abstractmethod
    async def send_message(self, text: str, files: Sequence[str] = ()) -> None:
        """Give the session the user's message (the agent's turn starts), with ``files``
        (ids of uploaded files) attached; ``text`` may be empty when there are files."""

    @abc.abstractmethod
    async def upload_file(self, path: Path) -> JsonDict:
        """Store the file at ``path`` on this machine as ``POST /files`` does; its record
        (``BadFile``, ``FileTooLarge`` or the server's error saying what is wrong)."""

    @abc.abstractmethod
    async def get_file(self, file_id: str) -> JsonDict:
        """An uploaded file's record; ``FileNotFound`` (or the API's 404) if there is none."""

    @abc.abstractmethod
    async def start_run(self, agent: str, input: str, *, idempotency_key: str | None = None,
                        files: Sequence[str] = (),
                        webhooks: Sequence[WebhookSubscription] = (),
                        priority: int | None = None, subject: str | None = None) -> str:
        """Start a run of ``agent`` with ``files`` attached to its input; its id (the same
        run again for an ``idempotency_key`` used before). ``webhooks`` are told when it
        ends (``toren run --webhook``); ``priority`` orders it in the queue (``None``: the
        agent's); ``subject`` names whom it is about (``memory:``)."""

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> JsonDict:
        """The run as ``RunRecord.to_json()`` has it (what ``toren run --json`` prints)."""

    @abc.abstractmethod
    def run_live(self, run_id: str) -> AsyncIterator[Event | TextDelta]:
        """The run's events from the first, live, until it ends, with the pieces of the
        model's text as it is generated in between (best-effort)."""

    @abc.abstractmethod
    async def close_session(self) -> None:
        """End the session: the agent is not called again."""

    @abc.abstractmethod
    def session_events(self) -> AsyncIterator[Event | TextDelta]:
        """The session's events after the last one seen, live, each once, with the pieces of
        the model's text as it is generated in between (best-effort)."""

    @abc.abstractmethod
    async def fleet(self) -> JsonDict:
        """Workers, queue, runs in flight, recent failures (``toren top``, ``GET /fleet``)."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Let go of the runtime or the HTTP client."""

    @abc.abstractmethod
    async def audit(self, filters: JsonDict) -> list[JsonDict]:
        """Entries of the audit trail, newest first (``toren audit``, ``GET /audit``):
        ``filters`` are ``GET /audit``'s query parameters (``since``/``until`` as given)."""

    @abc.abstractmethod
    async def costs(self, *, period: str, since: str | None, until: str | None,
                    agent: str | None) -> JsonDict:
        """What model calls cost per day or week, agent and model, with the budgets
        (``toren costs``, ``GET /costs``; the parameters as given)."""

    async def attach(self, sources: Sequence[Path | str],
                     say: Callable[[str], None] | None = None) -> list[JsonDict]:
        """The records of the files ``--file``/``/attach`` named (``attachment_source``):
        each path uploaded, each file id looked up (an unknown one fails here, before a run
        or a message names it); ``say`` hears a line per file (rich markup, names escaped)."""
        found = []
        for source in sources:
            if isinstance(source, Path) and say is not None:
                say(f"uploading {safe(str(source))}…")
            stored = (await self.upload_file(source) if isinstance(source, Path)
                      else await self.get_file(source))
            if say is not None:
                say(f"  {describe_stored(stored)}")
            found.append(stored)
        return found

    async def resolve_run_id(self, id_or_prefix: str) -> str:
        """The id of the one run whose id is ``id_or_prefix`` or starts with it.

        ``RunNotFound`` if none does, ``AmbiguousRunId`` (listing the candidates) if several
        do. A whole id is returned as it is (the next call says if no run has it).
        """
        text = id_or_prefix.strip().lower()
        try:
            return str(uuid.UUID(text))
        except ValueError:
            pass
        if not _ID_PREFIX.fullmatch(text):
            raise RunNotFound(f"{id_or_prefix!r} is not a run id or the start of one (run ids "
                              "look like ec03889c-c557-...); see `toren jobs list`")
        matches = [run async for page in self.run_pages() for run in page
                   if run["id"].startswith(text)]
        if not matches:  # an archived run (retention) is found by its prefix too
            matches = [run for run in await self.list_archived_runs(agent=None, limit=_PAGE)
                       if run["id"].startswith(text)]
        if not matches:
            raise RunNotFound(f"no run id starts with {text!r} in {self.where} "
                              "(see `toren jobs list`)")
        if len(matches) > 1:
            shown = "; ".join(f"{run['id']} ({run['agent']}, {run['status']}, "
                              f"{created(run)})" for run in matches[:_SHOWN_CANDIDATES])
            more = len(matches) - _SHOWN_CANDIDATES
            raise AmbiguousRunId(f"{len(matches)} runs have ids starting with {text!r}: "
                                 f"{shown}" + (f"; and {more} more" if more > 0 else "")
                                 + ". Give more of the id")
        return str(matches[0]["id"])

    async def resolve_approval(self, id_or_prefix: str) -> JsonDict:
        """The approval whose id is ``id_or_prefix`` or the only one of the latest 200 whose
        id starts with it; ``ApprovalNotFound`` otherwise."""
        text = id_or_prefix.strip().lower()
        try:
            return await self.get_approval(str(uuid.UUID(text)))
        except ValueError:
            pass
        matches = []
        if _ID_PREFIX.fullmatch(text):
            matches = [a for a in await self.list_approvals(status=None,
                                                            limit=_APPROVAL_SEARCH)
                       if a["id"].startswith(text)]
        if len(matches) != 1:
            found = "several approvals' ids start" if matches else "no approval's id starts"
            raise ApprovalNotFound(f"{found} with {id_or_prefix!r}; give the whole id (see "
                                   "`toren approvals list`)")
        return matches[0]

    @abc.abstractmethod
    async def list_archived_runs(self, *, agent: str | None, limit: int) -> list[JsonDict]:
        """Archived runs, newest first, each with ``archive`` (location, archived_at,
        summary) (``toren jobs list --archived``, ``GET /archived-runs``)."""

    @abc.abstractmethod
    async def archive(self, *, dry_run: bool, max_runs: int | None) -> JsonDict:
        """One archive pass now (``toren db archive``, ``POST /archive``): ``dry_run``,
        ``archive``, ``agents`` (counts per agent), ``runs``; locally also ``hot_tables``."""

    @abc.abstractmethod
    async def restore_run(self, run_id: str) -> JsonDict:
        """Put an archived run back into the hot tables (``toren db restore``,
        ``POST /runs/{id}/restore``); the run afterwards."""

    async def resolve_archived_run_id(self, id_or_prefix: str) -> str:
        """The id of the one archived run whose id is ``id_or_prefix`` or starts with it
        (among the latest 1,000); ``RunNotFound`` otherwise."""
        text = id_or_prefix.strip().lower()
        try:
            return str(uuid.UUID(text))
        except ValueError:
            pass
        matches = [run["id"] for run in await self.list_archived_runs(agent=None, limit=_PAGE)
                   if run["id"].startswith(text)] if _ID_PREFIX.fullmatch(text) else []
        if len(matches) != 1:
            found = "several archived runs' ids start" if matches else (
                "no archived run's id starts")
            raise RunNotFound(f"{found} with {id_or_prefix!r} in {self.where}; give the whole "
                              "id (see `toren jobs list --archived`)")
        return str(matches[0])


def created(run: JsonDict) -> str:
    """A run's ``created_at`` as ``YYYY-MM-DD HH:MM:SS`` (empty when unknown)."""
    at = run.get("created_at")
    return str(at)[:19].replace("T", " ") if at else ""


class LocalOperator(Operator):
    """The database through ``toren.Runtime``: without workers, or with them for
    ``toren chat`` (the session is worked in this process)."""

    where = "this database"

    def __init__(self, runtime: Runtime, decided_by: str = "", *, workers: bool = False
                 ) -> None:
        self.runtime = runtime
        self.decided_by = decided_by
        self.workers = workers
        #: Whether stopping says nothing (by default it says what it waits for when Ctrl-C
        #: stops workers); ``toren run --json`` sets it.
        self.quiet = not workers
        self.position: dict[str, int] = {}

    async def start(self) -> None:
        await self.runtime.start(workers=self.workers)

    @property
    def database(self) -> str:
        return self.runtime.database.description

    def audited(self, action: str, **fields: Any) -> AbstractAsyncContextManager[AuditNote]:
        """Record the state-changing call in the block in the audit trail, by the CLI's
        user (``TOREN_ACTOR`` or the OS user), when it ends. (Through ``--url`` the server
        records it, by the API key.)"""
        return self.runtime.audit.recording(cli_actor(), action, "cli", **fields)

    async def fleet(self) -> JsonDict:
        return await self.runtime.fleet.snapshot()

    async def list_runs(self, *, agent: str | None, status: str | None, limit: int,
                        schedule: str | None,
                        find: Mapping[str, str] | None = None) -> list[JsonDict]:
        if find:
            if status is not None and status not in ev.RUN_STATUSES:
                raise ConfigError(f"unknown status {status!r}; one of "
                                  f"{', '.join(ev.RUN_STATUSES)}")
            page = await self.runtime.runs.search(parse_run_search(
                find, agents=(agent,) if agent else (), status=status, schedule=schedule,
                limit=limit))
            runs, totals = page.items, page.totals
        else:
            runs = await self.runtime.list_runs(agent=agent, status=status, limit=limit,
                                                schedule=schedule)
            totals = await self.runtime.runs.totals(runs)
        return [run.to_json() | {"totals": totals.get(run.id, RunTotals()).to_json()}
                for run in runs]

    async def run_pages(self) -> AsyncIterator[list[JsonDict]]:
        async for page in self.runtime.runs.every_run(_PAGE):
            yield [run.to_json() for run in page]

    async def receipt(self, run_id: str) -> JsonDict:
        return await self.runtime.receipt(run_id)

    async def children(self, run_id: str) -> list[JsonDict]:
        return [child.to_json() for child in await self.runtime.children(run_id)]

    async def webhooks(self, run_id: str) -> list[JsonDict]:
        return [d.to_json() for d in await self.runtime.webhook_deliveries(run_id)]

    async def queue_state(self, run_id: str) -> JsonDict | None:
        return await self.runtime.runs.queue_state(await self.runtime.get_run(run_id))

    async def cancel_run(self, run_id: str, reason: str) -> JsonDict:
        async with self.audited("run.cancel", run_id=run_id,
                                details={"reason": reason}) as note:
            record = await self.runtime.cancel_run(run_id, reason)
            note.agent = record.agent
        return record.to_json()

    async def send_signal(self, run_id: str, name: str, payload: Any,
                          idempotency_key: str | None) -> JsonDict:
        async with self.audited("run.signal", run_id=run_id, details={"signal": name}):
            return await self.runtime.signals.send(run_id, name, payload,
                                                  idempotency_key=idempotency_key,
                                                  sent_by=self.decided_by or None)

    async def list_approvals(self, *, agent: str | None = None, run_id: str | None = None,
                             status: str | None = None, limit: int = 50) -> list[JsonDict]:
        found = await self.runtime.approvals.list(agent=agent, run_id=run_id, status=status,
                                                  limit=limit)
        return [a.to_json() for a in found]

    async def get_approval(self, approval_id: str) -> JsonDict:
        return (await self.runtime.approvals.get(approval_id)).to_json()

    async def decide_approval(self, approval_id: str, outcome: str, reason: str | None, *,
                              digest: str | None = None, scope: str = "call",
                              arguments: JsonDict | None = None,
                              answer: str | None = None) -> JsonDict:
        action = {"approved": "approval.approve", "denied": "approval.deny",
                  "edited": "approval.edit", "answered": "approval.answer"}.get(
                      outcome, f"approval.{outcome}")
        async with self.audited(action, target=approval_id, details={
                "reason": reason, "digest": digest, "scope": scope}) as note:
            record = await self.runtime.approvals.decide(
                approval_id, outcome, decided_by=self.decided_by, reason=reason,
                digest=digest, scope=scope, arguments=arguments, answer=answer)
            note.agent, note.run_id = record.agent, record.run_id
        return record.to_json()

    async def list_questions(self, run_id: str, status: str | None = None) -> list[JsonDict]:
        return [q.to_json() for q in await self.runtime.questions.list(run_id, status=status)]

    async def answer_question(self, run_id: str, question_id: str, answer: str) -> JsonDict:
        async with self.audited("question.answer", run_id=run_id, target=question_id):
            return await self.runtime.answer_question(run_id, question_id, answer,
                                                      answered_by=self.decided_by)

    async def list_schedules(self, agent: str | None) -> list[JsonDict]:
        return [s.to_json() for s in await self.runtime.schedules.list(agent)]

    async def schedule_action(self, action: str, agent: str, name: str) -> JsonDict:
        if action == "get":
            return (await self.runtime.schedules.get(agent, name)).to_json()
        async with self.audited(f"schedule.{action}", agent=agent, target=name) as note:
            if action == "trigger":
                fired = await self.runtime.schedules.trigger(agent, name)
                note.run_id = fired.run_id
                return {"agent": fired.agent, "schedule": fired.schedule,
                        "run_id": fired.run_id, "slot_at": fired.slot_at.isoformat(),
                        "trigger": fired.trigger}
            do = {"pause": self.runtime.schedules.pause,
                  "resume": self.runtime.schedules.resume}[action]
            return (await do(agent, name)).to_json()

    async def open_session(self, agent: str, session_id: str | None,
                           subject: str | None = None) -> JsonDict:
        if session_id is None:
            async with self.audited("session.create", agent=agent) as note:
                session_id = note.run_id = await self.runtime.sessions.start(
                    agent, subject=subject)
        self.session_id = session_id
        found = await self.runtime.sessions.get(self.session_id)
        for event in await self.runtime.events(self.session_id):
            self.position[event.stream] = max(self.position.get(event.stream, 0), event.seq)
        return found

    async def send_message(self, text: str, files: Sequence[str] = ()) -> None:
        async with self.audited("session.message", run_id=self.session_id,
                                details={"files": len(files)}):
            await self.runtime.sessions.send(self.session_id, text,
                                             files=list(files) or None)

    async def upload_file(self, path: Path) -> JsonDict:
        async with self.audited("file.upload", details={"name": path.name}) as note:
            stored = await add_path(path, max_file_bytes(), cli_uploader(),
                                    runtime=self.runtime)
            note.target = stored.id
        return stored.to_json()

    async def get_file(self, file_id: str) -> JsonDict:
        stored = await self.runtime.files.get(file_id)
        if stored is None:
            raise FileNotFound(f"no file has the id {file_id!r}; see `toren files list`")
        return stored.to_json()

    async def start_run(self, agent: str, input: str, *, idempotency_key: str | None = None,
                        files: Sequence[str] = (),
                        webhooks: Sequence[WebhookSubscription] = (),
                        priority: int | None = None, subject: str | None = None) -> str:
        async with self.audited("run.start", agent=agent, details=(
                {} if priority is None else {"priority": priority})) as note:
            run_id = await self.runtime.start_run(
                agent, input, idempotency_key=idempotency_key, files=list(files) or None,
                webhooks=webhooks, priority=priority, subject=subject)
            note.run_id = run_id
        return run_id

    async def get_run(self, run_id: str) -> JsonDict:
        return (await self.runtime.get_run(run_id)).to_json()

    def run_live(self, run_id: str) -> AsyncIterator[Event | TextDelta]:
        return self.runtime.follow_live(run_id)

    async def close_session(self) -> None:
        async with self.audited("session.message", run_id=self.session_id,
                                details={"close": True}):
            await self.runtime.sessions.close(self.session_id, "closed from toren chat")

    async def session_events(self) -> AsyncIterator[Event | TextDelta]:
        async for item in self.runtime.follow_live(self.session_id, after=self.position):
            if isinstance(item, Event):
                self.position[item.stream] = max(self.position.get(item.stream, 0), item.seq)
            yield item

    async def aclose(self) -> None:
        # with workers (toren chat), say what stopping waits for when Ctrl-C brought us here
        await stop_runtime(self.runtime, quiet=self.quiet)

    async def list_archived_runs(self, *, agent: str | None, limit: int) -> list[JsonDict]:
        return [archived_json(run) for run in
                await self.runtime.archive.list(agent=agent, limit=limit)]

    async def costs(self, *, period: str, since: str | None, until: str | None,
                    agent: str | None) -> JsonDict:
        window = costs_window(period, since, until)
        agents = await self.runtime.costs.agents()
        if agent is not None and agent not in agents:
            raise ConfigError(f"no agent named {agent!r} in {self.database}")
        return await self.runtime.costs.report(*window, [agent] if agent else agents)

    async def audit(self, filters: JsonDict) -> list[JsonDict]:
        moments = {name: parse_moment(filters[name], name) if filters.get(name) else None
                   for name in ("since", "until")}
        page = await self.runtime.audit.page(AuditQuery(
            actor=filters.get("actor"), action=filters.get("action"),
            agent=filters.get("agent"), run_id=filters.get("run"),
            outcome=filters.get("outcome"), since=moments["since"], until=moments["until"],
            limit=int(filters.get("limit") or 50)))
        return [record.to_json() for record in page.items]

    async def archive(self, *, dry_run: bool, max_runs: int | None) -> JsonDict:
        if dry_run:
            report = await self.runtime.archive.archive_due(dry_run=True, max_runs=max_runs)
        else:
            async with self.audited("run.archive", details={"max_runs": max_runs}) as note:
                report = await self.runtime.archive.archive_due(max_runs=max_runs)
                note.details["archived"] = sum(
                    counts.get("archived", 0) for counts in report.get("agents", {}).values())
        report["hot_tables"] = await self.runtime.fleet.hot_table_sizes()
        return report

    async def restore_run(self, run_id: str) -> JsonDict:
        async with self.audited("run.restore", run_id=run_id) as note:
            restored = await self.runtime.archive.restore(run_id)
            note.agent = restored.agent
        return restored.to_json()


class RemoteOperator(Operator):
    """A deployment's HTTP API through ``toren.client`` (``TOREN_URL``, ``TOREN_API_KEY``)."""

    def __init__(self, client: TorenClient) -> None:
        self.client = client
        self.where = f"the runs served at {client.base_url}"
        self.cursor: str | None = None

    @property
    def database(self) -> str:
        return f"the deployment at {self.client.base_url}"

    async def start(self) -> None:
        """Nothing to start: the client connects on the first request."""

    async def fleet(self) -> JsonDict:
        return await self.client.fleet()

    async def list_runs(self, *, agent: str | None, status: str | None, limit: int,
                        schedule: str | None,
                        find: Mapping[str, str] | None = None) -> list[JsonDict]:
        runs: list[JsonDict] = []
        cursor = None
        while len(runs) < limit:
            page = await self.client.list_runs(agent=agent, status=status, cursor=cursor,
                                               limit=min(_REMOTE_PAGE, limit - len(runs)),
                                               schedule=schedule, **dict(find or {}))
            runs += [dict(run) for run in page["runs"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        return runs

    async def run_pages(self) -> AsyncIterator[list[JsonDict]]:
        cursor = None
        while True:
            page = await self.client.list_runs(limit=_REMOTE_PAGE, cursor=cursor)
            yield [dict(run) for run in page["runs"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return

    async def receipt(self, run_id: str) -> JsonDict:
        return await self.client.receipt(run_id)

    async def children(self, run_id: str) -> list[JsonDict]:
        return [dict(child) for child in await self.client.children(run_id)]

    async def webhooks(self, run_id: str) -> list[JsonDict]:
        return await self.client.webhooks(run_id)

    async def queue_state(self, run_id: str) -> JsonDict | None:
        queue = (await self.client.get_run(run_id)).get("queue")
        return dict(queue) if queue is not None else None

    async def cancel_run(self, run_id: str, reason: str) -> JsonDict:
        return dict(await self.client.cancel_run(run_id, reason))

    async def send_signal(self, run_id: str, name: str, payload: Any,
                          idempotency_key: str | None) -> JsonDict:
        return dict(await self.client.signal(run_id, name, payload,
                                             idempotency_key=idempotency_key))

    async def list_approvals(self, *, agent: str | None = None, run_id: str | None = None,
                             status: str | None = None, limit: int = 50) -> list[JsonDict]:
        found = await self.client.list_approvals(agent=agent, run_id=run_id, status=status,
                                                 limit=limit)
        return [dict(a) for a in found]

    async def get_approval(self, approval_id: str) -> JsonDict:
        return dict(await self.client.get_approval(approval_id))

    async def decide_approval(self, approval_id: str, outcome: str, reason: str | None, *,
                              digest: str | None = None, scope: str = "call",
                              arguments: JsonDict | None = None,
                              answer: str | None = None) -> JsonDict:
        if outcome == "edited":
            assert arguments is not None and digest is not None
            return dict(await self.client.edit_approval(approval_id, arguments, digest=digest,
                                                        reason=reason))
        if outcome == "answered":
            assert answer is not None and digest is not None
            return dict(await self.client.answer_approval(approval_id, answer, digest=digest,
                                                          reason=reason))
        if outcome == "approved":
            return dict(await self.client.approve(approval_id, reason, digest=digest,
                                                  always=scope == "run"))
        return dict(await self.client.deny(approval_id, reason, digest=digest))

    async def list_questions(self, run_id: str, status: str | None = None) -> list[JsonDict]:
        return [dict(q) for q in await self.client.list_questions(run_id, status=status)]

    async def answer_question(self, run_id: str, question_id: str, answer: str) -> JsonDict:
        return dict(await self.client.answer_question(run_id, question_id, answer))

    async def list_schedules(self, agent: str | None) -> list[JsonDict]:
        return [dict(s) for s in await self.client.list_schedules(agent=agent)]

    async def schedule_action(self, action: str, agent: str, name: str) -> JsonDict:
        do = {"get": self.client.get_schedule, "pause": self.client.pause_schedule,
              "resume": self.client.resume_schedule,
              "trigger": self.client.trigger_schedule}[action]
        return dict(await do(agent, name))

    async def open_session(self, agent: str, session_id: str | None,
                           subject: str | None = None) -> JsonDict:
        self.session_id = session_id or (await self.client.create_session(
            agent, subject=subject))["id"]
        found = dict(await self.client.get_session(self.session_id))
        self.cursor = (await self.client.events(self.session_id))["cursor"]
        return found

    async def send_message(self, text: str, files: Sequence[str] = ()) -> None:
        await self.client.send_message(self.session_id, text, files=list(files) or None)

    async def upload_file(self, path: Path) -> JsonDict:
        return dict(await self.client.upload_file(path))

    async def get_file(self, file_id: str) -> JsonDict:
        return dict(await self.client.get_file(file_id))

    async def start_run(self, agent: str, input: str, *, idempotency_key: str | None = None,
                        files: Sequence[str] = (),
                        webhooks: Sequence[WebhookSubscription] = (),
                        priority: int | None = None, subject: str | None = None) -> str:
        created = await self.client.create_run(
            agent, input, idempotency_key=idempotency_key, files=list(files) or None,
            webhook=[{"url": w.url, "events": list(w.events)} for w in webhooks] or None,
            priority=priority, subject=subject)
        return created["id"]

    async def get_run(self, run_id: str) -> JsonDict:
        detail = dict(await self.client.get_run(run_id))
        return {key: value for key, value in detail.items() if key not in _RUN_DETAIL_ONLY}

    async def run_live(self, run_id: str) -> AsyncIterator[Event | TextDelta]:
        async for item in self.client.stream_live(run_id):
            yield _event_or_text(item)

    async def close_session(self) -> None:
        await self.client.close_session(self.session_id)

    async def session_events(self) -> AsyncIterator[Event | TextDelta]:
        async for item in self.client.stream_live(self.session_id, after=self.cursor):
            if "cursor" in item:
                self.cursor = cast("ClientEvent", item)["cursor"]
            yield _event_or_text(item)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def list_archived_runs(self, *, agent: str | None, limit: int) -> list[JsonDict]:
        runs: list[JsonDict] = []
        cursor = None
        while len(runs) < limit:
            page = await self.client.list_archived_runs(
                agent=agent, cursor=cursor, limit=min(_REMOTE_PAGE, limit - len(runs)))
            runs += [dict(run) for run in page["runs"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        return runs

    async def archive(self, *, dry_run: bool, max_runs: int | None) -> JsonDict:
        return await self.client.archive(dry_run=dry_run, max_runs=max_runs)

    async def restore_run(self, run_id: str) -> JsonDict:
        return dict(await self.client.restore_run(run_id))

    async def costs(self, *, period: str, since: str | None, until: str | None,
                    agent: str | None) -> JsonDict:
        return dict(await self.client.costs(period=period, since=since, until=until,
                                            agent=agent))

    async def audit(self, filters: JsonDict) -> list[JsonDict]:
        page = await self.client.audit(**filters)
        return [dict(entry) for entry in page["entries"]]


#: What ``GET /runs/{id}`` adds to the run's own JSON (``RunRecord.to_json()``).
_RUN_DETAIL_ONLY = frozenset({"why", "budget", "totals", "pending_approvals"})


def _event_or_text(item: Any) -> Event | TextDelta:
    """An item of ``TorenClient.stream_live`` as the runtime's ``follow_live`` yields it."""
    if "cursor" not in item:
        return TextDelta.from_json(dict(item))
    event = cast("ClientEvent", item)
    return Event(event["run_id"], event["stream"], event["seq"], event["type"], event["data"])


def archived_json(run: Any) -> JsonDict:
    """An archived ``RunRecord`` as the HTTP API gives it: the run, and ``archive``."""
    return dict(run.to_json()) | {"archive": run.extra["archive"]}


def api_url(url: str) -> str:
    """``url`` (``--url``/``TOREN_URL``) if it is an http(s) URL with a host, else a
    ``ConfigError`` saying what one looks like."""
    try:
        parts = urlsplit(url.strip())
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # a port that is not a number raises ValueError
    except ValueError:
        valid = False
    if not valid:
        raise ConfigError(f"--url/TOREN_URL {url!r} is not the URL of a Toren API: give an "
                          "http(s) URL with a host, such as https://toren.example.com or "
                          "http://127.0.0.1:8420")
    return url.strip()


def make_operator(url: str | None, *, decided_by: str = "", dirs: list[Path] | None = None,
                  agent: str | None = None, workers: bool = False,
                  serve_dirs: bool = False) -> Operator:
    """The deployment at ``url`` (``TOREN_URL``, with ``TOREN_API_KEY``) or, without one, this
    machine's database: a runtime that serves no agent, or the agents in ``dirs`` with
    ``serve_dirs`` (``toren db archive`` needs their retention) or with ``agent``, checked at
    once to serve it (``toren schedules trigger`` needs the schedule's definition,
    ``toren chat`` works the session). Not started yet. Without ``agent``, a database that
    does not exist yet is ``NoDatabase`` (``require_database``): such commands only work on
    records already there."""
    if url:
        from toren.client import TorenClient  # aiohttp: only against a deployment

        return RemoteOperator(TorenClient(api_url(url)))
    from toren.host.runtime import Runtime

    runtime = (load_runtime(dirs, agent) if agent is not None or serve_dirs
               else Runtime(agents=[]))
    if agent is None and not workers:  # only existing records: never create a database
        require_database(runtime)
    return LocalOperator(runtime, decided_by, workers=workers)


def operate(action: Callable[[Operator], Awaitable[T]], *, url: str | None,
            decided_by: str = "", dirs: list[Path] | None = None,
            agent: str | None = None, serve_dirs: bool = False) -> T:
    """Run one command's ``action`` on ``make_operator(...)``, started, and close it after."""
    operator = make_operator(url, decided_by=decided_by, dirs=dirs, agent=agent,
                             serve_dirs=serve_dirs)

    async def go() -> T:
        await operator.start()
        try:
            return await action(operator)
        finally:
            await operator.aclose()

    return run_async(go())
