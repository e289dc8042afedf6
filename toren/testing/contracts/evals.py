"""Contract of ``EvalStore``: an eval kept whole (its dataset included), a case run claimed
once however often it is claimed, its run and grade kept once, evals listed newest first."""

from __future__ import annotations

import asyncio
import uuid

from toren.core.eval_cases import Case, Dataset, Grader
from toren.core.evals import EvalRecord
from toren.seams.store import Store
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import new_agent_name, new_id


def new_eval(agent: str, **fields: object) -> EvalRecord:
    cases = (Case("a", "first", expected="x", tags=("t",),
                  graders=(Grader("exact", "x"), Grader("rubric", "r", model="m/judge")),
                  source="cases.yaml:3", from_run=str(uuid.UUID(int=7))),
             Case("b", {"question": "second"}, graders=(Grader("max_steps", 3),)))
    return EvalRecord(id=str(uuid.uuid4()), agent=agent, dataset=Dataset("set", cases),
                      version="f" * 64, **fields)  # type: ignore[arg-type]


class EvalStoreContract(StoreFixtures):
    """``toren.seams.store.EvalStore``. Evals of each test name an agent of their own."""

    async def test_an_eval_is_kept_whole_and_finished_once(self, store: Store) -> None:
        record = new_eval(new_agent_name(), human_version="1.0", model="m/other", repeat=3,
                          concurrency=2, grader_model="m/judge", source="--dir crew",
                          functions="/tmp/evals.py", fork_at=2)
        kept = await store.create_eval(record)
        assert kept.created_at is not None and kept.status == "running"
        found = await store.get_eval(record.id)
        assert found is not None
        assert found.dataset == record.dataset and found.dataset.hash == record.dataset.hash
        assert (found.human_version, found.model, found.repeat, found.concurrency,
                found.grader_model, found.source, found.functions, found.fork_at) == (
            "1.0", "m/other", 3, 2, "m/judge", "--dir crew", "/tmp/evals.py", 2)
        assert found.finished_at is None
        finished = await store.finish_eval(record.id)
        assert finished is not None and finished.status == "finished"
        assert finished.finished_at is not None
        again = await store.finish_eval(record.id)
        assert again is not None and again.finished_at == finished.finished_at
        assert await store.get_eval(new_id()) is None
        assert await store.get_eval("not a uuid") is None
        assert await store.finish_eval(new_id()) is None

    async def test_a_case_run_is_claimed_once_and_keeps_its_first_run_and_grade(
            self, store: Store) -> None:
        record = await store.create_eval(new_eval(new_agent_name()))
        claims = await asyncio.gather(*(store.claim_case_run(record.id, "a", 1)
                                        for _ in range(5)))
        assert {(c.case_id, c.repeat, c.run_id, c.grade) for c in claims} == {("a", 1, None,
                                                                               None)}
        assert len({c.created_at for c in claims}) == 1
        run_id = new_id()
        await store.set_case_run(record.id, "a", 1, run_id)
        await store.set_case_run(record.id, "a", 1, new_id())  # the first run stays
        assert (await store.claim_case_run(record.id, "a", 1)).run_id == run_id
        assert await store.grade_case_run(record.id, "a", 1, {"passed": True, "n": [1]})
        assert not await store.grade_case_run(record.id, "a", 1, {"passed": False})
        await store.claim_case_run(record.id, "a", 2)
        await store.claim_case_run(record.id, "b", 1)
        runs = await store.case_runs(record.id)
        assert [(r.case_id, r.repeat, r.run_id, r.grade) for r in runs] == [
            ("a", 1, run_id, {"passed": True, "n": [1]}), ("a", 2, None, None),
            ("b", 1, None, None)]
        assert runs[0].graded_at is not None and runs[1].graded_at is None
        assert await store.case_runs(new_id()) == []

    async def test_evals_are_listed_newest_first_by_agent_in_pages(self, store: Store) -> None:
        agent, other = new_agent_name(), new_agent_name()
        made = []
        for _ in range(3):
            made.append(await store.create_eval(new_eval(agent)))
        await store.create_eval(new_eval(other))
        listed = await store.list_evals(agent=agent, limit=10)
        assert [e.id for e in listed] == [e.id for e in reversed(made)]
        page = await store.list_evals(agent=agent, limit=2)
        rest = await store.list_evals(agent=agent, limit=2, before=page[-1].id)
        assert [e.id for e in page + rest] == [e.id for e in reversed(made)]
        assert listed[0].dataset.cases[1].input == {"question": "second"}

    async def test_an_eval_lease_is_held_by_one_holder_until_it_expires(
            self, store: Store) -> None:
        agent = new_agent_name()
        by_hand = await store.create_eval(new_eval(agent))
        durable = await store.create_eval(new_eval(agent, auto_resume=True))
        assert (await store.get_eval(durable.id)).auto_resume  # type: ignore[union-attr]
        # two servers at once: the auto_resume eval goes to exactly one of them
        first, second = await asyncio.gather(
            store.claim_eval_leases("one", [agent], ttl_s=30),
            store.claim_eval_leases("two", [agent], ttl_s=30))
        assert sorted(first + second) == [durable.id]
        holder, other = ("one", "two") if first else ("two", "one")
        assert await store.eval_lease(durable.id) == holder
        assert await store.claim_eval_leases(other, [agent], ttl_s=30) == []
        assert await store.claim_eval_leases(other, [agent], ttl_s=30,
                                             eval_id=durable.id) == []
        assert await store.renew_eval_leases(holder, [durable.id], ttl_s=30) == [durable.id]
        assert await store.renew_eval_leases(other, [durable.id], ttl_s=30) == []
        # an eval the holder waits to try again is left out
        await store.release_eval_lease(holder, durable.id)
        assert await store.claim_eval_leases(holder, [agent], ttl_s=30,
                                             skip=[durable.id, "not a uuid"]) == []
        assert await store.claim_eval_leases(holder, [agent], ttl_s=30) == [durable.id]
        # an eval not auto_resume is only ever claimed by its id
        assert await store.claim_eval_leases(other, [agent], ttl_s=30,
                                             eval_id=by_hand.id) == [by_hand.id]
        # an expired lease (a holder that stopped renewing) is taken by the next claim
        assert await store.renew_eval_leases(holder, [durable.id], ttl_s=0.05) == [durable.id]
        await asyncio.sleep(0.3)
        assert await store.eval_lease(durable.id) is None
        assert await store.claim_eval_leases(other, [agent], ttl_s=30) == [durable.id]
        assert await store.renew_eval_leases(holder, [durable.id], ttl_s=30) == []
        await store.release_eval_lease(holder, durable.id)  # not its lease: nothing
        assert await store.eval_lease(durable.id) == other
        await store.release_eval_lease(other, durable.id)
        assert await store.eval_lease(durable.id) is None
        # a finished eval is never claimed; nor are other agents' evals
        await store.finish_eval(durable.id)
        assert await store.claim_eval_leases(other, [agent], ttl_s=30) == []
        assert await store.claim_eval_leases(other, [new_agent_name()], ttl_s=30,
                                             eval_id=by_hand.id) == []
        assert await store.claim_eval_leases(other, [agent], ttl_s=30,
                                             eval_id="not a uuid") == []
