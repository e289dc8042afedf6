"""Contracts of the chat channels' durable state: ``ChannelInbox`` (the poller lease and the
updates taken in), ``ChannelChats`` (chats, pairings, the button key) and ``ChannelOutbox``
(messages to send, each once)."""

from __future__ import annotations

import asyncio
import os
import uuid

from toren.seams.store import Store
from toren.seams.store.channels import ChannelPairing, ChannelSend, ChannelUpdate
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import eventually, new_agent_name

#: The channel name the contracts use (a channel is a plugin's name: ``telegram``, ...).
CHANNEL = "contract-chat"


def update(agent: str, update_id: str, chat_id: str = "chat-1", *, sort_key: int = 0,
           text: str = "hello", kind: str = "message") -> ChannelUpdate:
    """An incoming update as a channel records it before acknowledging it."""
    return ChannelUpdate(channel=CHANNEL, agent=agent, update_id=update_id, chat_id=chat_id,
                         user_id=f"user-of-{chat_id}", kind=kind, text=text, sort_key=sort_key,
                         payload={"from": {"name": "Ada"}})


def send(key: str, chat_id: str = "chat-1", text: str = "hi") -> ChannelSend:
    return ChannelSend(key=key, chat_id=chat_id, text=text,
                       payload={"buttons": [[{"text": "OK", "data": "ok"}]]})


class ChannelInboxContract(StoreFixtures):
    """``toren.seams.store.ChannelInbox``: one poller per channel and agent, and each update
    taken in once, whoever receives it. Uses ``ChannelOutbox`` to look at answers. Each test
    uses an agent name of its own (channels need no registered agent)."""

    async def test_the_poller_lease_has_one_holder_until_released(self, store: Store) -> None:
        agent = new_agent_name()
        assert await store.claim_channel_lease(CHANNEL, agent, "p1", 60) is True
        assert await store.claim_channel_lease(CHANNEL, agent, "p2", 60) is False
        assert await store.claim_channel_lease(CHANNEL, agent, "p1", 60) is True  # renewed
        assert await store.claim_channel_lease("another-channel", agent, "p2", 60) is True
        await store.release_channel_lease(CHANNEL, agent, "p2")  # not its lease: no change
        assert await store.claim_channel_lease(CHANNEL, agent, "p2", 60) is False
        await store.release_channel_lease(CHANNEL, agent, "p1")
        assert await store.claim_channel_lease(CHANNEL, agent, "p2", 60) is True
        assert await store.claim_channel_lease(CHANNEL, agent, "p1", 60) is False

    async def test_an_expired_poller_lease_goes_to_the_next_claimant(self, store: Store) -> None:
        agent = new_agent_name()
        assert await store.claim_channel_lease(CHANNEL, agent, "p1", 0.3) is True
        await eventually(lambda: store.claim_channel_lease(CHANNEL, agent, "p2", 60),
                         "p2 taking the expired poller lease")
        assert await store.claim_channel_lease(CHANNEL, agent, "p1", 60) is False

    async def test_pollers_claiming_at_once_one_holds_the_lease(self, store: Store) -> None:
        agent = new_agent_name()
        held = await asyncio.gather(*(store.claim_channel_lease(CHANNEL, agent, f"p{n}", 60)
                                      for n in range(6)))
        assert held.count(True) == 1

    async def test_an_update_received_twice_is_taken_in_once(self, store: Store) -> None:
        agent = new_agent_name()
        first = update(agent, "u-1")
        assert await store.record_channel_update(first) is True
        assert await store.record_channel_update(first) is False  # the platform redelivered
        taken = await asyncio.gather(*(store.record_channel_update(update(agent, "u-2"))
                                       for _ in range(5)))  # webhooks on several servers
        assert taken.count(True) == 1
        pending = await store.pending_channel_updates(CHANNEL, agent)
        assert [u.update_id for u in pending] == ["u-1", "u-2"]
        found = pending[0]
        assert (found.channel, found.agent, found.chat_id, found.user_id, found.kind,
                found.text, found.payload, found.status) == (
            CHANNEL, agent, "chat-1", "user-of-chat-1", "message", "hello",
            {"from": {"name": "Ada"}}, "pending")
        assert found.received_at is not None
        # the same update id on another agent is another update
        assert await store.record_channel_update(update(new_agent_name(), "u-1")) is True

    async def test_pending_updates_come_in_each_chat_s_order(self, store: Store) -> None:
        agent = new_agent_name()
        for update_id, chat, key in [("a3", "a", 3), ("b1", "b", 1), ("a1", "a", 1),
                                     ("a2", "a", 2), ("b0", "b", 0)]:
            assert await store.record_channel_update(update(agent, update_id, chat,
                                                            sort_key=key))
        pending = await store.pending_channel_updates(CHANNEL, agent)
        by_chat: dict[str, list[str]] = {}
        for found in pending:
            by_chat.setdefault(found.chat_id, []).append(found.update_id)
        assert by_chat == {"a": ["a1", "a2", "a3"], "b": ["b0", "b1"]}
        assert len(await store.pending_channel_updates(CHANNEL, agent, limit=2)) == 2

    async def test_an_update_moves_from_pending_to_delivered_to_answered(
            self, store: Store) -> None:
        agent = new_agent_name()
        for update_id in ("u-1", "u-2"):
            await store.record_channel_update(update(agent, update_id))
        session = str(uuid.uuid4())
        await store.set_channel_update(CHANNEL, agent, "u-1", "delivered", session_id=session,
                                       turn=3)
        assert [u.update_id for u in await store.pending_channel_updates(CHANNEL, agent)] == [
            "u-2"]
        delivered = await store.delivered_channel_updates(CHANNEL, agent)
        assert [(u.update_id, u.status, u.session_id, u.turn) for u in delivered] == [
            ("u-1", "delivered", session, 3)]
        await store.answer_channel_update(CHANNEL, agent, "u-1", "answered",
                                          [send(f"reply:{session}:3:0"),
                                           send(f"reply:{session}:3:1", text="more")])
        assert await store.delivered_channel_updates(CHANNEL, agent) == []
        due = await store.due_channel_sends(CHANNEL, agent)
        assert [(s.key, s.text) for s in due] == [(f"reply:{session}:3:0", "hi"),
                                                  (f"reply:{session}:3:1", "more")]
        # answering again (a crash after the commit, then a retry) sends nothing twice
        await store.answer_channel_update(CHANNEL, agent, "u-1", "answered",
                                          [send(f"reply:{session}:3:0")])
        for found in due:
            await store.finish_channel_send(CHANNEL, agent, found.key)
        assert await store.due_channel_sends(CHANNEL, agent) == []
        await store.set_channel_update(CHANNEL, agent, "u-2", "refused")
        assert await store.pending_channel_updates(CHANNEL, agent) == []


