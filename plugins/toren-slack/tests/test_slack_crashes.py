"""SIGKILL and Socket Mode tests: ``toren dev`` processes serving one Slack app, killed at the
worst moments; Socket Mode envelopes acknowledged only once recorded."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_slack import FakeSlack
from slack_support import (
    DM,
    GENERAL,
    Dev,
    dm,
    lease_holder_pid,
    mention,
    post,
    rows,
    socket_settings,
    until,
)


@pytest.mark.slow
async def test_a_worker_sigkilled_mid_turn_the_reply_is_sent_exactly_once(
        fake_slack: FakeSlack, slack_agent: Callable[..., Path],
        slack_dev: Callable[..., Dev], database_url: str, tmp_path: Path) -> None:
    directory = slack_agent()
    crash = {"TOREN_CRASH_AT": "after_model_response",
             "TOREN_CRASH_ONCE": str(tmp_path / "crashed-once")}
    first = slack_dev(directory, **crash)
    async with aiohttp.ClientSession() as http:
        assert await post(http, first.events, dm("survive this", "1700000050.000100")) == 200
    try:
        assert first.process.proc.wait(timeout=60) == -signal.SIGKILL, first.process.stderr
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker did not crash mid-turn: {first.process.stderr}")
    assert fake_slack.texts(DM) == []  # the model answered; nothing was sent
    second = slack_dev(directory, **crash)
    await until(lambda: fake_slack.texts(DM), within=40)
    await asyncio.sleep(3)  # a resumed turn, a new lease holder: still one reply
    assert fake_slack.texts(DM) == ["You said: survive this"], second.process.stderr
    assert rows(database_url, "SELECT count(*) FROM agent_bot.runs WHERE kind = 'session'"
                ) == [(1,)]


def recorded_when_acknowledged(fake: FakeSlack, database_url: str) -> list[tuple[str, bool]]:
    """Make the fake check, as each acknowledgement arrives, that the envelope's message is
    in the database already; the list of (update id, recorded) it fills."""
    checks: list[tuple[str, bool]] = []

    def check(envelope: dict[str, Any]) -> None:
        event = envelope["payload"]["event"]
        update_id = f"{event['channel']}:{event['ts']}"
        found = rows(database_url, "SELECT count(*) FROM toren_control.channel_updates "
                                   "WHERE update_id = %s", update_id)
        checks.append((update_id, found == [(1,)]))

    fake.on_ack = check
    return checks


@pytest.mark.slow
async def test_socket_mode_acknowledges_only_recorded_envelopes_and_reconnects(
        fake_slack: FakeSlack, slack_agent: Callable[..., Path],
        slack_dev: Callable[..., Dev], database_url: str) -> None:
    checks = recorded_when_acknowledged(fake_slack, database_url)
    dev = slack_dev(slack_agent(settings=socket_settings(fake_slack)))
    fake_slack.push(dm("over the socket", "1700000060.000100"))
    await until(lambda: fake_slack.texts(DM))
    root = "1700000061.000100"
    fake_slack.push(mention("in a thread", root))
    await until(lambda: fake_slack.texts(GENERAL, root))
    fake_slack.disconnect()  # Slack's "refresh_requested": a new connection, nothing lost
    fake_slack.push(dm("after a refresh", "1700000062.000100"))
    await until(lambda: len(fake_slack.texts(DM)) == 2)
    fake_slack.drop()  # the connection breaks without a word
    fake_slack.push(dm("after a break", "1700000063.000100"))
    await until(lambda: len(fake_slack.texts(DM)) == 3)
    await until(fake_slack.settled)
    assert fake_slack.texts(DM) == ["You said: over the socket", "You said: after a refresh",
                                    "You said: after a break"]
    assert fake_slack.texts(GENERAL, root) == ["You said: in a thread"]
    assert fake_slack.connections_opened == 3  # the first, after the refresh, the break
    assert len(checks) >= 4 and all(recorded for _update, recorded in checks), checks
    assert fake_slack.stray_acks == []
    async with aiohttp.ClientSession() as http:  # no webhooks in socket mode
        assert await post(http, dev.events, dm("x", "1700000064.000100")) == 404


@pytest.mark.slow
async def test_socket_mode_poller_holder_sigkilled_another_takes_over_nothing_lost_or_doubled(
        fake_slack: FakeSlack, slack_agent: Callable[..., Path],
        slack_dev: Callable[..., Dev], database_url: str) -> None:
    directory = slack_agent(settings=socket_settings(fake_slack))
    devs = [slack_dev(directory), slack_dev(directory)]
    fake_slack.push(dm("before", "1700000070.000100"))
    await until(lambda: fake_slack.texts(DM))
    holder = lease_holder_pid(database_url)
    (killed,) = [dev for dev in devs if dev.process.proc.pid == holder]
    (survivor,) = [dev for dev in devs if dev is not killed]
    # recorded by the holder, but its acknowledgement never reaches Slack
    fake_slack.drop_acks = True
    fake_slack.push(dm("in flight", "1700000071.000100"))
    await until(lambda: rows(database_url, "SELECT count(*) FROM toren_control.channel_updates"
                             ) == [(2,)])
    killed.process.proc.send_signal(signal.SIGKILL)
    killed.process.proc.wait(timeout=10)
    fake_slack.drop_acks = False
    fake_slack.push(dm("during", "1700000072.000100"))  # no connection open: Slack keeps it
    await until(lambda: len(fake_slack.texts(DM)) >= 3, within=40)
    fake_slack.push(dm("after", "1700000073.000100"))
    await until(lambda: len(fake_slack.texts(DM)) >= 4, within=20)
    await until(fake_slack.settled)
    await asyncio.sleep(2)  # nothing more arrives
    assert fake_slack.texts(DM) == ["You said: before", "You said: in flight",
                                    "You said: during", "You said: after"], (
        survivor.process.stderr)
    assert lease_holder_pid(database_url) == survivor.process.proc.pid
    assert fake_slack.most_live == 1  # only the lease holder ever connects
    redelivered = [envelope for envelope in fake_slack.acked if envelope["retry_attempt"]]
    assert [envelope["payload"]["event"]["text"] for envelope in redelivered] == ["in flight"]
