"""The event catalog: every fact Toren records, one frozen class per event type.

A run has one ``run`` stream (written by the orchestrator holding the run lease) and one
``task:<id>`` stream per task (written by that task's lease holder). Each class below is the
single source of truth for its event's payload: execution records instances of them, the fold
reads their attributes, and ``schemas/events.schema.json`` is generated from them
(``toren.core.catalog``; a test fails when the file and the classes disagree).

The classes are ``msgspec`` structs: one declaration gives typed attributes, strict decoding of
what the log holds (an unknown or missing field is an error, not a silent ``None``), fast
encoding on the append path, and the JSON Schema of the catalog. A field with a default is left
out of the stored JSON while it has its default, so optional facts (``session``, ``purpose``)
appear only when they are true.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from toren.core.attachments import Attachment

RUN_STREAM = "run"
#: The stream of signals sent to a run (``SignalReceived``): appended by senders without a
#: lease (nobody holds one on it), read by the orchestrator on each tick.
SIGNALS_STREAM = "signals"

#: Why a task or run stopped: the single documented enum (docs/reference/events.md).
StopReason = Literal["end_turn", "max_steps", "max_waves", "budget_exhausted", "cancelled",
                     "error"]
#: The outcome a stop reason implies (``status_for``).
TaskStatus = Literal["completed", "stopped", "failed", "cancelled"]
STOP_REASONS: tuple[str, ...] = StopReason.__args__  # type: ignore[attr-defined]
#: Run statuses; the last four are terminal. ``awaiting_input``: a session waits for a message;
#: ``awaiting_approval``: a task waits for a person to approve or deny a tool call;
#: ``waiting``: a task waits for the peer runs it asked (cross-agent calls) or for a signal a tool
#: waits for (``toren.wait_for_signal``), holding nothing.
RUN_STATUSES = ("queued", "running", "awaiting_input", "awaiting_approval", "waiting",
                "completed", "stopped", "failed", "cancelled")
TERMINAL_STATUSES = frozenset({"completed", "stopped", "failed", "cancelled"})

Epoch = Annotated[int, msgspec.Meta(
    ge=1, description="Fencing epoch of the lease under which the event was written.")]
Step = Annotated[int, msgspec.Meta(ge=1)]
Count = Annotated[int, msgspec.Meta(ge=0)]
#: A structured error: at least ``code`` and ``message`` (retries add ``attempt``).
ErrorInfo = Annotated[dict[str, Any], msgspec.Meta(
    description="A structured error: code and message (and attempt for retries).")]
AnyJson = Annotated[Any, msgspec.Meta(description="Any JSON value.")]
#: A task's or run's final answer: its text, or the JSON value it validated to when the agent
#: declares ``output:`` (a JSON Schema; docs/guides/structured-output.md).
Output = Annotated[Any, msgspec.Meta(
    description="The final answer: the model's text, or (with output: in agent.yaml, or a "
                "workflow returning a JSON value) the JSON value itself; null when there is "
                "none.")]
SessionFlag = Annotated[bool, msgspec.Meta(
    description="True on a session's events: the task takes turns (UserMessage, TurnEnded) "
                "instead of starting from input. Absent otherwise.")]
TaskOutputSchema = Annotated[dict[str, Any] | None, msgspec.Meta(
    description="The JSON Schema the task's final answer must match, given by the workflow "
                "(ctx.task(..., output=...)); absent otherwise (a subagent's own output: "
                "comes from its definition).")]
Attachments = Annotated[tuple[Attachment, ...], msgspec.Meta(
    description="Files shown to the model with the input or message (images, PDFs): "
                "references to stored files (GET /files/{id}), never their bytes. Absent when "
                "there are none.")]
Purpose = Annotated[Literal["compaction"] | None, msgspec.Meta(
    description="compaction on the model call that summarises older turns; absent on the "
                "task's own calls (which count as steps).")]


def task_stream(task_id: str) -> str:
    return f"task:{task_id}"


def background_notice(agent: str, run_id: str, status: str, output: str | None,
                      error: dict[str, Any] | None) -> str:
    """The message a session gets when a background run it started ends."""
    head = f"[background run {run_id} of agent {agent} {status}]"
    if output:
        return f"{head}\n{output}"
    if error:
        return f"{head}\nerror: {error.get('message', error)}"
    return head


def status_for(stop_reason: str) -> TaskStatus:
    """The run/task status a stop reason implies."""
    statuses: dict[str, TaskStatus] = {
        "end_turn": "completed", "max_steps": "stopped", "max_waves": "stopped",
        "budget_exhausted": "stopped", "cancelled": "cancelled"}
    return statuses.get(stop_reason, "failed")


class EventData(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
                forbid_unknown_fields=True):
    """The payload of one event type. ``stream`` says which stream it belongs on."""

    stream: ClassVar[Literal["run", "task", "signals"]]

    @classmethod
    def type_name(cls) -> str:
        """The event's ``type`` in the log: the class name."""
        return cls.__name__


# -- the run stream ----------------------------------------------------------------------------

class RunCreated(EventData, frozen=True):
    """A run was created (with its first task scheduled in the same transaction)."""

    stream = "run"
    agent: str
    input: AnyJson
    idempotency_key: str | None
    session: SessionFlag = False
    caller: Annotated[str | None, msgspec.Meta(
        description="The agent whose task started this run (a cross-agent call or a "
                    "background run); absent otherwise. The run's own fleet refuses it unless "
                    "the agent's acceptsFrom lists the caller.")] = None
    traceparent: Annotated[str | None, msgspec.Meta(
        description="The W3C traceparent of the request that created the run (its "
                    "traceparent header, validated): with tracing on, the run's spans join "
                    "that trace under the caller's span. Absent otherwise.")] = None
    priority: Annotated[int | None, msgspec.Meta(
        description="The run's priority (-100..100; higher is claimed first), as asked or "
                    "its agent's priority:; absent when 0. See docs/guides/flow-control.md.")
    ] = None
    concurrency_key: Annotated[str | None, msgspec.Meta(
        description="The run's key under its agent's concurrency: limit (from its input, or "
                    "its session); absent when the agent has no key.")] = None
    subject: Annotated[str | None, msgspec.Meta(
        description="Whom the run is about, for its agent's memory: (a channel identity such "
                    "as telegram:12345, or the subject given to POST /runs or /sessions); "
                    "its user memories are this subject's. Absent: none.")] = None