class ChannelChatsContract(StoreFixtures):
    """``toren.seams.store.ChannelChats``: a chat's session, pairings decided once, and one
    button key per deployment."""

    async def test_a_chat_is_bound_to_one_session_at_a_time(self, store: Store) -> None:
        agent = new_agent_name()
        first, second = str(uuid.uuid4()), str(uuid.uuid4())
        assert await store.chat_session(CHANNEL, agent, "chat-1") is None
        assert await store.bind_chat_session(CHANNEL, agent, "chat-1", first) == first
        assert await store.chat_session(CHANNEL, agent, "chat-1") == first
        assert await store.session_chat(CHANNEL, first) == (agent, "chat-1")
        assert await store.bind_chat_session(CHANNEL, agent, "chat-1", second) == second
        assert await store.chat_session(CHANNEL, agent, "chat-1") == second
        assert await store.session_chat(CHANNEL, second) == (agent, "chat-1")
        assert await store.session_chat(CHANNEL, str(uuid.uuid4())) is None
        assert await store.chat_session(CHANNEL, agent, "chat-2") is None

    async def test_a_pairing_is_requested_once_and_decided_once(self, store: Store) -> None:
        agent = new_agent_name()
        code = uuid.uuid4().hex[:10]
        asked = ChannelPairing(channel=CHANNEL, agent=agent, user_id="u1", chat_id="c1",
                               code=code, status="pending", display_name="Ada")
        assert await store.channel_user_status(CHANNEL, agent, "u1") is None
        stored = await store.request_pairing(asked)
        assert (stored.code, stored.status, stored.display_name) == (code, "pending", "Ada")
        assert stored.created_at is not None
        again = await store.request_pairing(ChannelPairing(
            channel=CHANNEL, agent=agent, user_id="u1", chat_id="c1",
            code=uuid.uuid4().hex[:10], status="pending"))
        assert again.code == code  # the earlier request, code and all
        assert await store.channel_user_status(CHANNEL, agent, "u1") == "pending"
        assert code in {p.code for p in await store.list_pairings("pending")}

        decided = await store.decide_pairing(code, "approved", "operator")
        assert decided is not None
        assert (decided.status, decided.decided_by) == ("approved", "operator")
        assert decided.decided_at is not None
        unchanged = await store.decide_pairing(code, "denied", "someone else")
        assert unchanged is not None
        assert (unchanged.status, unchanged.decided_by) == ("approved", "operator")
        assert await store.channel_user_status(CHANNEL, agent, "u1") == "approved"
        assert code in {p.code for p in await store.list_pairings("approved")}
        assert code not in {p.code for p in await store.list_pairings("pending")}
        assert await store.decide_pairing(uuid.uuid4().hex, "approved", "operator") is None

    async def test_one_button_key_per_deployment_whoever_offers_one_first(
            self, store: Store) -> None:
        offered = [os.urandom(32) for _ in range(5)]
        # processes starting at once each offer a key; one is kept, and every one gets it
        kept = await asyncio.gather(*(store.chat_button_key(key) for key in offered))
        assert len(set(kept)) == 1 and len(kept[0]) >= 32
        assert await store.chat_button_key(os.urandom(32)) == kept[0]
        second = type(store)(store.settings)  # another process, or this one restarted
        await second.open()
        try:
            assert await second.chat_button_key(os.urandom(32)) == kept[0]
        finally:
            await second.close()


