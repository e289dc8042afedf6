"""Hostile input on the whatsapp channel: forged, copied and replayed approval buttons, webhook
bodies nested too deep, and what the verification handshake echoes. Signed webhooks on a real
Toren server, the fake Graph API, real Postgres."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from fake_graph import APP_SECRET, FRIEND, VERIFY_TOKEN, FakeGraph
from test_whatsapp_channel import notification, post, text, until
from toren_whatsapp.signature import sign

from toren.core.approvals import ApprovalRecord
from toren.host.chat.buttons import NOT_VALID_TEXT
from toren.host.runtime import Runtime
from toren.testing import write_agent_dir

Agent = Callable[..., Awaitable[tuple[Runtime, str]]]
#: A second allowed number, with a chat (and a session) of its own.
NEIGHBOUR = "15550002222"
TOOLS = '''
def ring_bell(note: str) -> str:
    """Ring the office bell."""
    return "rang: " + note
'''


def reply(message_id: str, sender: str, button_id: str) -> dict[str, Any]:
    """A tap on a reply button whose id is ``button_id`` (what a modified client can send)."""
    return {"from": sender, "id": message_id, "timestamp": "1700000100", "type": "interactive",
            "interactive": {"type": "button_reply",
                            "button_reply": {"id": button_id, "title": "Approve"}}}


async def deliver(http: aiohttp.ClientSession, url: str, *messages: dict[str, Any]) -> None:
    raw = json.dumps(notification(*messages)).encode()
    assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200


def buttons(fake: FakeGraph, to: str) -> tuple[str, str]:
    """The ids of the Approve and Deny reply buttons offered to ``to``."""
    (offer,) = [body for body in fake.sent if body["type"] == "interactive" and body["to"] == to]
    approve, _always, deny = offer["interactive"]["action"]["buttons"]
    return approve["reply"]["id"], deny["reply"]["id"]


def offers(fake: FakeGraph) -> int:
    with fake.lock:
        return len([body for body in fake.sent if body["type"] == "interactive"])


async def pending(runtime: Runtime, agent: str, count: int = 1) -> list[ApprovalRecord]:
    for _ in range(400):
        found = await runtime.list_approvals(agent=agent, status="pending")
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{agent} has no {count} pending approvals")


async def test_only_a_button_shown_in_the_chat_decides_and_only_once(
        whatsapp_agent: Agent, fake_graph: FakeGraph, tmp_path: Path) -> None:
    desk_dir = write_agent_dir(tmp_path, "desk", tools_py=TOOLS, approvals={"ring_bell": {}})
    runtime, url = await whatsapp_agent(tools_py=TOOLS, approvals={"ring_bell": {}},
                                        allow_from=[FRIEND, NEIGHBOUR], also=[desk_dir])
    await runtime.start_run("desk", "ring the desk bell")  # an agent with no chat channel
    (desk,) = await pending(runtime, "desk")
    async with aiohttp.ClientSession() as http:
        await deliver(http, url, text("wamid.h1", FRIEND, "ring it"))
        await deliver(http, url, text("wamid.h2", NEIGHBOUR, "ring mine"))
        await until(lambda: offers(fake_graph) == 2)
        await deliver(http, url, reply("wamid.h3", FRIEND, f"a:{desk.id}"))  # the report
        for _ in range(400):  # until the press is answered, or (before the fix) decides
            status = (await runtime.get_approval(desk.id)).status
            if status != "pending" or NOT_VALID_TEXT in fake_graph.texts(FRIEND):
                break
            await asyncio.sleep(0.05)
        assert status == "pending" and NOT_VALID_TEXT in fake_graph.texts(FRIEND)

        approve, deny = buttons(fake_graph, FRIEND)
        neighbours_approve, _ = buttons(fake_graph, NEIGHBOUR)
        letter, approval_id, mac = approve.split(":")
        hostile = [f"d:{desk.id}", f"a:{approval_id}", neighbours_approve,
                   f"{letter}:{desk.id}:{mac}", f"d:{approval_id}:{mac}",
                   f"a:{approval_id}:{'A' * 22}", approve + "x", "a:" + "9" * 300]
        for index, data in enumerate(hostile):
            await deliver(http, url, reply(f"wamid.x{index}", FRIEND, data))
        await until(lambda: fake_graph.texts(FRIEND).count(NOT_VALID_TEXT) == 1 + len(hostile))
        assert len(await runtime.list_approvals(status="pending")) == 3  # nothing was decided
        assert not any("rang: " in sent for sent in fake_graph.texts())

        await deliver(http, url, reply("wamid.ok", FRIEND, approve))  # the button shown here
        await until(lambda: any("rang: " in sent for sent in fake_graph.texts(FRIEND)))
        await deliver(http, url, reply("wamid.again", FRIEND, approve),
                      reply("wamid.deny", FRIEND, deny))
        await until(lambda: len([sent for sent in fake_graph.texts(FRIEND)
                                 if "already decided" in sent]) == 2)
    assert fake_graph.texts(FRIEND).count("Approved.") == 1
    (mine,) = await runtime.list_approvals(status="approved")
    assert (mine.agent, mine.id, mine.decided_by) == ("bot", approval_id, f"whatsapp:{FRIEND}")
    assert len([sent for sent in fake_graph.texts(FRIEND) if "rang: " in sent]) == 1
    still = {record.agent for record in await runtime.list_approvals(status="pending")}
    assert still == {"bot", "desk"}  # the neighbour's and the desk's


async def test_a_number_the_approvers_do_not_name_decides_nothing(
        whatsapp_agent: Agent, fake_graph: FakeGraph) -> None:
    runtime, url = await whatsapp_agent(
        tools_py=TOOLS, approvals={"ring_bell": {"approvers": ["cli:alice"]}})
    async with aiohttp.ClientSession() as http:
        await deliver(http, url, text("wamid.p1", FRIEND, "ring it"))
        await until(lambda: offers(fake_graph) == 1)
        approve, _deny = buttons(fake_graph, FRIEND)
        await deliver(http, url, reply("wamid.p2", FRIEND, approve))
        await until(lambda: any("may not decide" in sent for sent in fake_graph.texts(FRIEND)))
    (waiting,) = await pending(runtime, "bot")
    assert waiting.status == "pending"


async def test_a_strangers_press_is_not_answered_and_decides_nothing(
        whatsapp_agent: Agent, fake_graph: FakeGraph) -> None:
    runtime, url = await whatsapp_agent(tools_py=TOOLS, approvals={"ring_bell": {}},
                                        pairing=False)
    async with aiohttp.ClientSession() as http:
        await deliver(http, url, text("wamid.s1", FRIEND, "ring it"))
        await until(lambda: offers(fake_graph) == 1)
        approve, _deny = buttons(fake_graph, FRIEND)
        for index in range(3):
            await deliver(http, url, reply(f"wamid.s{index + 2}", "15559990000", approve))
        await deliver(http, url, text("wamid.s9", FRIEND, "and?"))  # handled after the presses
        await asyncio.sleep(1.5)
    assert fake_graph.texts("15559990000") == []  # one refusal per person is for messages
    (waiting,) = await pending(runtime, "bot")
    assert waiting.status == "pending"


def nested(depth: int) -> bytes:
    """A notification whose extra field nests ``depth`` arrays."""
    return (b'{"object": "whatsapp_business_account", "extra": ' + b"[" * depth
            + b"]" * depth + b"}")


async def test_deep_json_on_the_webhook_is_400_and_the_server_keeps_serving(
        whatsapp_agent: Agent, fake_graph: FakeGraph) -> None:
    _runtime, url = await whatsapp_agent()
    async with aiohttp.ClientSession() as http:
        for raw in (b"[" * 5000 + b"]" * 5000, nested(5000), nested(129)):
            async with http.post(url, data=raw, headers={
                    "X-Hub-Signature-256": sign(raw, APP_SECRET)}) as response:
                assert response.status == 400
                error = (await response.json())["error"]
                assert error["code"] == "bad_request"
                assert "nested at most 128 levels" in error["message"]
        raw = nested(127)
        assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200  # within the rule
        await deliver(http, url, text("wamid.d1", FRIEND, "still there?"))
        async with http.get(url.split("/channels/")[0] + "/healthz") as response:
            assert response.status == 200
    await until(lambda: fake_graph.texts(FRIEND))
    assert fake_graph.texts(FRIEND) == ["You said: still there?"]


async def test_the_verification_echo_is_plain_text_not_sniffed_and_bounded(
        whatsapp_agent: Agent) -> None:
    _runtime, url = await whatsapp_agent()
    good = {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN,
            "hub.challenge": "1158201444"}
    async with aiohttp.ClientSession() as http:
        async with http.get(url, params=good) as response:
            assert response.status == 200 and await response.text() == "1158201444"
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert response.content_type == "text/plain"
        for challenge in ("<script>alert(1)</script>", "x" * 201, "", "a b", "1\r\nSet-Cookie"):
            async with http.get(url, params=good | {"hub.challenge": challenge}) as response:
                assert response.status == 400, challenge
                assert "hub.challenge" in (await response.json())["error"]["message"]