class TaskScheduled(EventData, frozen=True):
    """A task was scheduled; a queue message for it was sent in the same transaction."""

    stream = "run"
    task_id: str
    subagent: str | None
    input: AnyJson
    wave: Annotated[int | None, msgspec.Meta(
        description="The workflow wave that scheduled the task (absent for a single-task "
                    "run).")] = None
    session: SessionFlag = False
    output: TaskOutputSchema = None


class TaskAbsorbed(EventData, frozen=True):
    """The orchestrator took a finished task's outcome into the run."""

    stream = "run"
    task_id: str
    status: TaskStatus
    stop_reason: StopReason
    output: Output
    error: ErrorInfo | None
    cost_usd: float


class RunFinished(EventData, frozen=True):
    """The run ended; its row carries the same status, stop reason, output and error."""

    stream = "run"
    status: TaskStatus
    stop_reason: StopReason
    output: Output
    error: ErrorInfo | None


class RunCancelled(EventData, frozen=True):
    """The run was cancelled from outside (CLI, API); its queued messages were dropped."""

    stream = "run"
    reason: str


class RunDeadLettered(EventData, frozen=True):
    """A message of the run was delivered too many times without completing; the run failed."""

    stream = "run"
    message_id: Count
    kind: str
    attempts: Count
    reason: str
    status: Literal["failed"]
    stop_reason: Literal["error"]


