"""Sessions: ``/sessions``, ``toren chat`` and the chat channels (through the runtime's
``ChannelContext``) call this service."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import msgspec

from toren.agents import AgentSpec
from toren.config import Settings
from toren.core import events as ev
from toren.core.attachments import Attachment
from toren.core.events import Event, NewEvent
from toren.core.flow import run_flow
from toren.core.runs import RunRecord
from toren.core.sessions import MAX_MESSAGE_CHARS, transcript
from toren.core.webhooks import WebhookSubscription
from toren.errors import ConfigError, SessionBusy, SessionEnded, SessionNotFound
from toren.execution.messages import MAIN_TASK, task_message
from toren.host.policies import ask_before_run_start
from toren.host.retention import is_archived
from toren.host.services.questions import QuestionsService
from toren.host.services.values import check_storable, checked_subject
from toren.host.versions import AgentVersions
from toren.host.webhooks import admit_webhooks
from toren.seams.policies import PolicyHooks
from toren.seams.store.reader import RunReader
from toren.seams.store.runlog import RunLog

#: ``Runtime.attach_files``: ``(agent, text, file ids)`` -> the text with a note naming the
#: files appended, and the attachments the agent's model is shown.
AttachFiles = Callable[[str, Any, Sequence[str] | None],
                       Awaitable[tuple[Any, tuple[Attachment, ...]]]]


#: How long a message waits for a question being asked to be kept (``_question_on_its_way``):
#: the task keeps it right after appending ``QuestionAsked``, in milliseconds.
_QUESTION_WAIT_TRIES = 40
_QUESTION_WAIT_S = 0.05


class SessionsService:
    """Durable conversations with the served agents: opened, given one message per turn,
    read back with their transcript, closed. ``runtime.sessions``; needs the store open.

    Given the store's ``RunLog`` (a session's run and each input) and ``RunReader``, the
    served agents' names and the runtime's pieces a session needs: ``check_served``, the
    agents' ``versions``, ``attach_files``, the reads of archived runs (``archived_run``,
    ``archived_events``: ``ArchiveService.get``, ``.events``) and ``pending_approvals``
    (``ApprovalsService.pending``), the ``questions`` service (``QuestionsService``: a
    message to a session whose agent asked a question answers it), and the ``settings`` its
    webhooks are checked against."""

    def __init__(self, log: RunLog, reader: RunReader, *, agents: Collection[str],
                 check_served: Callable[[str], AgentSpec], versions: AgentVersions,
                 attach_files: AttachFiles,
                 archived_run: Callable[[str], Awaitable[RunRecord | None]],
                 archived_events: Callable[[RunRecord], Awaitable[list[Event]]],
                 pending_approvals: Callable[[str], Awaitable[list[dict[str, Any]]]],
                 questions: QuestionsService | None = None,
                 settings: Settings | None = None,
                 policies: PolicyHooks | None = None) -> None:
        self._log = log
        self._settings = settings or Settings()
        self._reader = reader
        self._agents = frozenset(agents)
        self._check_served = check_served
        self._versions = versions
        self._attach_files = attach_files
        self._archived_run = archived_run
        self._archived_events = archived_events
        self._pending_approvals = pending_approvals
        self._questions = questions
        #: The installed policy plugins, asked about each message (``before_run_start``).
        self._policies = policies

    async def start(self, agent: str, *, idempotency_key: str | None = None,
                    traceparent: str | None = None,
                    webhooks: Sequence[WebhookSubscription] = (),
                    subject: str | None = None) -> str:
        """Open a durable conversation with ``agent``; return its id. It starts
        ``awaiting_input``: nothing runs until ``send``.

        With an ``idempotency_key`` already used for this agent, returns that session's id.
        ``traceparent`` puts the session's spans in the caller's trace (as ``start_run``);
        ``webhooks`` are told when it ends (and, if they ask, at each ``awaiting_input``).
        ``subject`` names whom it is about (a channel identity such as ``telegram:12345``):
        its agent's ``user`` memories are this subject's (docs/guides/memory.md).
        """
        spec = self._check_served(agent)
        subject = checked_subject(subject)
        if spec.workflow is not None:
            raise ConfigError(f"agent {agent!r} runs a workflow (workflow.py), which takes one "
                              "input and ends; sessions are for agents without a workflow. "
                              "Start a run instead")
        check_storable(idempotency_key, "idempotency key")
        kept_webhooks = admit_webhooks(webhooks, self._settings)
        session_id = str(uuid.uuid4())
        # a session has no input: an input key falls back to the session itself
        priority, key = run_flow(spec.concurrency, spec.priority, None, run_id=session_id,
                                 fallback_key=session_id)
        await self._versions.save(agent)
        pinned = self._versions.pin_event(agent)
        events = [NewEvent.of(ev.RunCreated(agent=agent, input=None,
                                            idempotency_key=idempotency_key, session=True,
                                            traceparent=traceparent, priority=priority or None,
                                            concurrency_key=key, subject=subject)),
                  NewEvent.of(ev.TaskScheduled(task_id=MAIN_TASK, subagent=None, input=None,
                                               session=True)),
                  *([pinned] if pinned is not None else [])]
        found, _created = await self._log.create_run(
            agent, session_id, None, idempotency_key=idempotency_key, events=events,
            messages=[], kind="session", status="awaiting_input", webhooks=kept_webhooks,
            priority=priority, concurrency_key=key)
        return found

    async def get(self, session_id: str) -> dict[str, Any]:
        """The session's status and full transcript (``toren.core.sessions.transcript``),
        its background runs and its pending approvals. ``SessionNotFound``."""
        record = await self._session(session_id)
        main = ev.task_stream(MAIN_TASK)
        stream = (sorted((e for e in await self._archived_events(record) if e.stream == main),
                         key=lambda e: e.seq)
                  if is_archived(record) else
                  await self._reader.load_stream(record.agent, record.id, main))
        return {"id": record.id, "agent": record.agent, "status": record.status,
                "background_runs": await self._background_runs(stream),
                "stop_reason": record.stop_reason, "error": record.error,
                "created_at": record.created_at.isoformat() if record.created_at else None,
                "updated_at": record.updated_at.isoformat() if record.updated_at else None,
                "finished_at": record.finished_at.isoformat() if record.finished_at else None,
                "pending_approvals": await self._pending_approvals(record.id),
                "pending_questions": (await self._questions.pending(record.id)
                                      if self._questions is not None else []),
                } | transcript(stream)

    async def _background_runs(self, stream: Sequence[Event]) -> list[dict[str, Any]]:
        """The background runs a session started, with their status now."""
        told = {e.data["run_id"] for e in stream if e.type == ev.BACKGROUND_RUN_FINISHED}
        found = []
        for event in stream:
            if event.type != ev.BACKGROUND_RUN_STARTED:
                continue
            child = await self._reader.get_run(event.data["run_id"], event.data["agent"])
            found.append({"run_id": event.data["run_id"], "agent": event.data["agent"],
                          "status": child.status if child else "unknown",
                          "reported": event.data["run_id"] in told,
                          "started_at": event.created_at.isoformat()
                          if event.created_at else None})
        return found

    async def send(self, session_id: str, text: str, *, idempotency_key: str | None = None,
                   files: Sequence[str] | None = None) -> int:
        """Give the session the user's next message and start the agent's turn; return the
        turn's number. While the agent waits for the answer to a question it asked
        (``ask_user``), the message answers it instead (the turn goes on; its number is
        returned).

        The agent's policies (``policies:``) are asked about the message first
        (``before_run_start``, with the session's id): ``PolicyRejected`` when one rejects it,
        and nothing is taken.

        Raises ``SessionBusy`` while the agent is still answering (wait for
        ``awaiting_input``), ``SessionEnded`` once the session is over, ``SessionNotFound``.
        A message with an ``idempotency_key`` the session already took is not taken again:
        the turn it started is returned (a client's retry after a lost answer). ``files``
        are ids of uploaded files attached to the message (``Runtime.attach_files``).
        """
        if not isinstance(text, str) or not (text.strip() or files):
            raise ConfigError("a message needs non-empty text (or files)")
        record = await self._session(session_id)
        text, attachments = await self._attach_files(record.agent, text, files)
        if len(text) > MAX_MESSAGE_CHARS:
            raise ConfigError(f"a message may be at most {MAX_MESSAGE_CHARS} characters; this "
                              f"one has {len(text)}")
        check_storable([text, idempotency_key], "message")
        if self._policies is not None:  # each message is the session's input: asked first
            await ask_before_run_start(self._policies, self._check_served(record.agent), text,
                                       idempotency_key, session_id=session_id)
        answered = await self._answer_question(record, text, idempotency_key)
        if answered is not None:
            return answered
        # a UserMessage without its turn: the store numbers it in the statement that takes it
        data = ({"text": text} | ({"idempotency_key": idempotency_key} if idempotency_key else {})
                | ({"attachments": msgspec.to_builtins(attachments)} if attachments else {}))
        return await self._input(session_id, NewEvent(ev.USER_MESSAGE, data), idempotency_key)

    async def close(self, session_id: str, reason: str = "closed by the user") -> None:
        """End the session after its current turn: the agent is not called again, the run
        completes with the last reply as its output. ``SessionBusy`` mid-turn (wait for
        ``awaiting_input``, or cancel the run to stop it at once)."""
        await self._input(session_id, NewEvent.of(ev.CloseRequested(reason=reason)))

    async def wait_for_turn(self, session_id: str, *, timeout_s: float | None = None,
                            poll_s: float = 0.1) -> dict[str, Any]:
        """Wait until the session is no longer ``running`` (it awaits input again, or it
        ended); return it as ``get`` does. ``TimeoutError`` after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            record = await self._session(session_id)
            if record.status not in ("queued", "running", "waiting"):
                return await self.get(session_id)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"session {session_id} is still {record.status} after "
                                   f"{timeout_s}s")
            await asyncio.sleep(poll_s)

    async def _answer_question(self, record: RunRecord, text: str,
                               idempotency_key: str | None) -> int | None:
        """Answer the session's oldest open question with ``text`` (as the session's user);
        the current turn's number, or ``None`` when no question is open. A message whose
        ``idempotency_key`` answered a question already is not taken again: its turn."""
        if self._questions is None:
            return None
        for question in await self._questions.list(record.id):
            if question.pending or (idempotency_key is not None
                                    and question.extra.get("key") == idempotency_key):
                if question.pending:
                    await self._questions.answer(record.id, question.id, text,
                                                 answered_by=f"session:{record.id}",
                                                 key=idempotency_key)
                stream = await self._reader.load_stream(record.agent, record.id,
                                                        ev.task_stream(MAIN_TASK))
                return sum(1 for e in stream if e.type == ev.USER_MESSAGE)
        return None

    async def _question_on_its_way(self, record: RunRecord) -> bool:
        """Whether the agent's turn has just asked a question (``QuestionAsked`` in the log)
        whose row the task is about to keep: wait for it, briefly, so that a person who answers
        at once is not told the session is busy. ``True`` once it is kept."""
        if self._questions is None:
            return False
        stream = await self._reader.load_stream(record.agent, record.id,
                                                ev.task_stream(MAIN_TASK))
        asked = {e.data["question_id"] for e in stream if e.type == ev.QUESTION_ASKED}
        asked -= {e.data["question_id"] for e in stream if e.type == ev.QUESTION_ANSWERED}
        for _ in range(_QUESTION_WAIT_TRIES if asked else 0):
            if await self._questions.list(record.id, status="pending"):
                return True
            await asyncio.sleep(_QUESTION_WAIT_S)
        return False

    async def _session(self, session_id: str) -> RunRecord:
        record = (await self._reader.get_run(session_id)
                  or await self._archived_run(session_id))
        if record is None or record.kind != "session" or record.agent not in self._agents:
            raise SessionNotFound(f"no session {session_id!r} of an agent served here")
        return record

    async def _input(self, session_id: str, event: NewEvent,
                     idempotency_key: str | None = None) -> int:
        record = await self._session(session_id)
        taken, status, turn = await self._log.session_input(
            record.agent, record.id, ev.task_stream(MAIN_TASK), [event],
            [task_message(MAIN_TASK, None, None)], idempotency_key)
        if taken:
            return turn
        if status in ev.TERMINAL_STATUSES:
            raise SessionEnded(f"session {session_id} has ended ({status}); start a new one")
        if event.type == ev.USER_MESSAGE and (
                status == "awaiting_input" or await self._question_on_its_way(record)):
            # refused while a question was open, or being asked: it was asked since we looked
            answered = await self._answer_question(record, event.data["text"],
                                                   idempotency_key)
            if answered is not None:
                return answered
        if status == "awaiting_approval":
            raise SessionBusy(f"session {session_id} is waiting for approval of a tool call; "
                              "approve or deny it (`toren approvals list`), then send the "
                              "message again once its status is awaiting_input")
        if status == "waiting":
            raise SessionBusy(f"session {session_id} is waiting mid-turn, for the peer runs it "
                              "asked or for a signal one of its tools waits for (`toren jobs "
                              f"show {session_id}` says which); send the message again once "
                              "its status is awaiting_input")
        raise SessionBusy(f"session {session_id} is busy: the agent is taking its turn. Wait "
                          "until its status is awaiting_input, then send the message again")
