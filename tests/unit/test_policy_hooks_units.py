"""How the kernel combines policy plugins' answers (``toren.seams.policies.PolicyHooks``),
without a database: order, who wins, chaining, and failing closed."""

from __future__ import annotations

import asyncio
from typing import Any

import pluggy

from toren import hookimpl
from toren.seams import hookspecs
from toren.seams.policies import (
    PolicyHooks,
    PolicyRef,
    ProposedToolCall,
    ToolCallDecision,
    ToolCallResult,
    ToolResultDecision,
)


class Guard:
    """A policy plugin answering ``before_tool_call`` and ``after_tool_call`` as told."""

    def __init__(self, call: Any = None, result: Any = None, delay_s: float = 0.0) -> None:
        self.call, self.result, self.delay_s = call, result, delay_s
        self.asked: list[str] = []

    @hookimpl
    async def before_tool_call(self, call: ProposedToolCall) -> Any:
        self.asked.append(f"call {dict(call.arguments)}")
        await asyncio.sleep(self.delay_s)
        return self.call(call) if callable(self.call) else self.call

    @hookimpl
    def after_tool_call(self, result: ToolCallResult, settings: dict[str, Any]) -> Any:
        self.asked.append(f"result {result.output} {settings}")
        return self.result(result) if callable(self.result) else self.result


def hooks(timeout_s: float = 5.0, **plugins: Guard) -> PolicyHooks:
    pm = pluggy.PluginManager("toren")
    pm.add_hookspecs(hookspecs)
    for name, plugin in plugins.items():
        pm.register(plugin, name=name)
    return PolicyHooks(pm.hook, timeout_s=timeout_s)


CALL = ProposedToolCall("desk", "r", "main", 1, "c1", "pay", {"amount": 500}, "k")
RESULT = ToolCallResult("desk", "r", "main", 1, "c1", "pay", {"amount": 500}, "paid 500")


def refs(*names: str) -> tuple[PolicyRef, ...]:
    return tuple(PolicyRef(name, {"n": name}) for name in names)


async def test_rewrites_chain_and_the_first_deny_wins_and_stops_the_asking() -> None:
    cap = Guard(lambda c: ToolCallDecision.rewrite({"amount": 100}, "capped"))
    halve = Guard(lambda c: ToolCallDecision.rewrite({"amount": c.arguments["amount"] // 2},
                                                     "halved"))
    deny = Guard(ToolCallDecision.deny("no payments today"))
    never = Guard(ToolCallDecision.allow())
    policies = hooks(cap=cap, halve=halve, deny=deny, never=never)
    chained = await policies.ask_before_tool_call(refs("cap", "halve"), CALL)
    assert (chained.action, chained.plugin, chained.reason, dict(chained.arguments or {})) == (
        "rewrite", "cap", "capped", {"amount": 50})
    assert halve.asked == ["call {'amount': 100}"]  # saw the arguments cap left
    denied = await policies.ask_before_tool_call(refs("cap", "deny", "never"), CALL)
    assert (denied.action, denied.plugin, denied.reason) == ("deny", "deny",
                                                             "no payments today")
    assert never.asked == []
    assert [v.plugin for v in denied.verdicts] == ["cap", "deny"]


async def test_an_approval_holds_unless_a_later_policy_denies() -> None:
    ask = Guard(ToolCallDecision.require_approval("big amount"))
    deny = Guard(ToolCallDecision.deny("never"))
    fine = Guard(None)
    policies = hooks(ask=ask, deny=deny, fine=fine)
    assert (await policies.ask_before_tool_call(refs("ask", "fine"), CALL)).action == \
        "require_approval"
    assert (await policies.ask_before_tool_call(refs("ask", "deny"), CALL)).action == "deny"


async def test_failing_hooks_fail_closed_naming_the_plugin() -> None:
    slow = Guard(ToolCallDecision.allow(), delay_s=1.0)
    no_reason = Guard(ToolCallDecision("deny", ""))
    policies = hooks(timeout_s=0.05, slow=slow, no_reason=no_reason)
    timed_out = await policies.ask_before_tool_call(refs("slow"), CALL)
    assert (timed_out.action, timed_out.reason) == (
        "deny", "policy 'slow' did not answer before_tool_call within 0.05 s")
    assert timed_out.verdicts[0].failed
    malformed = await policies.ask_before_tool_call(refs("no_reason"), CALL)
    assert malformed.action == "deny" and "not a toren.plugin.ToolCallDecision" in (
        malformed.reason or "")
    missing = await policies.ask_before_tool_call(refs("gone"), CALL)
    assert missing.action == "deny" and "policy 'gone' is not installed" in (
        missing.reason or "")


async def test_results_redactions_chain_and_a_failure_withholds_the_result() -> None:
    one = Guard(result=lambda r: ToolResultDecision.redact(r.output.replace("500", "[n]")))
    two = Guard(result=lambda r: ToolResultDecision.redact(r.output.upper()))
    broken = Guard(result=lambda r: 1 / 0)
    policies = hooks(one=one, two=two, broken=broken)
    chained = await policies.ask_after_tool_call(refs("one", "two"), RESULT)
    assert (chained.action, chained.plugin, chained.text) == ("redact", "one", "PAID [N]")
    assert one.asked == ["result paid 500 {'n': 'one'}"]  # settings are the agent's for it
    withheld = await policies.ask_after_tool_call(refs("broken", "one"), RESULT)
    assert withheld.text == ("Error: the tool's result was withheld: policy 'broken' failed "
                             "in after_tool_call: ZeroDivisionError: division by zero")
    assert one.asked == ["result paid 500 {'n': 'one'}"]  # not asked after the failure
