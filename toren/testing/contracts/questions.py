"""Contract of ``QuestionStore``: what agents ask a person (``ask_user``), kept once and
answered once, the answer waking the task in its own transaction."""

from __future__ import annotations

import asyncio

from toren.core import events as ev
from toren.core.events import NewEvent
from toren.core.runs import RunUpdate
from toren.seams.shapes import OutgoingMessage
from toren.seams.store import Store
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import eventually, new_id

MAIN = "task:main"


def asked(question_id: str, expires_after_s: float | None = None) -> ev.QuestionAsked:
    return ev.QuestionAsked(step=1, question_id=question_id, call_id="call_1",
                            question="Which colour?", choices=("red", "blue"), epoch=1,
                            expires_after_s=expires_after_s)


def wake() -> OutgoingMessage:
    return OutgoingMessage("task", {"task_id": "main", "subagent": None, "input": None,
                                    "key": "task:main"})


class QuestionStoreContract(StoreFixtures):
    """``toren.seams.store.QuestionStore``: questions kept once and answered once, waking
    their task in the answer's transaction. Uses ``RunLog`` and ``Outbox``."""

    async def asking(self, store: Store, agent: str, *, session: bool = False) -> str:
        """A run whose main task waits for an answer (its messages sent)."""
        run_id = await self.create(store, agent, session=session)
        lease = await store.acquire_lease(run_id, MAIN, "w", 60)
        assert lease is not None
        await store.append(agent, lease, 1,
                           [NewEvent.of(asked(new_id()))], ttl_s=60,
                           run_update=RunUpdate(status="awaiting_input"), release=True)
        await self.drain(store, agent)
        return run_id

    async def test_opening_keeps_a_question_once(self, store: Store, agent: str) -> None:
        run_id = await self.asking(store, agent)
        question = asked(new_id())
        opened = await store.open_question(agent, run_id, "main", question, wake())
        assert (opened.id, opened.agent, opened.run_id, opened.task_id, opened.call_id,
                opened.question, opened.choices, opened.status) == (
            question.question_id, agent, run_id, "main", "call_1", "Which colour?",
            ("red", "blue"), "pending")
        assert opened.asked_at is not None and opened.expires_at is None
        again = await store.open_question(agent, run_id, "main", question, wake())
        assert again == opened
        assert [q.id for q in await store.list_questions(agents=None, run_id=run_id,
                                                         status="pending")] == [opened.id]
        assert await store.list_questions(agents=["someone-else"], run_id=run_id) == []
        assert await store.get_question(new_id()) is None
        assert await store.get_question("not-an-id") is None
        assert await store.answer_question("not-an-id", "red", "ann") is None

    async def test_an_answer_is_taken_once_and_wakes_the_task(self, store: Store,
                                                              agent: str) -> None:
        run_id = await self.asking(store, agent)
        question = await store.open_question(agent, run_id, "main", asked(new_id()), wake())
        assert question.extra.get("key") is None
        results = await asyncio.gather(*(store.answer_question(question.id, f"a{n}", f"p{n}",
                                                               key=f"k{n}")
                                         for n in range(4)))
        won = [result for result in results if result is not None and result[1]]
        assert len(won) == 1
        winner = won[0][0]
        assert winner.status == "answered" and winner.answered_at is not None
        assert winner.extra.get("key") == "k" + (winner.answer or "")[1:]  # kept with it
        for result in results:  # the losers see the first answer
            assert result is not None and result[0].answer == winner.answer
        record = await store.get_run(run_id, agent)
        assert record is not None and record.status == "running"
        woken = await self.outbox(store, agent, run_id)
        assert [(e.kind, e.payload) for e in woken] == [(wake().kind, wake().payload)]

    async def test_a_question_expires_by_the_store_s_clock(self, store: Store,
                                                          agent: str) -> None:
        run_id = await self.asking(store, agent)
        question = await store.open_question(agent, run_id, "main",
                                              asked(new_id(), expires_after_s=0.3), wake())
        assert question.expires_at is not None and question.extra.get("due") is False
        early = await store.answer_question(question.id, None, "toren", "expired")
        assert early is not None and early[1] is False  # not yet due

        async def due() -> bool:
            found = await store.get_question(question.id)
            return found is not None and bool(found.extra.get("due"))

        await eventually(due, "the question coming due")
        late = await store.answer_question(question.id, "red", "ann")
        assert late is not None and late[1] is False and late[0].status == "pending"
        expired = await store.answer_question(question.id, None, "toren", "expired")
        assert expired is not None and expired[1] and expired[0].status == "expired"
        assert len(await self.outbox(store, agent, run_id)) == 1  # the wake-up

    async def test_questions_of_an_ended_run_are_cancelled(self, store: Store,
                                                          agent: str) -> None:
        run_id = await self.asking(store, agent)
        first = await store.open_question(agent, run_id, "main", asked(new_id()), wake())
        second = await store.open_question(agent, run_id, "main", asked(new_id()), wake())
        await store.cancel_run(run_id, "stop")
        late = await store.answer_question(first.id, "red", "ann")
        assert late is not None and late[1] is False and late[0].status == "cancelled"
        assert await store.cancel_questions(run_id) == 1  # the second one
        assert await store.cancel_questions(run_id) == 0
        now = await store.get_question(second.id)
        assert now is not None and now.status == "cancelled"
        assert await self.outbox(store, agent, run_id) == []

    async def test_a_session_with_an_open_question_takes_no_new_turn(
            self, store: Store, agent: str) -> None:
        run_id = await self.asking(store, agent, session=True)
        question = await store.open_question(agent, run_id, "main", asked(new_id()), wake())
        message = NewEvent(ev.USER_MESSAGE, {"text": "hello"})
        taken, status, _turn = await store.session_input(agent, run_id, MAIN, [message],
                                                         [wake()], None)
        assert (taken, status) == (False, "awaiting_input")
        await store.answer_question(question.id, "red", "ann")
        record = await store.get_run(run_id, agent)
        assert record is not None and record.status == "running"
