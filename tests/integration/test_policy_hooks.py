"""Policy hooks against real Postgres (issue 39 §5): a policy plugin an agent lists denies,
rewrites, sends for approval and redacts tool calls, redacts or blocks model responses and
rejects runs; what it decided is in the log and the receipt; a hook that fails fails closed;
an agent that does not list the plugin is untouched by it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from toren_testplugin import plugin as testplugin

from tests.durable import FAST, check_log, plugin_host, types
from tests.e2e.test_http_api import conforms
from tests.integration.test_approvals import wait_status
from toren.config import Settings
from toren.errors import AgentDefinitionError, ConfigError, PolicyRejected
from toren.host.runtime import Runtime
from toren.seams.model import ModelRequest, ModelResponse, ToolCall
from toren.server.app import create_app
from toren.testing import ScriptedModel, serve_on_free_port, write_agent_dir

TOOLS = '''
import pathlib

EFFECTS = pathlib.Path(__file__).parent / "effects"


def _did(line: str) -> None:
    with EFFECTS.open("a") as handle:
        handle.write(line + "\\n")


def lookup(customer: str) -> str:
    """Look a customer up."""
    _did(f"lookup {customer}")
    return f"{customer}: card 4111 on file, secret word swordfish"


def pay(to: str, amount: int) -> str:
    """Pay someone (irreversible)."""
    _did(f"pay {to} {amount}")
    return f"paid {amount} to {to}"


def wipe(target: str) -> str:
    """Delete everything about the target."""
    _did(f"wipe {target}")
    return "wiped"
'''


def three_calls(request: ModelRequest) -> ModelResponse:
    """One step calls lookup, pay and wipe; then answers with what came back."""
    if not any(m.role == "tool" for m in request.messages):
        return ModelResponse(text="Working on it.", stop_reason="tool_use", tool_calls=(
            ToolCall(id="c1", name="lookup", arguments={"customer": "ann"}),
            ToolCall(id="c2", name="pay", arguments={"to": "ann", "amount": 500}),
            ToolCall(id="c3", name="wipe", arguments={"target": "ann"})))
    return ModelResponse(text="Done: " + " | ".join(
        m.text for m in request.messages if m.role == "tool"))


class Recording(ScriptedModel):
    """A scripted model that keeps every request it was sent (what the model saw)."""

    def __init__(self, script: Callable[[ModelRequest], ModelResponse]) -> None:
        self.requests: list[ModelRequest] = []

        def recorded(request: ModelRequest) -> ModelResponse:
            self.requests.append(request)
            return script(request)

        super().__init__(script=recorded)


def desk(tmp_path: Path, name: str, settings: dict[str, Any] | None, **fields: Any) -> Path:
    policies = [] if settings is None else [{"name": "testplugin", "settings": settings}]
    if policies:
        fields["policies"] = policies
    return write_agent_dir(tmp_path, name, tools_py=TOOLS, model=f"test/{name}", **fields)


Make = Callable[..., Any]


@pytest.fixture
async def policed_runtime(database_url: str, tmp_path: Path) -> AsyncIterator[Make]:
    """``await make(dirs, models)``: a started runtime whose plugins include toren-testplugin
    (its policy hooks), as if installed."""
    started: list[Runtime] = []

    async def make(dirs: list[Path], models: dict[str, Any], **overrides: Any) -> Runtime:
        host = plugin_host(models)
        host.add_plugin(testplugin, "testplugin")
        settings = dataclasses.replace(
            Settings(database_url=database_url, home=tmp_path / "home", load_plugins=()),
            **(FAST | overrides))
        runtime = Runtime(dirs, settings=settings, plugins=host)
        await runtime.start()
        started.append(runtime)
        return runtime

    yield make
    for runtime in reversed(started):
        await runtime.stop()


def effects(directory: Path) -> list[str]:
    path = directory / "effects"
    return path.read_text().splitlines() if path.exists() else []


async def test_calls_are_denied_rewritten_and_results_redacted_before_the_log(
        policed_runtime: Make, tmp_path: Path) -> None:
    count = tmp_path / "count"
    directory = desk(tmp_path, "desk", {
        "deny": {"wipe": "wiping customers is not allowed"},
        "rewrite": {"pay": {"amount": 10}},
        "redact_result": ["swordfish"], "count_file": str(count)})
    model = Recording(three_calls)
    runtime = await policed_runtime([directory], {"desk": model})
    record = await runtime.wait_for_run(await runtime.start_run("desk", "help ann"),
                                        timeout_s=30)
    assert record.status == "completed", record.error
    # the denied call never ran; the rewritten one ran with the policy's arguments
    assert sorted(effects(directory)) == ["lookup ann", "pay ann 10"]
    tool_messages = {m.tool_call_id: m.text for m in model.requests[-1].messages
                     if m.role == "tool"}
    assert tool_messages["c3"] == ("Error: this call was not run: policy testplugin denied it: "
                                   "wiping customers is not allowed")
    assert tool_messages["c2"].startswith(
        "Note: policy testplugin rewrote this call's arguments: capped by testplugin. It ran "
        'with: {"amount": 10, "to": "ann"}')
    assert tool_messages["c2"].endswith("paid 10 to ann")
    assert tool_messages["c1"] == "ann: card 4111 on file, secret word [redacted]"

    events = await runtime.events(record.id)
    check_log(events)
    # the redacted word never reached the log: not in any event, only its digest
    assert "swordfish" not in repr([e.data for e in events])
    task = [e for e in events if e.stream == "task:main"]
    assert types(task) == [
        "TaskStarted", "ModelCallStarted", "ModelCallCompleted",
        "PolicyDecided", "PolicyDecided", "ToolCallStarted", "PolicyDecided", "ToolCallStarted",
        "PolicyDecided", "ToolCallCompleted",
        "PolicyDecided", "ToolCallCompleted", "PolicyDecided", "ToolCallCompleted",
        "ModelCallStarted", "ModelCallCompleted", "PolicyDecided", "TaskFinished"]
    decided = [(e.data["hook"], e.data.get("call_id"), e.data["decision"]) for e in task
               if e.type == "PolicyDecided"]
    assert decided == [("after_model_response", None, "keep"),
                       ("before_tool_call", "c1", "allow"),
                       ("before_tool_call", "c2", "rewrite"),
                       ("before_tool_call", "c3", "deny"),
                       ("after_tool_call", "c1", "redact"),
                       ("after_tool_call", "c2", "keep"),
                       ("after_model_response", None, "keep")]
    started = {e.data["call_id"]: e.data["arguments"] for e in task
               if e.type == "ToolCallStarted"}
    assert started["c2"] == {"to": "ann", "amount": 10}
    rewrite = next(e.data for e in task if e.data.get("call_id") == "c2"
                   and e.type == "PolicyDecided")
    assert rewrite["digest_before"] != rewrite["digest_after"]
    assert rewrite["verdicts"] == [{"plugin": "testplugin", "decision": "rewrite",
                                    "reason": "capped by testplugin"}]

    receipt = await runtime.receipt(record.id)
    policies = receipt["tasks"][0]["policies"]
    assert [(p["hook"], p["decision"], p["plugin"]) for p in policies
            if p["decision"] not in ("allow", "keep")] == [
        ("before_tool_call", "rewrite", "testplugin"), ("before_tool_call", "deny", "testplugin"),
        ("after_tool_call", "redact", "testplugin")]
    assert receipt["totals"]["policy_interventions"] == 3
    # each hook asked once per subject: 2 responses, 3 calls, 2 results that ran
    assert sorted(count.read_text().splitlines()) == sorted([
        "after_model_response 1", "after_model_response 2", "before_tool_call c1",
        "before_tool_call c2", "before_tool_call c3", "after_tool_call c1",
        "after_tool_call c2", "before_run_start desk"])


def answer_with(text: str) -> Callable[[ModelRequest], ModelResponse]:
    return lambda request: ModelResponse(text=text)


async def test_a_response_is_redacted_for_what_follows_or_blocked(policed_runtime: Make,
                                                                 tmp_path: Path) -> None:
    redacting = desk(tmp_path, "redacting", {"redact_response": ["hunter2"]})
    blocking = desk(tmp_path, "blocking", {"block_response": "rm -rf"})
    plain = desk(tmp_path, "plain", None)
    runtime = await policed_runtime([redacting, blocking, plain], {
        "redacting": ScriptedModel(script=answer_with("the password is hunter2")),
        "blocking": ScriptedModel(script=answer_with("run rm -rf / now")),
        "plain": ScriptedModel(script=answer_with("the password is hunter2"))})

    redacted = await runtime.wait_for_run(
        await runtime.start_run("redacting", "what is it?"), timeout_s=30)
    assert redacted.status == "completed" and redacted.output == "the password is [redacted]"
    events = await runtime.events(redacted.id)
    check_log(events)
    # the log keeps the original for audit; the decision carries what later readers see
    completed = next(e for e in events if e.type == "ModelCallCompleted")
    assert completed.data["text"] == "the password is hunter2" and completed.data["policies"]
    decided = next(e for e in events if e.type == "PolicyDecided")
    assert (decided.data["decision"], decided.data["text"]) == (
        "redact", "the password is [redacted]")

    blocked = await runtime.wait_for_run(
        await runtime.start_run("blocking", "clean up"), timeout_s=30)
    assert blocked.status == "failed" and blocked.output is None
    assert blocked.error == {
        "code": "policy_blocked",
        "message": "policy testplugin blocked the model's response: the response mentions "
                   "'rm -rf'"}
    receipt = await runtime.receipt(blocked.id)
    assert "policy testplugin blocked" in receipt["why"]

    # installed but not listed: the plugin is never asked about this agent's runs
    untouched = await runtime.wait_for_run(await runtime.start_run("plain", "x"), timeout_s=30)
    assert untouched.output == "the password is hunter2"
    events = await runtime.events(untouched.id)
    assert "PolicyDecided" not in types(events)
    assert not any(e.data.get("policies") for e in events)


async def test_a_policy_can_send_a_call_to_a_person(policed_runtime: Make,
                                                    tmp_path: Path) -> None:
    directory = desk(tmp_path, "desk", {"approve": ["pay"], "deny": {"wipe": "no"}})
    runtime = await policed_runtime([directory], {"desk": ScriptedModel(script=three_calls)})
    run_id = await runtime.start_run("desk", "help ann")
    await wait_status(runtime, run_id, "awaiting_approval")
    [pending] = await runtime.list_approvals(status="pending")
    assert (pending.tool, pending.arguments) == ("pay", {"to": "ann", "amount": 500})
    events = await runtime.events(run_id)
    request = next(e.data for e in events if e.type == "ApprovalRequested")
    assert request["reason"] == "policy testplugin: pay needs a person"
    assert effects(directory) == ["lookup ann"]
    await runtime.approve(pending.id, decided_by="alice")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    assert sorted(effects(directory)) == ["lookup ann", "pay ann 500"]
    check_log(await runtime.events(run_id))


@pytest.mark.parametrize(("settings", "reason"), [
    ({"raise_in": ["before_tool_call"]},
     "policy 'testplugin' failed in before_tool_call: RuntimeError: testplugin was told to "
     "fail in before_tool_call"),
    ({"answer_wrong_type": True},
     "policy 'testplugin' answered before_tool_call with 'allow', not a "
     "toren.plugin.ToolCallDecision (or None)"),
])
async def test_a_hook_that_fails_denies_the_call(policed_runtime: Make, tmp_path: Path,
                                                 settings: dict[str, Any], reason: str) -> None:
    directory = desk(tmp_path, "desk", settings | {"deny": {"wipe": "no"}})
    model = Recording(three_calls)
    runtime = await policed_runtime([directory], {"desk": model})
    record = await runtime.wait_for_run(await runtime.start_run("desk", "go"), timeout_s=30)
    assert record.status == "completed"
    assert effects(directory) == []  # fail closed: nothing ran
    denials = [m.text for m in model.requests[-1].messages if m.role == "tool"]
    assert denials[:2] == [f"Error: this call was not run: policy testplugin denied it: "
                           f"{reason}"] * 2
    events = await runtime.events(record.id)
    verdict = next(e.data["verdicts"][0] for e in events if e.data.get("call_id") == "c1"
                   and e.type == "PolicyDecided")
    assert verdict["failed"] is True and verdict["decision"] == "deny"


async def test_a_run_start_is_rejected_with_nothing_created(policed_runtime: Make,
                                                            tmp_path: Path) -> None:
    directory = desk(tmp_path, "desk", {"reject_input": "password"})
    runtime = await policed_runtime([directory], {"desk": ScriptedModel(script=three_calls)})
    with pytest.raises(PolicyRejected) as refused:
        await runtime.start_run("desk", {"ask": "tell me the password"}, idempotency_key="k1")
    assert refused.value.http_status == 403 and refused.value.code == "policy_rejected"
    assert refused.value.message == ("policy testplugin rejected the run of desk: the input "
                                     "mentions 'password'")
    assert await runtime.list_runs(agent="desk") == []
    # over HTTP: 403 with the plugin's reason, nothing created; another input starts a run
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/runs", json={"agent": "desk",
                                                      "input": "my password is 1234"}) as answer:
                assert answer.status == 403
                assert await answer.json() == {"error": {
                    "code": "policy_rejected",
                    "message": "policy testplugin rejected the run of desk: the input mentions "
                               "'password'"}}
            assert await runtime.list_runs(agent="desk") == []
            async with http.post(f"{url}/runs", json={"agent": "desk", "input": "hi"}) as answer:
                assert answer.status == 201
            async with http.get(f"{url}/agents/desk") as answer:
                agent = await answer.json()
            conforms("Agent", agent)
            assert agent["policies"] == [{"name": "testplugin",
                                          "settings": {"reject_input": "password"}}]
    finally:
        await runner.cleanup()
    assert len(await runtime.list_runs(agent="desk")) == 1


async def test_a_session_message_is_rejected_before_it_is_taken(policed_runtime: Make,
                                                                tmp_path: Path) -> None:
    directory = desk(tmp_path, "desk", {"reject_input": "password"})
    model = Recording(lambda request: ModelResponse(text="Noted."))
    runtime = await policed_runtime([directory], {"desk": model})
    session = await runtime.start_session("desk")
    with pytest.raises(PolicyRejected) as refused:
        await runtime.send_message(session, "my password is 1234", idempotency_key="m1")
    assert refused.value.message == (f"policy testplugin rejected the message to session "
                                     f"{session} of desk: the input mentions 'password'")
    # nothing taken: the session still waits for input, the model saw nothing
    assert (await runtime.get_session(session))["status"] == "awaiting_input"
    assert model.requests == []
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    try:
        async with aiohttp.ClientSession() as http, http.post(
                f"{url}/sessions/{session}/messages",
                json={"text": "the password again"}) as answer:
            assert answer.status == 403
            assert (await answer.json())["error"]["code"] == "policy_rejected"
    finally:
        await runner.cleanup()
    assert await runtime.send_message(session, "hello") == 1  # another message is taken
    done = await runtime.wait_for_turn(session, timeout_s=30)
    assert done["status"] == "awaiting_input"
    assert [m.text for m in model.requests[0].messages if m.role == "user"] == ["hello"]


def test_a_policy_that_is_not_installed_stops_startup(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "desk", policies=["pii-guard"])
    with pytest.raises(ConfigError, match=r"lists the policy 'pii-guard' under policies:, but "
                                          r"no installed plugin of that name"):
        Runtime([directory], settings=Settings(database_url="postgresql://unused",
                                               home=tmp_path, load_plugins=()),
                plugins=plugin_host())
    twice = write_agent_dir(tmp_path, "twice", policies=["a", {"name": "a"}])
    with pytest.raises(AgentDefinitionError, match="policies: 'a' is listed twice"):
        Runtime([twice], settings=Settings(database_url="postgresql://unused", home=tmp_path,
                                           load_plugins=()), plugins=plugin_host())


SLOW_TOOLS = TOOLS + '''

async def wait_forever(reason: str) -> str:
    """Wait for something that never comes."""
    import asyncio

    await asyncio.sleep(3600)
    return "never"
'''


def lookup_and_wait(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text="Both.", stop_reason="tool_use", tool_calls=(
        ToolCall(id="c1", name="lookup", arguments={"customer": "ann"}),
        ToolCall(id="c2", name="wait_forever", arguments={"reason": "x"})))


async def test_a_cancelled_run_records_finished_results_as_the_policies_leave_them(
        policed_runtime: Make, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "desk", tools_py=SLOW_TOOLS, model="test/desk",
                                policies=[{"name": "testplugin",
                                           "settings": {"redact_result": ["swordfish"]}}])
    runtime = await policed_runtime([directory], {"desk": ScriptedModel(script=lookup_and_wait)})
    run_id = await runtime.start_run("desk", "go")
    for _ in range(600):
        if effects(directory) == ["lookup ann"]:
            break
        await asyncio.sleep(0.05)
    await runtime.cancel_run(run_id)
    for _ in range(600):
        events = await runtime.events(run_id)
        if sum(e.type == "ToolCallCompleted" for e in events) == 2:
            break
        await asyncio.sleep(0.05)
    results = {e.data["call_id"]: e.data for e in events if e.type == "ToolCallCompleted"}
    assert results["c1"]["output"] == "ann: card 4111 on file, secret word [redacted]"
    assert results["c2"]["error_kind"] == "abandoned"
    assert "swordfish" not in repr([e.data for e in events])
    assert [e.data["decision"] for e in events if e.type == "PolicyDecided"
            and e.data["hook"] == "after_tool_call"] == ["redact"]