class WaveTask(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One task of a wave: its id ``w<wave>-<index>``, subagent and input."""

    task_id: str
    subagent: str
    input: AnyJson
    output: TaskOutputSchema = None


class WaveStarted(EventData, frozen=True):
    """Workflow code started a wave: its tasks (ids w<wave>-<index>), each scheduled in the same
    transaction. A re-execution that asks for a different wave at this point is a
    non-determinism error."""

    stream = "run"
    wave: Step
    tasks: tuple[WaveTask, ...]


class ValueRecorded(EventData, frozen=True):
    """ctx.now() or ctx.uuid() returned this value; re-executions get it from the log."""

    stream = "run"
    n: Count
    kind: Literal["now", "uuid"]
    value: str


class TimerStarted(EventData, frozen=True):
    """await ctx.sleep(seconds) started a durable timer; a delayed run tick fires it."""

    stream = "run"
    timer: Step
    seconds: Annotated[float, msgspec.Meta(ge=0)]
    fire_at: str


class TimerFired(EventData, frozen=True):
    """The timer's tick arrived; the workflow continues past its sleep."""

    stream = "run"
    timer: Step


class WorkflowLogged(EventData, frozen=True):
    """ctx.log(message, **fields), recorded once."""

    stream = "run"
    n: Count
    message: str
    fields: dict[str, Any]


SignalName = Annotated[str, msgspec.Meta(
    pattern=r"^[a-z][a-z0-9_-]{0,63}$",
    description="The signal's name: lowercase letters, digits, - and _, starting with a "
                "letter (at most 64 characters).")]


class SignalWaitStarted(EventData, frozen=True):
    """await ctx.wait_for_signal(name, timeout=...) found no unconsumed signal of that name: the
    workflow waits (holding nothing) until one is sent or, with a timeout, its deadline passes
    (a delayed run tick)."""

    stream = "run"
    wait: Step
    name: SignalName
    timeout_s: Annotated[Annotated[float, msgspec.Meta(ge=0)] | None, msgspec.Meta(
        description="The wait's timeout in seconds; absent: it waits forever.")] = None
    fire_at: Annotated[str | None, msgspec.Meta(
        description="When the timeout fires (ISO 8601); absent without a timeout.")] = None


class SignalConsumed(EventData, frozen=True):
    """Wait ``wait`` of the workflow took signal ``signal`` (its number on the signals stream);
    every re-execution returns this payload, and no other wait takes the same signal."""

    stream = "run"
    wait: Step
    name: SignalName
    signal: Step
    payload: AnyJson


class SignalWaitTimedOut(EventData, frozen=True):
    """Wait ``wait`` reached its timeout with no signal of its name: ctx.wait_for_signal raises
    SignalTimeout, in this and every later re-execution."""

    stream = "run"
    wait: Step


class SignalsRead(EventData, frozen=True):
    """ctx.signals(name) read the signals of that name up to signal number ``through``: every
    re-execution returns the same list."""

    stream = "run"
    n: Count
    name: SignalName
    through: Count


# -- the signals stream --------------------------------------------------------------------------

class SignalReceived(EventData, frozen=True):
    """A signal was sent to the run (``toren jobs signal``, ``POST /runs/{id}/signals/{name}``,
    the client, the host API, MCP). Appended to the run's ``signals`` stream by the sender in
    one transaction with a run tick that wakes the workflow."""

    stream = "signals"
    name: SignalName
    payload: AnyJson
    sent_at: Annotated[str, msgspec.Meta(description="When it was sent (ISO 8601).")]
    idempotency_key: Annotated[str | None, msgspec.Meta(
        description="The sender's idempotency key: a second signal with the same key is not "
                    "recorded again.")] = None
    sent_by: Annotated[str | None, msgspec.Meta(
        description="Who sent it (an API key's name, cli:<os user>), when known.")] = None


# -- task streams ------------------------------------------------------------------------------

class RecordedToolCall(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
                       forbid_unknown_fields=True):
    """A tool call as the model asked for it, in ``ModelCallCompleted``."""

    id: str
    name: str
    arguments: dict[str, Any]
    arguments_error: Annotated[str | None, msgspec.Meta(
        description="Why the provider could not read the arguments (invalid JSON from the "
                    "model); the call was not run.")] = None


class TokenUsage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Token counts the provider reported for one call."""

    input_tokens: Count = 0
    output_tokens: Count = 0
    cache_read_tokens: Count = 0
    cache_write_tokens: Count = 0


class CallPricing(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The prices a model call was charged at, USD per million tokens of each kind."""

    input_per_mtok: Annotated[float, msgspec.Meta(ge=0)]
    output_per_mtok: Annotated[float, msgspec.Meta(ge=0)]
    cache_read_per_mtok: Annotated[float, msgspec.Meta(ge=0)]
    cache_write_per_mtok: Annotated[float, msgspec.Meta(ge=0)]


class TaskStarted(EventData, frozen=True):
    """A worker started the task. The conversation begins with input as the user message.

    ``prompt_sha256`` names the system prompt, whose text the store keeps once per distinct
    prompt (``Runtime.prompts``)."""

    stream = "task"
    task_id: str
    subagent: str | None
    model: str
    input: AnyJson
    limits: dict[str, Any]
    tools: tuple[str, ...]
    prompt_sha256: str
    epoch: Epoch
    session: SessionFlag = False
    output: TaskOutputSchema = None
    attachments: Attachments = ()


class ModelCallStarted(EventData, frozen=True):
    """A model call is about to be made (appended before the call; a call with no
    ModelCallCompleted after it was in flight when its worker stopped)."""

    stream = "task"
    step: Step
    epoch: Epoch
    purpose: Purpose = None
    #: Seconds the call waited for room in the fleet's provider rate limits (TOREN_RATE_LIMITS,
    #: limits.rate) before it was made; absent when it did not wait.
    rate_limit_wait_s: float | None = None
    #: The rate-limit bucket that held it longest (e.g. ``anthropic``, ``key:ANTHROPIC_API_KEY``).
    rate_limited_by: str | None = None


class ModelCallCompleted(EventData, frozen=True):
    """A model responded. Appended before anything acts on the response."""

    stream = "task"
    step: Step
    epoch: Epoch
    model: str
    text: str
    tool_calls: tuple[RecordedToolCall, ...]
    stop_reason: Literal["end_turn", "tool_use", "max_tokens"]
    usage: TokenUsage
    cost_usd: Annotated[float | None, msgspec.Meta(
        description="null when the model's price is unknown")]
    latency_ms: float
    repeated: Annotated[bool, msgspec.Meta(
        description="true when this call repeats one that was in flight when a previous "
                    "worker stopped")]
    purpose: Purpose = None
    provider_data: Annotated[dict[str, Any] | None, msgspec.Meta(
        description="What the provider needs back verbatim with this turn in later requests "
                    "(e.g. Anthropic thinking blocks); opaque to Toren.")] = None
    pricing: Annotated[CallPricing | None, msgspec.Meta(
        description="The prices cost_usd was computed at (the agent's pricing: or the "
                    "provider's); absent when the price is unknown. Receipts split the cost "
                    "by kind of token and show what prompt caching saved from it.")] = None
    image_tokens: Annotated[int, msgspec.Meta(
        ge=0, description="Of usage.input_tokens, those the request's images and PDF pages "
                          "took: an estimate by the provider's published formula (providers "
                          "report no separate count). Absent without attachments.")] = 0
    policies: Annotated[bool, msgspec.Meta(
        description="true when the agent had policies: (policy plugins) when the response "
                    "was recorded: nothing acts on it until a PolicyDecided for its step "
                    "(after_model_response) follows.")] = False


class ToolCallStarted(EventData, frozen=True):
    """A valid tool call is about to run (appended with the model response that asked for
    it)."""

    stream = "task"
    step: Step
    call_id: str
    name: str
    arguments: dict[str, Any]
    idempotency_key: str
    epoch: Epoch


ToolErrorKind = Literal["unknown_tool", "invalid_arguments", "exception", "interrupted",
                        "timeout", "abandoned", "approval_denied", "approval_expired",
                        "refused", "question_expired", "policy_denied"]


class ToolCallCompleted(EventData, frozen=True):
    """A tool call's result (or a structured error: unknown tool, invalid arguments,
    exception, interrupted)."""

    stream = "task"
    step: Step
    call_id: str
    name: str
    output: str
    is_error: bool
    error_kind: ToolErrorKind | None
    truncated: bool
    original_bytes: Count
    duration_ms: float
    epoch: Epoch
    attachments: Annotated[tuple[Attachment, ...], msgspec.Meta(
        description="Files the tool returned for the model to see (images, PDFs), stored "
                    "once by content; absent when it returned none.")] = ()


class RetryScheduled(EventData, frozen=True):
    """A retryable error (429, 5xx, timeout); the task continues after delay_s via a delayed
    message."""

    stream = "task"
    step: Step
    attempt: Step
    error: ErrorInfo
    delay_s: float
    next_attempt_at: Annotated[str, msgspec.Meta(extra_json_schema={"format": "date-time"})]
    epoch: Epoch


class TaskFinished(EventData, frozen=True):
    """The task ended."""

    stream = "task"
    task_id: str
    status: TaskStatus
    stop_reason: StopReason
    output: Output
    error: ErrorInfo | None
    steps: Count
    cost_usd: float
    epoch: Epoch


class OutputRejected(EventData, frozen=True):
    """The task's final answer did not match its output schema (``output:``): the model is
    told what failed in ``text``, a user turn the fold adds to the conversation, and answers
    again. After the last repair turn an invalid answer fails the task with invalid_output."""

    stream = "task"
    step: Annotated[int, msgspec.Meta(ge=1, description="The model call whose answer failed.")]
    attempt: Annotated[int, msgspec.Meta(ge=1, description="This repair turn's number.")]
    where: Annotated[str, msgspec.Meta(
        description="Where in the answer the problem is, as $.field[0]; $ for the whole "
                    "answer (not JSON at all).")]
    problem: str
    schema_path: Annotated[str, msgspec.Meta(
        description="The schema keyword the answer broke, as properties/topics/type (empty "
                    "when the answer is not JSON).")]
    schema_source: Annotated[str, msgspec.Meta(
        description="Where the schema is declared: agent.yaml:output, a file of the agent "
                    "directory, or subagents/<name>.md:output.")]
    text: Annotated[str, msgspec.Meta(description="The repair turn the model reads.")]
    epoch: Epoch


class Compacted(EventData, frozen=True):
    """Older turns were replaced by a summary, made by the compaction model call just before.
    The fold replaces the first `replaced` messages by one user message holding the summary; a
    resume reads it from the log."""

    stream = "task"
    step: Step
    summary: str
    replaced: Step
    reason: Literal["threshold", "context_window_exceeded"]
    tokens_before: int
    tokens_after: int
    epoch: Epoch


class UserMessage(EventData, frozen=True):
    """A user's message to a session, appended by the API (not a worker) in the same transaction
    that took the turn: the run became running and the task was queued. The fold adds it to the
    conversation as a user message."""

    stream = "task"
    turn: Annotated[int, msgspec.Meta(
        ge=1, description="The turn this message starts (1 for the first message).")]
    text: Annotated[str, msgspec.Meta(min_length=1)]
    idempotency_key: Annotated[str | None, msgspec.Meta(
        description="The Idempotency-Key the message was sent with: a message with the same "
                    "key is not taken again.")] = None
    attachments: Attachments = ()


class TurnEnded(EventData, frozen=True):
    """The agent finished its turn in a session; the run became awaiting_input in the same
    commit."""

    stream = "task"
    turn: Count
    stop_reason: Annotated[Literal["end_turn", "max_steps"], msgspec.Meta(
        description="end_turn: the model answered; max_steps: the turn used the agent's "
                    "max_steps model calls (the session stays open).")]
    output: Annotated[str | None, msgspec.Meta(
        description="The agent's reply (the last assistant text).")]
    steps: Annotated[int, msgspec.Meta(ge=0, description="Model calls in this turn.")]
    cost_usd: Annotated[float, msgspec.Meta(description="The session's cost so far.")]
    epoch: Epoch


class CloseRequested(EventData, frozen=True):
    """The user closed the session (appended by the API while it awaited input). The task
    finishes at once with stop reason end_turn and the last reply as output."""

    stream = "task"
    reason: str


# -- approvals: a person between an agent and a tool call (docs/guides/approvals.md) ----------

ApprovalOutcome = Literal["approved", "denied", "expired", "edited", "answered"]


class ApprovalRequested(EventData, frozen=True):
    """The model called a tool that needs approval. Recorded instead of ``ToolCallStarted``
    (with the model response that asked for it); the task parks as ``awaiting_approval`` once
    the step's other tool calls have run, and nothing runs the call until it is approved."""

    stream = "task"
    step: Step
    approval_id: Annotated[str, msgspec.Meta(
        description="The approval's id (a UUID derived from idempotency_key): what "
                    "`toren approvals approve ID` and POST /approvals/{id}/approve take.")]
    call_id: str
    name: str
    arguments: dict[str, Any]
    idempotency_key: str
    epoch: Epoch
    approvers: Annotated[tuple[str, ...], msgspec.Meta(
        description="Who may decide (API key names, or cli:<os user>); empty: anyone who may "
                    "use the API or the CLI.")] = ()
    expires_after_s: Annotated[Annotated[float, msgspec.Meta(gt=0)] | None, msgspec.Meta(
        description="Seconds after the request after which it expires (the model is told "
                    "the call was not run); absent: it waits until someone decides.")] = None
    digest: Annotated[str | None, msgspec.Meta(
        description="sha256 (hex) of the arguments as canonical JSON: what a decision must "
                    "name (absent in logs written before digests; computed then).")] = None
    on_expiry: Annotated[Literal["deny", "escalate"], msgspec.Meta(
        description="agent.yaml's onExpiry: deny, or escalate (once) to escalate_to.")] = "deny"
    escalate_to: Annotated[tuple[str, ...], msgspec.Meta(
        description="agent.yaml's escalateTo: who decides after an escalation.")] = ()
    remind_after_s: Annotated[Annotated[float, msgspec.Meta(gt=0)] | None, msgspec.Meta(
        description="agent.yaml's remindAfter in seconds: when the session's channel gets a "
                    "reminder while nobody decided.")] = None
    reason: Annotated[str | None, msgspec.Meta(
        description="Why the call needs a person, when something other than agent.yaml's "
                    "approvals: asked (e.g. a policy hook); absent: the tool is listed there."
    )] = None


class ApprovalDecided(EventData, frozen=True):
    """A person approved, denied, edited or answered the call, or it expired. The decision is
    made once, in the approvals table, by the API, the CLI, MCP, the console or a chat button;
    the worker that takes the task up again copies it here (under its lease) before acting on
    it. Approved: ``ToolCallStarted`` follows in the same append and the call runs; edited:
    ``ToolCallStarted`` with the edited ``arguments`` follows (the edit is the approval of the
    edited call, and the model reads a note of what changed with its result); answered: its
    ``ToolCallCompleted`` carries ``answer`` and the tool never runs; denied or expired: its
    ``ToolCallCompleted`` carries the reason to the model."""

    stream = "task"
    approval_id: str
    call_id: str
    outcome: ApprovalOutcome
    decided_by: Annotated[str, msgspec.Meta(
        description="The API key's name, cli:<os user>, or toren (expiry).")]
    decided_at: Annotated[str, msgspec.Meta(extra_json_schema={"format": "date-time"})]
    epoch: Epoch
    reason: str | None = None
    digest: Annotated[str | None, msgspec.Meta(
        description="The digest of the arguments the decision was made on (absent in logs "
                    "written before digests).")] = None
    scope: Annotated[Literal["call", "run"], msgspec.Meta(
        description="call: this call only; run: approved always, every later call of this "
                    "tool with the same digest in this run is approved without asking.")] = "call"
    arguments: Annotated[dict[str, Any] | None, msgspec.Meta(
        description="edited: the arguments the call runs with instead.")] = None
    edited_digest: Annotated[str | None, msgspec.Meta(
        description="edited: the digest of the edited arguments.")] = None
    answer: Annotated[str | None, msgspec.Meta(
        description="answered: the result a person gave instead of running the tool.")] = None
    granted_by: Annotated[str | None, msgspec.Meta(
        description="Set when nobody was asked: the id of the approval whose approve-always "
                    "decision (scope run) covered this call; decided_by is who made it.")] = None


class ApprovalEscalated(EventData, frozen=True):
    """Nobody decided before the expiry and the tool's policy says ``onExpiry: escalate``: the
    approval now waits for ``approvers`` (agent.yaml's ``escalateTo``) until ``expires_at``,
    and the session's channel was told. Recorded by the worker that found it due."""

    stream = "task"
    approval_id: str
    call_id: str
    approvers: tuple[str, ...]
    expires_at: Annotated[str | None, msgspec.Meta(extra_json_schema={"format": "date-time"})]
    epoch: Epoch


# -- questions: the agent asks a person (ask_user; docs/guides/asking-the-user.md) --------------

QuestionOutcome = Literal["answered", "expired", "cancelled"]


class QuestionAsked(EventData, frozen=True):
    """The model called ``ask_user``: the question is kept (in the questions table, under
    ``question_id``) and the task parks as ``awaiting_input`` until it is answered. Recorded
    after the call's ``ToolCallStarted``; a resumed task finds it and never asks again."""

    stream = "task"
    step: Step
    question_id: Annotated[str, msgspec.Meta(
        description="The question's id (a UUID derived from the call's idempotency key): "
                    "what `toren jobs answer RUN ID` and POST "
                    "/runs/{id}/questions/{qid}/answer take.")]
    call_id: str
    question: str
    epoch: Epoch
    choices: Annotated[tuple[str, ...], msgspec.Meta(
        description="The answers the question allows; absent: any text.")] = ()
    expires_after_s: Annotated[Annotated[float, msgspec.Meta(gt=0)] | None, msgspec.Meta(
        description="Seconds after which the question expires (the model is told nobody "
                    "answered); absent: it waits until answered.")] = None


class QuestionAnswered(EventData, frozen=True):
    """The question was answered (the first answer wins, in the questions table), or it
    expired, or its run was cancelled. The worker that takes the task up again copies the
    outcome here (under its lease); the call's ``ToolCallCompleted``, with the answer as its
    output, follows in the same append."""

    stream = "task"
    question_id: str
    call_id: str
    outcome: QuestionOutcome
    answered_by: Annotated[str, msgspec.Meta(
        description="The API key's name, cli:<os user>, the channel's user, or toren "
                    "(expiry).")]
    answered_at: Annotated[str, msgspec.Meta(extra_json_schema={"format": "date-time"})]
    epoch: Epoch
    answer: str | None = None


# -- memory: what the agent keeps beyond a session (memory:; docs/guides/memory.md) ------------

class MemoryLoaded(EventData, frozen=True):
    """A task of an agent with ``memory:`` started: the run's subject (whom its ``user``
    memories are about) and the pinned memories added to its system prompt, as they were
    then. Every later model call of the task reads the same block, so a replayed task sends
    the prompt it sent before; memory written meanwhile is read through ``recall``."""

    stream = "task"
    epoch: Epoch
    subject: Annotated[str | None, msgspec.Meta(
        description="The run's subject (a channel identity such as telegram:12345, or the "
                    "subject given when the run or session was started); absent: none, and "
                    "the agent has no user memories in this run.")] = None
    pinned: Annotated[str, msgspec.Meta(
        description="The block of pinned memories added to the system prompt; absent: "
                    "none.")] = ""
    memory_ids: Annotated[tuple[str, ...], msgspec.Meta(
        description="The ids of the pinned memories in the block.")] = ()


# -- tool waits: a tool waits for a signal (toren.wait_for_signal; docs/guides/signals.md) --------

class ToolWaitStarted(EventData, frozen=True):
    """A running tool called ``await toren.wait_for_signal(name, timeout=...)`` (its ``wait``-th
    wait in this call) and no signal it may take had been recorded: the task parks (run status
    ``waiting``; no lease, message or connection held) until a signal of that name numbered
    above ``after`` is sent or the deadline passes. Sending the signal queues the task's message
    in the transaction that records it."""

    stream = "task"
    step: Step
    call_id: str
    wait: Annotated[int, msgspec.Meta(ge=1, description=(
        "Which wait of the tool call this is (1: its first wait_for_signal)."))]
    name: SignalName
    after: Annotated[Count, msgspec.Meta(description=(
        "The run's last signal number when the wait began: the wait takes the first signal of "
        "its name numbered above it (one sent earlier is not what it waits for)."))]
    epoch: Epoch
    timeout_s: Annotated[Annotated[float, msgspec.Meta(ge=0)] | None, msgspec.Meta(
        description="The wait's timeout in seconds; absent: it waits until a signal comes.")] = None
    deadline: Annotated[str | None, msgspec.Meta(
        description="When the wait times out (ISO 8601); absent without a timeout.",
        extra_json_schema={"format": "date-time"})] = None


class ToolWaitEnded(EventData, frozen=True):
    """Wait ``wait`` of the tool call ended: it took signal ``signal`` (its number on the run's
    signals stream, with its ``payload``) or timed out. The tool then runs again from the top,
    and this wait_for_signal returns ``payload`` (or raises ``SignalTimeout``) at once."""

    stream = "task"
    call_id: str
    wait: Annotated[int, msgspec.Meta(ge=1)]
    name: SignalName
    epoch: Epoch
    signal: Annotated[Step | None, msgspec.Meta(
        description="The number of the signal taken; absent when it timed out.")] = None
    payload: AnyJson = None
    timed_out: bool = False


# -- schedules (schedules: in agent.yaml) ------------------------------------------------------

class ScheduleFired(EventData, frozen=True):
    """A schedule started this run: written right after RunCreated, in the transaction that
    claimed the slot (one run per agent, schedule and slot)."""

    stream = "run"
    schedule: Annotated[str, msgspec.Meta(description="The schedule's name in agent.yaml.")]
    slot: Annotated[str, msgspec.Meta(
        description="The slot fired, ISO 8601 in UTC (for a manual trigger: when it was "
                    "triggered).")]
    trigger: Annotated[Literal["cron", "catchup", "manual"], msgspec.Meta(
        description="cron: the slot came due; catchup: a slot missed while no worker ran, "
                    "fired under missed: catchup; manual: toren schedules trigger.")]
    timezone: Annotated[str, msgspec.Meta(
        description="The IANA time zone the cron expression is read in.")]


# -- hard budgets and model fallbacks (issue 16) -----------------------------------------------

BudgetScopeName = Annotated[Literal["run", "daily"], msgspec.Meta(
    description="run: limits.maxBudgetUsd over all tasks of the run; daily: "
                "limits.dailyBudgetUsd over all runs of the agent in the UTC day.")]
ReservationId = Annotated[int, msgspec.Meta(
    ge=1, description="The reservation's id in the budget ledger.")]


class BudgetSpendInfo(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One budgeted scope as the ledger saw it: committed spend (settled, held and expired
    reservations) against the budget."""

    scope: BudgetScopeName
    spent_usd: float
    budget_usd: float
    remaining_usd: float


class BudgetReserved(EventData, frozen=True):
    """The ledger reserved the worst-case cost of the model call about to be made (appended
    with its ModelCallStarted). The reservation holds against the run's and the day's budget
    until it is settled, or reconciled once the task's lease is gone."""

    stream = "task"
    step: Step
    model: str
    reservation_id: ReservationId
    reserved_usd: float
    spend: tuple[BudgetSpendInfo, ...]
    epoch: Epoch
    purpose: Purpose = None


class BudgetSettled(EventData, frozen=True):
    """A reservation was replaced by the call's actual cost (settled_usd), or released
    (settled_usd null: the provider answered with an error, so the call was not billed)."""

    stream = "task"
    step: Step
    reservation_id: ReservationId
    reserved_usd: float
    settled_usd: float | None
    epoch: Epoch
    purpose: Purpose = None


class BudgetWarning(EventData, frozen=True):
    """A reservation took a budget past 80%: recorded once per run (scope run) and once per
    agent and UTC day (scope daily, on the task whose reservation crossed it)."""

    stream = "task"
    scope: BudgetScopeName
    spent_usd: float
    budget_usd: float
    epoch: Epoch


FallbackReason = Annotated[str, msgspec.Meta(
    description="The provider error's kind: overloaded, model_not_found, "
                "context_window_exceeded, rate_limited, server_error, timeout, connection, "
                "auth, quota, invalid_request, or retries_exhausted.")]


class ModelFellBack(EventData, frozen=True):
    """The task's model failed and the next model of fallbacks: takes over, for this call and
    the rest of the task (a resume reads it from the log and does not try the failed model
    again)."""

    stream = "task"
    step: Step
    from_model: str
    to_model: str
    reason: FallbackReason
    error: ErrorInfo
    epoch: Epoch


# -- cross-agent calls and background runs (docs/guides/cross-agent-calls.md,
# -- docs/guides/background-runs.md) ----------------------------------------------------------

ChildRunId = Annotated[str, msgspec.Meta(description="The id of the run that was started.")]


class PeerCallStarted(EventData, frozen=True):
    """An ``ask_<peer>`` tool call created a run of the peer agent (or found the one its
    idempotency key already made); the task waits for it without holding a worker."""

    stream = "task"
    step: Step
    call_id: str
    peer: str
    run_id: ChildRunId
    depth: Annotated[int, msgspec.Meta(ge=1, description="The peer run's call depth.")]
    epoch: Epoch


class PeerCallFinished(EventData, frozen=True):
    """The peer run ended; recorded with the ``ToolCallCompleted`` that gives the caller its
    answer. ``cost_usd`` is the peer run's own cost (its receipt has the details)."""

    stream = "task"
    step: Step
    call_id: str
    peer: str
    run_id: ChildRunId
    status: TaskStatus
    cost_usd: Annotated[float, msgspec.Meta(ge=0)]
    epoch: Epoch


class BackgroundRunStarted(EventData, frozen=True):
    """A session's ``start_background_run`` tool call started a run of an agent; the session
    goes on at once and is told when it ends (``BackgroundRunFinished``)."""

    stream = "task"
    step: Step
    call_id: str
    agent: str
    run_id: ChildRunId
    epoch: Epoch


class BackgroundRunFinished(EventData, frozen=True):
    """A background run the session started ended: posted into the transcript (and the
    conversation the model sees) once, between turns."""

    stream = "task"
    agent: str
    run_id: ChildRunId
    status: TaskStatus
    output: str | None
    error: ErrorInfo | None
    cost_usd: Annotated[float, msgspec.Meta(ge=0)]
    epoch: Epoch


# -- fork and replay (issue 26 part 1: docs/guides/fork-and-replay.md) --------------------------

ForkUnit = Annotated[Literal["step", "wave"], msgspec.Meta(
    description="step: a single-task run forked after its first at_step model calls; wave: a "
                "workflow run forked after its first at_step waves.")]
SourceRunId = Annotated[str, msgspec.Meta(description="The run the events were copied from.")]
ForkModel = Annotated[str | None, msgspec.Meta(
    description="The model the fork's live steps call instead of the agent's; absent: the "
                "agent's (or the source fork's).")]
ForkPrompt = Annotated[str | None, msgspec.Meta(
    description="The SHA-256 of the system prompt the fork's live steps use instead of the "
                "agent's (kept by the store like every prompt); absent: the agent's.")]


class RunForked(EventData, frozen=True):
    """This run is a fork: written right after its ``RunCreated``, in the transaction that
    created it and copied the source run's log up to ``at_step``. The copied events were
    recorded by the source run: no model call or tool call was made again for them."""

    stream = "run"
    source_run_id: SourceRunId
    at_step: Count
    unit: ForkUnit
    copied_events: Annotated[int, msgspec.Meta(
        ge=0, description="Events copied from the source run, over all streams.")]
    model: ForkModel = None
    prompt_sha256: ForkPrompt = None


class TaskForked(EventData, frozen=True):
    """On a fork's task stream: the events before this one were copied from the source run's
    task (free: no model call was made for them, and the receipt shows them as copied at zero
    cost); the task goes on live from here, with the fork's model and prompt. A task a
    workflow fork starts afresh begins with it when the fork changes the model or prompt."""

    stream = "task"
    source_run_id: SourceRunId
    at_step: Count
    copied_events: Count
    source_task_id: Annotated[str | None, msgspec.Meta(
        description="The task copied; absent for a task the fork started afresh.")] = None
    model: ForkModel = None
    prompt_sha256: ForkPrompt = None

# -- policy hooks (issue 39 part 5) ------------------------------------------------------------

PolicyHook = Literal["before_tool_call", "after_model_response", "after_tool_call"]


class PolicyVerdict(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
                    forbid_unknown_fields=True):
    """One policy plugin's answer in a ``PolicyDecided``, in the order it was asked."""

    plugin: Annotated[str, msgspec.Meta(description="The plugin (entry-point name).")]
    decision: Annotated[str, msgspec.Meta(
        description="allow, deny, require_approval, rewrite, keep, redact, block, or skipped "
                    "(the plugin has no such hook).")]
    reason: str | None = None
    failed: Annotated[bool, msgspec.Meta(
        description="true when the hook raised or answered with the wrong type: the kernel "
                    "decided for it, closed (deny, block, withheld).")] = False


class PolicyDecided(EventData, frozen=True):
    """What the agent's policy plugins (``policies:``) decided about a model response, a tool
    call before it starts, or a tool result before it is recorded. Appended with the effect
    it decides (the call's start, its refusal or approval request, the redacted result), so
    a resumed task replays the decision and never asks a hook again for a recorded step."""

    stream = "task"
    step: Step
    hook: Annotated[PolicyHook, msgspec.Meta(description="The hook that was asked.")]
    decision: Annotated[str, msgspec.Meta(
        description="What the policies decided together: allow, deny, require_approval or "
                    "rewrite (before_tool_call); keep, redact or block (after_model_response); "
                    "keep or redact (after_tool_call).")]
    verdicts: tuple[PolicyVerdict, ...]
    digest_before: Annotated[str, msgspec.Meta(
        description="sha256: of the arguments (before_tool_call) or text the hooks saw.")]
    digest_after: Annotated[str, msgspec.Meta(
        description="sha256: of the arguments or text after them (equal when unchanged).")]
    epoch: Epoch
    plugin: Annotated[str | None, msgspec.Meta(
        description="The plugin whose answer decided (absent when none objected).")] = None
    reason: str | None = None
    call_id: Annotated[str | None, msgspec.Meta(
        description="The tool call (before_tool_call, after_tool_call).")] = None
    name: Annotated[str | None, msgspec.Meta(description="The tool's name.")] = None
    text: Annotated[str | None, msgspec.Meta(
        description="after_model_response redact: the text later model calls, the task's "
                    "output and the transcript read instead of the recorded response's.")
    ] = None

# -- agent versions (issue 26 part 2) ----------------------------------------------------------

AgentVersionHash = Annotated[str, msgspec.Meta(
    pattern="^[0-9a-f]{64}$",
    description="The agent version: SHA-256 over the definition files (agent.yaml, the "
                "prompt, tools.py, workflow.py, subagents/*.md), kept in the database.")]
HumanVersion = Annotated[str | None, msgspec.Meta(
    description="The version: string of agent.yaml, if it has one.")]


class AgentVersionPinned(EventData, frozen=True):
    """The run is pinned to this version of its agent's definition: written with RunCreated
    by the process that created the run, or by the first worker to take a run whose creator
    could not know the definition (a peer call, a background run). Every worker runs the run
    on this version, loaded from the database, whatever its own directory holds."""

    stream = "run"
    version: AgentVersionHash
    human_version: HumanVersion = None


class AgentVersionUpgraded(EventData, frozen=True):
    """The run was moved to another version of its agent's definition: by ``toren jobs
    upgrade`` (POST /runs/{id}/upgrade) or by ``onChange: upgrade`` in the agent.yaml a
    worker serves. Later steps run on the new version; a workflow replays under its code."""

    stream = "run"
    version: AgentVersionHash
    reason: Annotated[Literal["requested", "on_change"], msgspec.Meta(
        description="requested: toren jobs upgrade / POST /runs/{id}/upgrade; on_change: the "
                    "onChange: upgrade policy of the definition the worker serves.")]
    human_version: HumanVersion = None
    from_version: Annotated[str | None, msgspec.Meta(
        description="The version the run was on (absent for a run that had none).")] = None
    requested_by: Annotated[str | None, msgspec.Meta(
        description="Who asked for it (an API key's name, cli:<os user>, a worker id).")
    ] = None



class TaskPromptChanged(EventData, frozen=True):
    """A task continued with another system prompt than it started with, because its run was
    moved to another version of its agent (``AgentVersionUpgraded``): the steps after it are
    made with this prompt, kept (like TaskStarted's) under ``prompt_sha256``."""

    stream = "task"
    prompt_sha256: Annotated[str, msgspec.Meta(
        description="SHA-256 of the prompt the task continues with (its text is kept).")]
    version: AgentVersionHash
    epoch: Epoch
    human_version: HumanVersion = None


#: Every event class but ``TaskCheckpoint`` (which is the task state itself: ``toren.core.fold``).
EVENT_CLASSES: tuple[type[EventData], ...] = (
    RunCreated, TaskScheduled, TaskAbsorbed, RunFinished, RunCancelled, RunDeadLettered,
    WaveStarted, ValueRecorded, TimerStarted, TimerFired, WorkflowLogged,
    SignalWaitStarted, SignalConsumed, SignalWaitTimedOut, SignalsRead, SignalReceived,
    TaskStarted, ModelCallStarted, ModelCallCompleted, ToolCallStarted, ToolCallCompleted,
    RetryScheduled, TaskFinished, OutputRejected, Compacted, UserMessage, TurnEnded, CloseRequested,
    ApprovalRequested, ApprovalDecided, ApprovalEscalated,
    QuestionAsked, QuestionAnswered, MemoryLoaded, ToolWaitStarted, ToolWaitEnded,
    ScheduleFired,
    BudgetReserved, BudgetSettled, BudgetWarning, ModelFellBack,
    PeerCallStarted, PeerCallFinished, BackgroundRunStarted, BackgroundRunFinished,
    RunForked, TaskForked,
    AgentVersionPinned, AgentVersionUpgraded, TaskPromptChanged,
    PolicyDecided,
)

# The type names, for readers of stored events (receipts, the CLI, the API) that look at
# ``Event.type`` without decoding the payload.
RUN_CREATED = RunCreated.__name__
TASK_SCHEDULED = TaskScheduled.__name__
TASK_ABSORBED = TaskAbsorbed.__name__
RUN_FINISHED = RunFinished.__name__
RUN_CANCELLED = RunCancelled.__name__
RUN_DEAD_LETTERED = RunDeadLettered.__name__
WAVE_STARTED = WaveStarted.__name__
VALUE_RECORDED = ValueRecorded.__name__
TIMER_STARTED = TimerStarted.__name__
TIMER_FIRED = TimerFired.__name__
WORKFLOW_LOGGED = WorkflowLogged.__name__
SIGNAL_WAIT_STARTED = SignalWaitStarted.__name__
SIGNAL_CONSUMED = SignalConsumed.__name__
SIGNAL_WAIT_TIMED_OUT = SignalWaitTimedOut.__name__
SIGNALS_READ = SignalsRead.__name__
SIGNAL_RECEIVED = SignalReceived.__name__
TASK_STARTED = TaskStarted.__name__
MODEL_CALL_STARTED = ModelCallStarted.__name__
MODEL_CALL_COMPLETED = ModelCallCompleted.__name__
TOOL_CALL_STARTED = ToolCallStarted.__name__
TOOL_CALL_COMPLETED = ToolCallCompleted.__name__
RETRY_SCHEDULED = RetryScheduled.__name__
TASK_FINISHED = TaskFinished.__name__
OUTPUT_REJECTED = OutputRejected.__name__
COMPACTED = Compacted.__name__
USER_MESSAGE = UserMessage.__name__
TURN_ENDED = TurnEnded.__name__
CLOSE_REQUESTED = CloseRequested.__name__
APPROVAL_REQUESTED = ApprovalRequested.__name__
APPROVAL_DECIDED = ApprovalDecided.__name__
APPROVAL_ESCALATED = ApprovalEscalated.__name__
QUESTION_ASKED = QuestionAsked.__name__
QUESTION_ANSWERED = QuestionAnswered.__name__
MEMORY_LOADED = MemoryLoaded.__name__
TOOL_WAIT_STARTED = ToolWaitStarted.__name__
TOOL_WAIT_ENDED = ToolWaitEnded.__name__
SCHEDULE_FIRED = ScheduleFired.__name__
BUDGET_RESERVED = BudgetReserved.__name__
BUDGET_SETTLED = BudgetSettled.__name__
BUDGET_WARNING = BudgetWarning.__name__
MODEL_FELL_BACK = ModelFellBack.__name__
PEER_CALL_STARTED = PeerCallStarted.__name__
PEER_CALL_FINISHED = PeerCallFinished.__name__
BACKGROUND_RUN_STARTED = BackgroundRunStarted.__name__
BACKGROUND_RUN_FINISHED = BackgroundRunFinished.__name__
RUN_FORKED = RunForked.__name__
TASK_FORKED = TaskForked.__name__
AGENT_VERSION_PINNED = AgentVersionPinned.__name__
AGENT_VERSION_UPGRADED = AgentVersionUpgraded.__name__
TASK_PROMPT_CHANGED = TaskPromptChanged.__name__
POLICY_DECIDED = PolicyDecided.__name__
#: The folded state of a task so far, written every ``TOREN_CHECKPOINT_EVERY`` events so that a
#: resume reads only the log from the latest checkpoint on (``toren.core.fold.TaskCheckpoint``).
TASK_CHECKPOINT = "TaskCheckpoint"


@dataclass(frozen=True)
class NewEvent:
    """An event about to be appended, as the store writes it (its sequence number is assigned
    by the append). Make one from a typed event with ``NewEvent.of``."""

    type: str
    data: dict[str, Any]

    @classmethod
    def of(cls, event: msgspec.Struct) -> NewEvent:
        """The stored form of a typed event (fields at their default are left out)."""
        return cls(type(event).__name__, msgspec.to_builtins(event))

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "data": self.data}


@dataclass(frozen=True)
class Event:
    """An event read back from the log (``toren.core.catalog.decode`` types its ``data``)."""

    run_id: str
    stream: str
    seq: int
    type: str
    data: dict[str, Any]
    created_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "stream": self.stream, "seq": self.seq, "type": self.type,
                "data": self.data,
                "created_at": self.created_at.isoformat() if self.created_at else None}
