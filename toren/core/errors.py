"""Typed errors: every user-facing failure is a TorenError with a message a user can act on."""

from __future__ import annotations


class TorenError(Exception):
    """Toren failed."""

    #: Short machine-readable code, used by the CLI's --json output and the HTTP error body.
    code = "toren_error"
    #: The HTTP status the API answers with (``None``: 503 if retryable, else 400).
    http_status: int | None = None
    #: Whether retrying the same operation later may succeed (network blips, 5xx, timeouts).
    retryable = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.code).strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class ConfigError(TorenError):
    """The configuration is invalid."""

    code = "config_error"


class AgentDefinitionError(ConfigError):
    """An agent directory is invalid."""

    code = "agent_definition_error"

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        self.line = line


class MissingEnvError(ConfigError):
    """Environment variables that agents require are not set."""

    code = "missing_env"


class DriverNotFound(ConfigError):
    """No installed distribution provides the configured driver."""

    code = "driver_not_found"


class PluginError(TorenError):
    """A plugin could not be loaded or registered something invalid."""

    code = "plugin_error"


class PluginUnavailable(PluginError):
    """An installed plugin cannot work on this machine, so it registered nothing.

    Raised by a plugin's hook (e.g. toren-sandbox's ``register_tools`` where bubblewrap is
    missing) with ``names``, the tools (or tool groups) it would have registered: Toren loads
    without them, logs the message, and an agent that enables one of them fails to load with it.
    """

    code = "plugin_unavailable"

    def __init__(self, message: str | None = None, *, names: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.names = names


class PluginNotInstalled(PluginError):
    """A command that a separately installed plugin provides was asked for without it
    (``toren mcp`` without toren-mcp); the message names the distribution to install."""

    code = "plugin_not_installed"


class DatabaseUnavailable(TorenError):
    """The database cannot be reached."""

    code = "database_unavailable"
    retryable = True


class NoDatabase(TorenError):
    """There is no database to read: a command that only works on existing records (``toren
    jobs list``, ``toren approvals list``, ...) found none where the settings point, and
    creates none. The message says where it looked and how to point it elsewhere."""

    code = "no_database"
    http_status = 503


class DatabaseTlsError(DatabaseUnavailable):
    """The database's TLS certificate was refused: it is not signed by the CA given in
    ``sslrootcert``, or does not hold the host name connected to (``sslmode=verify-full``)."""

    code = "database_tls_error"
    #: A configuration problem: retrying the same connection cannot succeed. Still the
    #: server's problem, not the client's, when an API request meets it.
    retryable = False
    http_status = 503


class MigrationError(TorenError):
    """A database migration failed."""

    code = "migration_error"


class ProviderError(TorenError):
    """A model provider call failed.

    Provider plugins raise it at their boundary (``raise ProviderError(...) from exc``):
    ``retryable`` for 429, 5xx, timeouts and connection errors (the task backs off, at least
    ``retry_after_s`` when the provider said so), permanent for 400/401/403 and the like.
    """

    code = "provider_error"
    #: The kind of failure when the provider does not say (see ``reason``).
    default_reason = "provider_error"

    def __init__(self, message: str | None = None, *, retryable: bool = False,
                 retry_after_s: float | None = None, status: int | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.status = status
        #: What kind of failure, classified by the provider from the SDK's exception:
        #: ``overloaded``, ``model_not_found``, ``context_window_exceeded``, ``rate_limited``,
        #: ``server_error``, ``timeout``, ``connection``, ``auth``, ``quota``,
        #: ``invalid_request``. The task loop falls back to the agent's ``fallbacks:`` on it
        #: (``overloaded`` at once, other retryable kinds once retries are exhausted).
        self.reason = reason or self.default_reason


class ContextWindowExceeded(ProviderError):
    """The request does not fit the model's context window.

    The task loop compacts the conversation and retries the call once.
    """

    code = "context_window_exceeded"
    default_reason = "context_window_exceeded"


class ToolError(TorenError):
    """A tool failed or was called incorrectly."""

    code = "tool_error"


class CallRefused(ToolError):
    """A cross-agent call or background run was refused: consent is missing on one side, the
    agent is unknown, or the chain of calls is too deep. The model gets it as the tool's error
    result; nothing was started."""

    code = "call_refused"


class ChannelError(TorenError):
    """A channel (CLI, HTTP, chat integrations) failed.

    Chat channels raise it at their platform boundary: ``retryable`` for 429, 5xx, timeouts
    and connection errors (the channel backs off, at least ``retry_after_s`` when the platform
    said so), permanent for a refused token, an unknown chat and the like.
    """

    code = "channel_error"

    def __init__(self, message: str | None = None, *, retryable: bool = False,
                 retry_after_s: float | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.status = status


class PairingNotFound(TorenError):
    """No chat-channel pairing has this code."""

    code = "pairing_not_found"
    http_status = 404


class NonDeterminismError(TorenError):
    """Workflow code diverged from what its run recorded."""

    code = "non_determinism"


class LeaseLost(TorenError):
    """This worker no longer holds the stream's lease (another worker took over)."""

    code = "lease_lost"


class LeaseFenced(LeaseLost):
    """This worker's lease was granted by another database server: the primary before a
    failover (or before a restart), whose log may have held more than this one's. What the
    worker holds in memory may be ahead of this log, so it must not append; the work resumes
    from this server's log (its message is handed back at once)."""

    code = "lease_fenced"


class RunCancelled(TorenError):
    """The run was cancelled."""

    code = "run_cancelled"


class UnstorableValue(TorenError):
    """A run's input or a message holds what the run log cannot store (NUL, an unpaired
    surrogate, a number beyond 64 bits)."""

    code = "unstorable_value"


class RunNotFound(TorenError):
    """No such run."""

    code = "run_not_found"
    http_status = 404


class SessionNotFound(RunNotFound):
    """No such session."""

    code = "session_not_found"


class SessionBusy(TorenError):
    """The session's agent is taking its turn; wait until the session is ``awaiting_input``."""

    code = "session_busy"
    http_status = 409


class SessionEnded(TorenError):
    """The session has ended (closed, failed or cancelled) and takes no more messages."""

    code = "session_ended"
    http_status = 409


class ApprovalNotFound(TorenError):
    """No such approval."""

    code = "approval_not_found"
    http_status = 404


class ApprovalAlreadyDecided(TorenError):
    """The approval was decided before (or expired, or its run ended): it is decided once.
    ``approval`` holds it as it is, with the first decision."""

    code = "approval_decided"
    http_status = 409

    def __init__(self, message: str | None = None, approval: dict[str, object] | None = None
                 ) -> None:
        super().__init__(message)
        self.approval = approval or {}


class ApprovalStale(TorenError):
    """The decision names a digest of arguments other than the approval's: whoever decided
    saw other arguments. ``digest`` is the current one; read the approval again and decide
    on what it shows."""

    code = "approval_stale"
    http_status = 409

    def __init__(self, message: str | None = None, digest: str | None = None,
                 approval: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.digest = digest
        self.approval = approval or {}


class InvalidApprovalArguments(TorenError):
    """The edited arguments do not match the tool's JSON Schema. ``field`` names where (a
    dotted path; ``arguments`` for the whole object)."""

    code = "invalid_arguments"
    http_status = 422

    def __init__(self, message: str | None = None, field: str = "arguments") -> None:
        super().__init__(message)
        self.field = field


class NotAnApprover(TorenError):
    """Whoever asked may not decide this approval (agent.yaml's ``approvals.TOOL.approvers``)."""

    code = "not_an_approver"
    http_status = 403
class ScheduleNotFound(TorenError):
    """No such schedule."""

    code = "schedule_not_found"
    http_status = 404


class ScheduleRemoved(TorenError):
    """The schedule is no longer in its agent.yaml."""

    code = "schedule_removed"
    http_status = 409


# -- fork and replay (docs/guides/fork-and-replay.md) -------------------------------------------

class ForkRefused(TorenError):
    """The run cannot be forked there: it is a session, or the step asked for is not complete
    in its log yet."""

    code = "fork_refused"
    http_status = 409


class InvalidForkStep(TorenError):
    """The step to fork at is not one the run has (``--at-step`` takes 0 to the run's steps)."""

    code = "invalid_fork_step"
    http_status = 400


class InvalidForkOverride(ConfigError):
    """The model or prompt to fork with cannot be used: a model no provider serves, or an empty
    prompt."""

    code = "invalid_fork_override"
    http_status = 400


# -- agent versions (issue 26 part 2) ----------------------------------------------------------

class RunNotUpgradable(TorenError):
    """The run cannot be upgraded: it has ended, or it is a session between versions."""

    code = "run_not_upgradable"
    http_status = 409


class RunVersionStale(TorenError):
    """A run tick was handed a definition other than the run's version (as read with the
    lease): nothing was appended; the worker resolves the version and ticks again."""

    code = "run_version_stale"


class AgentVersionMissing(TorenError):
    """A run is pinned to a version of its agent that the database does not hold."""

    code = "agent_version_missing"


class AgentNotRegistered(TorenError):
    """No agent of that name has a schema in this database."""

    code = "agent_not_found"
    http_status = 404


# -- retention (docs/guides/retention.md) ---------------------------------------------------


class ArchiveNotConfigured(ConfigError):
    """No archive is configured: set TOREN_ARCHIVE to file:///path/to/dir or
    s3://bucket/prefix."""

    code = "archive_not_configured"
    http_status = 409


class ArchiveUnavailable(TorenError):
    """An archived run's object cannot be read or written (gone, no access, the service down)."""

    code = "archive_unavailable"
    http_status = 503
    retryable = True


class ArchiveMismatch(ArchiveUnavailable):
    """An archived run's object is not what was archived (its digest, size or run differ from
    the archive index's record, or it is damaged): it was changed or replaced since. Nothing
    was read from it or restored."""

    code = "archive_mismatch"
    http_status = 409
    retryable = False


class RestoreConflict(TorenError):
    """An archived run cannot be restored: a run in the hot tables holds what it needs (its
    idempotency key). It stays archived."""

    code = "restore_conflict"
    http_status = 409


class QuestionNotFound(TorenError):
    """No such question (``ask_user``) of the run."""

    code = "question_not_found"
    http_status = 404


class QuestionAlreadyAnswered(TorenError):
    """The question was answered before (or expired, or its run ended): the first answer wins.
    ``question`` holds it as it is, with that first answer."""

    code = "question_answered"
    http_status = 409

    def __init__(self, message: str | None = None, question: dict[str, object] | None = None
                 ) -> None:
        super().__init__(message)
        self.question = question or {}


class InvalidAnswer(TorenError):
    """The answer is not one the question allows (not among its choices, empty, too long)."""

    code = "invalid_answer"
    http_status = 422


class MemoryNotFound(TorenError):
    """No such memory (it was never kept, or it was erased)."""

    code = "memory_not_found"
    http_status = 404


class InvalidMemory(TorenError):
    """A memory, subject or memory filter that cannot be used (empty, too long, a control
    character, an unknown scope); the message says which and what is accepted."""

    code = "invalid_memory"
    http_status = 422


class PolicyRejected(TorenError):
    """A policy plugin refused to start the run (its ``before_run_start`` hook rejected it);
    nothing was created. Change the input or the agent's ``policies:``."""

    code = "policy_rejected"
    http_status = 403


class RunFinishedError(TorenError):
    """The run has finished (completed, stopped, failed or cancelled) and takes no more
    signals; start a new run."""

    code = "run_finished"
    http_status = 409


class SignalTooLarge(TorenError):
    """A signal's payload is larger than a signal may be (``MAX_SIGNAL_BYTES`` of JSON): send a
    reference (a file id, a URL) instead of the data."""

    code = "signal_too_large"
    http_status = 413


class SignalTimeout(TorenError):
    """``ctx.wait_for_signal(name, timeout=...)`` reached its timeout with no signal of that
    name. Raised in the workflow (deterministically: the timeout is recorded in the run's log);
    catch it to go on without the signal, or leave it to fail the run."""

    code = "signal_timeout"

    def __init__(self, message: str | None = None, *, name: str = "",
                 timeout_s: float | None = None) -> None:
        super().__init__(message)
        #: The name of the signal the workflow waited for.
        self.name = name
        #: The timeout that passed, in seconds.
        self.timeout_s = timeout_s


# -- flow control (docs/guides/flow-control.md) -------------------------------------------------


class InvalidFlowControl(TorenError):
    """A run's priority or concurrency key is unusable: a priority outside -100..100 or not a
    whole number, or an input without the field its agent's ``concurrency: key`` names (or
    with a list or an object there)."""

    code = "invalid_flow_control"
    http_status = 400


# -- completion webhooks (docs/guides/webhooks.md) ---------------------------------------------


class InvalidWebhook(ConfigError):
    """A webhook is malformed or not allowed (its URL, events or secret's variable)."""

    code = "invalid_webhook"
    http_status = 400


class WebhookSignatureError(TorenError):
    """A webhook's Toren-Signature header is missing, malformed, too old, or does not match the
    body and the secret (``toren.webhooks.verify``): reject the request."""

    code = "invalid_webhook_signature"
    http_status = 401


# -- evals (docs/guides/evals.md) ---------------------------------------------------------------


class EvalDatasetError(ConfigError):
    """An eval dataset is invalid: the message names the file, the line and the field."""

    code = "eval_dataset_error"
    http_status = 400

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        self.line = line


class EvalNotFound(TorenError):
    """No eval has that id in this database (see ``toren eval list``)."""

    code = "eval_not_found"
    http_status = 404


class EvalVersionNotFound(ConfigError):
    """No kept version of the agent matches the one an eval names (``--version``, or
    ``version`` of ``POST /evals``): see ``toren agents versions NAME``."""

    code = "eval_version_not_found"
    http_status = 404


class InvalidEvalRequest(ConfigError):
    """An eval cannot be started as asked (a model no provider serves, a definition whose
    ``onChange: upgrade`` would move its case runs): the message names the field."""

    code = "invalid_eval_request"
    http_status = 422


class EvalMismatch(ConfigError):
    """The eval cannot go on as asked: the agent definition or dataset given to resume it is
    not the one it was started with."""

    code = "eval_mismatch"
    http_status = 409
