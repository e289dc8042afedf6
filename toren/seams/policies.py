"""Policy hooks: what a policy plugin is asked, what it may decide, and how the kernel asks
the plugins an agent lists under ``policies:`` (``PolicyHooks``).

The hookspecs are in ``toren.seams.hookspecs``; plugins import the types from ``toren.plugin``.
Each hook is asked of the agent's policy plugins in the order ``policies:`` lists them. A hook
that raises, or returns something other than its decision type (or ``None``: no objection),
fails closed: the call is denied, the response blocked, the run rejected, the tool result
withheld, with a reason naming the plugin.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from toren.seams.model import ToolCall

log = logging.getLogger(__name__)

#: The policy hooks (declared in ``toren.seams.hookspecs``), in the order a run meets them.
POLICY_HOOK_NAMES: tuple[str, ...] = ("before_run_start", "before_tool_call",
                                      "after_model_response", "after_tool_call")



#: How long an ``async def`` policy hook may take before it fails closed (a plain function
#: runs on the event loop and cannot be interrupted: keep those quick).
HOOK_TIMEOUT_S = 30.0


def digest(value: Any) -> str:
    """``sha256:<hex>`` of ``value`` as canonical JSON: what a ``PolicyDecided`` records of
    the arguments or text before and after a hook, without copying them."""
    text = value if isinstance(value, str) else json.dumps(
        value, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


# -- what a hook is asked ---------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyRef:
    """One entry of agent.yaml ``policies:``: the plugin (its entry-point name) and the
    settings the agent gives it (handed to each of its hooks as ``settings``)."""

    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "settings": dict(self.settings)}


@dataclass(frozen=True)
class RunStart:
    """What ``before_run_start`` is asked about: a run about to be created, or the next
    message of a session (``session_id`` set, ``input`` the message's text): a session takes
    its input one message at a time, so each is asked before it is taken."""

    agent: str
    input: Any
    idempotency_key: str | None = None
    #: The session the message is for; ``None`` for a run about to be created.
    session_id: str | None = None


@dataclass(frozen=True)
class ProposedToolCall:
    """What ``before_tool_call`` is asked about: a call the model made, its arguments already
    checked against the tool's schema (and rewritten by the policies before this one)."""

    agent: str
    run_id: str
    task_id: str
    step: int
    call_id: str
    name: str
    arguments: Mapping[str, Any]
    idempotency_key: str


@dataclass(frozen=True)
class ModelResponseView:
    """What ``after_model_response`` is asked about: a model's answer, recorded but not yet
    acted on (its tool calls not started, its text not yet the task's output)."""

    agent: str
    run_id: str
    task_id: str
    step: int
    text: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ToolCallResult:
    """What ``after_tool_call`` is asked about: a tool's result before it is recorded (the
    log, the model and the user only ever see what the policies leave of it)."""

    agent: str
    run_id: str
    task_id: str
    step: int
    call_id: str
    name: str
    arguments: Mapping[str, Any]
    output: str
    is_error: bool = False


# -- what a hook decides ----------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCallDecision:
    """``before_tool_call``'s answer. Make one with ``allow()``, ``deny(reason)`` (the model
    reads the reason as the call's result), ``require_approval(reason)`` (a person decides,
    as for a tool under ``approvals:``) or ``rewrite(arguments, reason)`` (the call runs with
    these arguments; the model is told they were changed and why)."""

    action: Literal["allow", "deny", "require_approval", "rewrite"]
    reason: str | None = None
    arguments: Mapping[str, Any] | None = None

    @classmethod
    def allow(cls) -> ToolCallDecision:
        return cls("allow")

    @classmethod
    def deny(cls, reason: str) -> ToolCallDecision:
        return cls("deny", reason)

    @classmethod
    def require_approval(cls, reason: str) -> ToolCallDecision:
        return cls("require_approval", reason)

    @classmethod
    def rewrite(cls, arguments: Mapping[str, Any], reason: str) -> ToolCallDecision:
        return cls("rewrite", reason, dict(arguments))


@dataclass(frozen=True)
class ResponseDecision:
    """``after_model_response``'s answer: ``keep()``, ``redact(text, reason)`` (later model
    calls, the task's output and the transcript read ``text`` instead; the log keeps the
    original for audit) or ``block(reason)`` (nothing of the response is acted on: the task
    ends with the error ``policy_blocked``)."""

    action: Literal["keep", "redact", "block"]
    reason: str | None = None
    text: str | None = None

    @classmethod
    def keep(cls) -> ResponseDecision:
        return cls("keep")

    @classmethod
    def redact(cls, text: str, reason: str | None = None) -> ResponseDecision:
        return cls("redact", reason, text)

    @classmethod
    def block(cls, reason: str) -> ResponseDecision:
        return cls("block", reason)


@dataclass(frozen=True)
class RunStartDecision:
    """``before_run_start``'s answer: ``allow()`` or ``reject(reason)`` (the run is refused
    with ``PolicyRejected``, HTTP 403, carrying the reason; nothing is created)."""

    action: Literal["allow", "reject"]
    reason: str | None = None

    @classmethod
    def allow(cls) -> RunStartDecision:
        return cls("allow")

    @classmethod
    def reject(cls, reason: str) -> RunStartDecision:
        return cls("reject", reason)


@dataclass(frozen=True)
class ToolResultDecision:
    """``after_tool_call``'s answer: ``keep()`` or ``redact(text, reason)`` (the result is
    recorded, and shown to the model, as ``text``)."""

    action: Literal["keep", "redact"]
    reason: str | None = None
    text: str | None = None

    @classmethod
    def keep(cls) -> ToolResultDecision:
        return cls("keep")

    @classmethod
    def redact(cls, text: str, reason: str | None = None) -> ToolResultDecision:
        return cls("redact", reason, text)


# -- what the kernel makes of the answers -----------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """One plugin's answer to one hook, as recorded (``failed``: it raised or answered with
    the wrong type, and the kernel decided for it, closed)."""

    plugin: str
    action: str
    reason: str | None = None
    failed: bool = False


@dataclass(frozen=True)
class PolicyOutcome:
    """What the agent's policies decided together for one hook: the final ``action``, the
    plugin that decided it (``None`` when none objected), its reason, every plugin's
    ``verdicts`` in the order asked, and the arguments or text after them."""

    action: str
    plugin: str | None
    reason: str | None
    verdicts: tuple[Verdict, ...]
    arguments: Mapping[str, Any] | None = None
    text: str | None = None


#: The action a failed hook is taken to have decided, and its "no objection" action.
_CLOSED = {"before_run_start": "reject", "before_tool_call": "deny",
           "after_model_response": "block", "after_tool_call": "redact"}
_OPEN = {"before_run_start": "allow", "before_tool_call": "allow",
         "after_model_response": "keep", "after_tool_call": "keep"}
_TYPES: dict[str, type[Any]] = {"before_run_start": RunStartDecision,
                           "before_tool_call": ToolCallDecision,
                           "after_model_response": ResponseDecision,
                           "after_tool_call": ToolResultDecision}


def withheld_text(reason: str) -> str:
    """What the model reads instead of a tool result a failed ``after_tool_call`` withheld."""
    return f"Error: the tool's result was withheld: {reason}"


class PolicyHooks:
    """Asks the agent's policy plugins (``policies:``) in order; made once per process by the
    ``PluginHost`` and handed to the task loop (``ExecutionPorts.policies``) and the run
    service. The ``ask_*`` methods combine the plugins' answers (first deny, block or reject
    wins and stops the asking; rewrites and redactions chain; any ``require_approval`` makes
    the call wait for a person unless a later policy denies it)."""

    def __init__(self, hook: Any, *, timeout_s: float = HOOK_TIMEOUT_S) -> None:
        #: pluggy's ``pm.hook`` relay.
        self._hook = hook
        #: How long an ``async`` hook may take before it fails closed.
        self.timeout_s = timeout_s

    def implementers(self) -> dict[str, list[str]]:
        """Plugin name -> the policy hooks it implements."""
        found: dict[str, list[str]] = {}
        for name in POLICY_HOOK_NAMES:
            for impl in getattr(self._hook, name).get_hookimpls():
                found.setdefault(impl.plugin_name, []).append(name)
        return found

    async def _ask(self, hook_name: str, subject_arg: str, subject: Any, plugin: str,
                   settings: Mapping[str, Any]
                   ) -> tuple[Any, Verdict]:
        """One plugin's decision (``None``: it has no such hook), failing closed."""
        impls = {impl.plugin_name: impl for impl in getattr(self._hook, hook_name).get_hookimpls()}
        impl = impls.get(plugin)
        if impl is None:
            if plugin not in self.implementers():
                reason = (f"policy {plugin!r} is not installed (no plugin of that name "
                          "implements a policy hook); install it or remove it from policies:")
                return None, Verdict(plugin, _CLOSED[hook_name], reason, failed=True)
            return None, Verdict(plugin, "skipped")
        arguments = {name: value for name, value in ((subject_arg, subject),
                                                     ("settings", dict(settings)))
                     if name in impl.argnames}
        try:
            answer = impl.function(**arguments)
            if inspect.isawaitable(answer):
                async with asyncio.timeout(self.timeout_s):
                    answer = await answer
        except TimeoutError:
            reason = (f"policy {plugin!r} did not answer {hook_name} within "
                      f"{self.timeout_s:g} s")
            log.warning("%s", reason)
            return None, Verdict(plugin, _CLOSED[hook_name], reason, failed=True)
        except Exception as exc:
            log.exception("policy %s failed in %s", plugin, hook_name)
            reason = f"policy {plugin!r} failed in {hook_name}: {type(exc).__name__}: {exc}"
            return None, Verdict(plugin, _CLOSED[hook_name], reason, failed=True)
        if answer is None:
            return None, Verdict(plugin, _OPEN[hook_name])
        wanted = _TYPES[hook_name]
        if not isinstance(answer, wanted) or not _well_formed(answer):
            reason = (f"policy {plugin!r} answered {hook_name} with {answer!r}, not a "
                      f"toren.plugin.{wanted.__name__} (or None)")
            return None, Verdict(plugin, _CLOSED[hook_name], reason, failed=True)
        decision: Any = answer
        return decision, Verdict(plugin, decision.action, decision.reason)

    async def ask_before_run_start(self, refs: Sequence[PolicyRef],
                                   run: RunStart) -> PolicyOutcome:
        verdicts: list[Verdict] = []
        for ref in refs:
            _answer, verdict = await self._ask("before_run_start", "run", run,
                                               ref.name, ref.settings)
            verdicts.append(verdict)
            if verdict.action == "reject":
                return PolicyOutcome("reject", ref.name, verdict.reason, tuple(verdicts))
        return PolicyOutcome("allow", None, None, tuple(verdicts))

    async def ask_before_tool_call(self, refs: Sequence[PolicyRef],
                                   call: ProposedToolCall) -> PolicyOutcome:
        verdicts: list[Verdict] = []
        arguments: Mapping[str, Any] = call.arguments
        approval: Verdict | None = None
        rewriter: Verdict | None = None
        for ref in refs:
            current = ProposedToolCall(**{**call.__dict__, "arguments": dict(arguments)})
            answer, verdict = await self._ask("before_tool_call", "call", current,
                                              ref.name, ref.settings)
            verdicts.append(verdict)
            if verdict.action == "deny":
                return PolicyOutcome("deny", ref.name, verdict.reason, tuple(verdicts),
                                     arguments=arguments)
            if verdict.action == "require_approval" and approval is None:
                approval = verdict
            if verdict.action == "rewrite":
                arguments = dict(answer.arguments)
                rewriter = rewriter or verdict
        if approval is not None:
            return PolicyOutcome("require_approval", approval.plugin, approval.reason,
                                 tuple(verdicts), arguments=arguments)
        if rewriter is not None and arguments != call.arguments:
            return PolicyOutcome("rewrite", rewriter.plugin, rewriter.reason, tuple(verdicts),
                                 arguments=arguments)
        return PolicyOutcome("allow", None, None, tuple(verdicts), arguments=arguments)

    async def ask_after_model_response(self, refs: Sequence[PolicyRef],
                                       response: ModelResponseView) -> PolicyOutcome:
        return await self._redaction_chain("after_model_response", "response", response,
                                           "text", refs)

    async def ask_after_tool_call(self, refs: Sequence[PolicyRef],
                                  result: ToolCallResult) -> PolicyOutcome:
        return await self._redaction_chain("after_tool_call", "result", result, "output", refs)

    async def _redaction_chain(self, hook_name: str, param: str,
                               view: ModelResponseView | ToolCallResult, field_name: str,
                               refs: Sequence[PolicyRef]) -> PolicyOutcome:
        """Ask ``refs`` in order about ``view``, each seeing the text (``field_name``) the
        earlier ones left: a block ends the asking (a response); a failed hook on a tool's
        result withholds it (nothing of it reaches the log or the model); else the chained
        redactions are the outcome, credited to the first plugin that redacted."""
        verdicts: list[Verdict] = []
        original: str = getattr(view, field_name)
        text = original
        redactor: Verdict | None = None
        for ref in refs:
            changed: dict[str, Any] = {field_name: text}
            current = replace(view, **changed)
            answer, verdict = await self._ask(hook_name, param, current, ref.name,
                                              ref.settings)
            verdicts.append(verdict)
            if verdict.action == "block":
                return PolicyOutcome("block", ref.name, verdict.reason, tuple(verdicts),
                                     text=text)
            if verdict.failed:  # after_tool_call fails closed as a withheld result
                return PolicyOutcome("redact", ref.name, verdict.reason, tuple(verdicts),
                                     text=withheld_text(verdict.reason or ""))
            if verdict.action == "redact":
                text = answer.text
                redactor = redactor or verdict
        if redactor is not None and text != original:
            return PolicyOutcome("redact", redactor.plugin, redactor.reason, tuple(verdicts),
                                 text=text)
        return PolicyOutcome("keep", None, None, tuple(verdicts), text=text)

def _well_formed(answer: Any) -> bool:
    """A decision whose fields fit its action (a reason where one is read, a text or
    arguments where they are used)."""
    action = answer.action
    if action in {"deny", "require_approval", "reject", "block"} and (
            not isinstance(answer.reason, str) or not answer.reason.strip()):
        return False
    if action == "rewrite":
        return isinstance(answer.arguments, Mapping) and isinstance(answer.reason, str)
    if action == "redact":
        return isinstance(answer.text, str)
    return action in {"allow", "keep", "deny", "require_approval", "reject", "block"}


__all__ = [
    "POLICY_HOOK_NAMES",
    "ModelResponseView",
    "PolicyHooks",
    "PolicyOutcome",
    "PolicyRef",
    "ProposedToolCall",
    "ResponseDecision",
    "RunStart",
    "RunStartDecision",
    "ToolCallDecision",
    "ToolCallResult",
    "ToolResultDecision",
    "Verdict",
    "digest",
]