class ChannelOutboxContract(StoreFixtures):
    """``toren.seams.store.ChannelOutbox``: each key sent once, claims that two senders never
    share, retries after their delay."""

    async def test_a_key_is_recorded_once_and_sends_come_oldest_first(
            self, store: Store) -> None:
        agent = new_agent_name()
        assert await store.enqueue_channel_sends(CHANNEL, agent, [send("k1"), send("k2")]) == 2
        assert await store.enqueue_channel_sends(CHANNEL, agent,
                                                 [send("k2", text="again"), send("k3")]) == 1
        assert await store.enqueue_channel_sends(new_agent_name(), agent, [send("k1")]) == 1
        due = await store.due_channel_sends(CHANNEL, agent)
        assert [(s.key, s.text, s.chat_id) for s in due] == [
            ("k1", "hi", "chat-1"), ("k2", "hi", "chat-1"), ("k3", "hi", "chat-1")]
        assert (due[0].channel, due[0].agent, due[0].attempts, due[0].sent_at) == (
            CHANNEL, agent, 0, None)
        assert due[0].payload == {"buttons": [[{"text": "OK", "data": "ok"}]]}

    async def test_processes_recording_one_key_at_once_record_it_once(
            self, store: Store) -> None:
        agent = new_agent_name()
        added = await asyncio.gather(*(store.enqueue_channel_sends(
            CHANNEL, agent, [send("notice:1", text=f"from {n}")]) for n in range(5)))
        assert sum(added) == 1
        assert [s.key for s in await store.due_channel_sends(CHANNEL, agent)] == ["notice:1"]

    async def test_a_claimed_send_is_not_due_again_and_two_senders_never_share_one(
            self, store: Store) -> None:
        agent = new_agent_name()
        await store.enqueue_channel_sends(CHANNEL, agent, [send(f"k{n}") for n in range(8)])
        claims = await asyncio.gather(*(store.due_channel_sends(CHANNEL, agent, limit=3)
                                        for _ in range(4)))
        keys = [s.key for claim in claims for s in claim]
        assert sorted(keys) == sorted(f"k{n}" for n in range(8))  # each once
        assert await store.due_channel_sends(CHANNEL, agent) == []  # claimed for a minute

    async def test_a_finished_send_is_never_sent_again(self, store: Store) -> None:
        agent = new_agent_name()
        await store.enqueue_channel_sends(CHANNEL, agent, [send("sent"), send("blocked")])
        await store.due_channel_sends(CHANNEL, agent)
        await store.finish_channel_send(CHANNEL, agent, "sent")
        await store.finish_channel_send(CHANNEL, agent, "blocked", "403: bot was blocked")
        await store.retry_channel_send(CHANNEL, agent, "sent", 0, "late retry")
        await asyncio.sleep(0.2)
        assert await store.due_channel_sends(CHANNEL, agent) == []
        assert await store.enqueue_channel_sends(CHANNEL, agent, [send("sent")]) == 0

    async def test_released_sends_come_back_after_the_pause_in_order_without_an_attempt(
            self, store: Store) -> None:
        agent = new_agent_name()
        await store.enqueue_channel_sends(CHANNEL, agent, [send("a"), send("b"), send("c")])
        assert [s.key for s in await store.due_channel_sends(CHANNEL, agent)] == ["a", "b",
                                                                                    "c"]
        await store.finish_channel_send(CHANNEL, agent, "a")
        await store.release_channel_sends(CHANNEL, agent, ["a", "b", "c"], 0.3)
        assert await store.due_channel_sends(CHANNEL, agent) == []  # not before the pause

        async def due_again() -> list[ChannelSend]:
            return await store.due_channel_sends(CHANNEL, agent)

        again = await eventually(due_again, "released sends coming due after the pause")
        # well before the claim's minute; the sent one stays sent; nothing counted
        assert [(s.key, s.attempts, s.last_error) for s in again] == [("b", 0, None),
                                                                      ("c", 0, None)]

    async def test_a_retried_send_comes_back_after_its_delay_with_its_error(
            self, store: Store) -> None:
        agent = new_agent_name()
        await store.enqueue_channel_sends(CHANNEL, agent, [send("k")])
        assert [s.key for s in await store.due_channel_sends(CHANNEL, agent)] == ["k"]
        await store.retry_channel_send(CHANNEL, agent, "k", 0.3, "429: too many requests")

        async def due_again() -> list[ChannelSend]:
            return await store.due_channel_sends(CHANNEL, agent)

        again = await eventually(due_again, "a retried send coming due after its delay")
        assert [(s.key, s.attempts, s.last_error) for s in again] == [
            ("k", 1, "429: too many requests")]
