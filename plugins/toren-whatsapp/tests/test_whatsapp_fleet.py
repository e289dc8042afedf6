"""Two Toren servers on one database: a webhook may land on either, one process answers;
approvals come as reply buttons."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import aiohttp
from fake_graph import APP_SECRET, FRIEND, FakeGraph
from test_whatsapp_channel import notification, post, text, until
from toren_whatsapp.signature import sign

from toren.host.runtime import Runtime

Agent = Callable[..., Awaitable[tuple[Runtime, str]]]
TOOLS = '''
def ring_bell(note: str) -> str:
    """Ring the office bell."""
    return "rang: " + note
'''



async def test_a_webhook_on_the_server_without_the_lease_is_answered_once_by_the_holder(
        whatsapp_agent: Agent, fake_graph: FakeGraph) -> None:
    first, first_url = await whatsapp_agent()
    second, second_url = await whatsapp_agent()
    await until(lambda: any(runtime.plugins.channels["whatsapp"].bots["bot"].leading
                            for runtime in (first, second)))
    await asyncio.sleep(1.5)  # several lease periods: still exactly one holder
    leading = [runtime.plugins.channels["whatsapp"].bots["bot"].leading
               for runtime in (first, second)]
    assert sorted(leading) == [False, True]
    follower_url = second_url if leading[0] else first_url
    raw = json.dumps(notification(text("wamid.f1", FRIEND, "via the follower"))).encode()
    async with aiohttp.ClientSession() as http:
        assert await post(http, follower_url, raw, sign(raw, APP_SECRET)) == 200
        assert await post(http, first_url if follower_url == second_url else second_url,
                          raw, sign(raw, APP_SECRET)) == 200  # and redelivered to the other
    await until(lambda: fake_graph.texts(FRIEND))
    await asyncio.sleep(1.0)
    assert fake_graph.texts(FRIEND) == ["You said: via the follower"]


async def test_an_approval_comes_as_reply_buttons_and_a_reply_decides_it(
        whatsapp_agent: Agent, fake_graph: FakeGraph) -> None:
    runtime, url = await whatsapp_agent(tools_py=TOOLS, approvals={"ring_bell": {}})
    raw = json.dumps(notification(text("wamid.b1", FRIEND, "ring"))).encode()
    async with aiohttp.ClientSession() as http:
        assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200
        await until(lambda: fake_graph.sent)
        (offer,) = fake_graph.sent
        assert offer["type"] == "interactive" and "ring_bell" in offer["interactive"]["body"][
            "text"]
        approve, always, deny = offer["interactive"]["action"]["buttons"]
        assert (approve["reply"]["title"], always["reply"]["title"], deny["reply"]["title"]) == (
            "Approve", "Approve always", "Deny")
        press = {"from": FRIEND, "id": "wamid.b2", "timestamp": "1700000100",
                 "type": "interactive", "interactive": {
                     "type": "button_reply", "button_reply": approve["reply"]}}
        raw = json.dumps(notification(press)).encode()
        assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200
    await until(lambda: any("rang: " in text for text in fake_graph.texts(FRIEND)))
    assert "Approved." in fake_graph.texts(FRIEND)  # the press is acknowledged in the chat
    (approval,) = await runtime.list_approvals(status="approved")
    assert approval.decided_by == f"whatsapp:{FRIEND}"
