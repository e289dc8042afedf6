"""Contract of ``MemoryStore``: what agents keep beyond a session (``memory:``), written once
per idempotency key, seen only by whom it is for, found by words, erased for good."""

from __future__ import annotations

import asyncio

from toren.core.memory import MemoryVector, MemoryView, NewMemory
from toren.seams.store import Store
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import new_agent_name, new_id

SCOPES = ("user", "agent", "shared")


class MemoryStoreContract(StoreFixtures):
    """``toren.seams.store.MemoryStore``: each test writes for agents and subjects of its own
    (the memories of earlier tests may be there)."""

    async def test_a_key_writes_once_and_an_erased_memory_stays_erased(self,
                                                                       store: Store) -> None:
        agent, subject = new_agent_name(), new_id()
        new = NewMemory(agent=agent, scope="user", subject=subject, content="Likes green tea",
                        pinned=True, run_id=new_id())
        first = await store.remember(f"{agent}:1", new)
        again = await store.remember(f"{agent}:1", new)
        assert (first.outcome, first.first) == ("remembered", True)
        assert (again.outcome, again.memory_id, again.first) == (
            "remembered", first.memory_id, False)
        assert first.memory_id is not None
        [kept] = await store.list_memories(agents=[agent])
        assert (kept.id, kept.agent, kept.scope, kept.subject, kept.content, kept.pinned,
                kept.run_id) == (first.memory_id, agent, "user", subject, "Likes green tea",
                                 True, new.run_id)
        assert kept.created_at is not None and kept.updated_at is not None
        assert await store.get_memory(first.memory_id) == kept

        view = MemoryView(agent, subject)
        racing = await asyncio.gather(*(store.update_memory(f"{agent}:2", view, kept.id,
                                                            content=f"Likes tea {n}")
                                        for n in range(4)))
        assert sum(result.first for result in racing) == 1
        assert {(r.outcome, r.memory_id) for r in racing} == {("updated", kept.id)}
        updated = await store.get_memory(kept.id)
        assert updated is not None and updated.content.startswith("Likes tea ")
        assert updated.pinned  # left as it was

        assert await store.delete_memories(ids=[kept.id]) == [kept.id]
        assert await store.get_memory(kept.id) is None
        # the same keys again (a resumed task's calls) change nothing, and write nothing back
        assert (await store.remember(f"{agent}:1", new)).first is False
        assert (await store.update_memory(f"{agent}:2", view, kept.id, content="x")).first \
            is False
        gone = await store.forget_memory(f"{agent}:3", view, kept.id)
        assert (gone.outcome, gone.first) == ("not_found", True)
        assert await store.list_memories(agents=[agent]) == []

    async def test_each_view_sees_and_changes_only_its_own(self, store: Store) -> None:
        agent, other, ann, bob = new_agent_name(), new_agent_name(), new_id(), new_id()
        about_ann = await store.remember(f"{agent}:a", NewMemory(agent, "user", ann,
                                                                 "Ann likes invoices"))
        note = await store.remember(f"{agent}:n", NewMemory(agent, "agent", None,
                                                            "Invoices go out monthly"))
        assert about_ann.memory_id is not None and note.memory_id is not None
        ann_view, bob_view = MemoryView(agent, ann), MemoryView(agent, bob)
        assert {m.id for m in await store.recall_memories(ann_view, "invoices", limit=5)} == {
            about_ann.memory_id, note.memory_id}
        assert [m.id for m in await store.recall_memories(bob_view, "invoices", limit=5)] == [
            note.memory_id]
        assert [m.id for m in await store.recall_memories(MemoryView(agent, None), None,
                                                          limit=5)] == [note.memory_id]
        only_user = await store.recall_memories(ann_view, "invoices", limit=5, scope="user")
        assert [m.id for m in only_user] == [about_ann.memory_id]
        assert await store.recall_memories(MemoryView(agent, ann, ("agent",)), "likes",
                                           limit=5) == []
        # another agent, or the agent about another person: not found, nothing changed
        for view, key in ((MemoryView(other, ann), "o"), (bob_view, "b")):
            for result in (await store.forget_memory(f"{agent}:f{key}", view,
                                                     about_ann.memory_id),
                           await store.update_memory(f"{agent}:u{key}", view,
                                                     about_ann.memory_id, content="x")):
                assert result.outcome == "not_found"
        for bad in ("not-a-uuid", "'; DROP TABLE memories; --", new_id()):
            assert (await store.forget_memory(f"{agent}:{bad}", ann_view, bad)).outcome == \
                "not_found"
            assert await store.get_memory(bad) is None
            assert await store.edit_memory(bad, content="x") is None
        unchanged = await store.get_memory(about_ann.memory_id)
        assert unchanged is not None and unchanged.content == "Ann likes invoices"

    async def test_shared_memories_need_consent_on_both_sides(self, store: Store) -> None:
        sales, support, billing = new_agent_name(), new_agent_name(), new_agent_name()
        written = await store.remember(f"{sales}:s", NewMemory(
            sales, "shared", None, "Renewals get a discount", shared_with=(support, billing)))
        assert written.memory_id is not None
        consenting = MemoryView(support, new_id(), SCOPES, share_with=(sales,))
        found = await store.recall_memories(consenting, "discount", limit=5)
        assert [(m.id, m.scope, m.agent) for m in found] == [
            (written.memory_id, "shared", sales)]
        assert await store.recall_memories(MemoryView(billing, None, SCOPES), "discount",
                                           limit=5) == []  # billing does not list sales
        outsider = MemoryView(new_agent_name(), None, SCOPES, share_with=(sales,))
        assert await store.recall_memories(outsider, "discount", limit=5) == []
        assert (await store.forget_memory(f"{support}:f", consenting,
                                          written.memory_id)).outcome == "not_found"

    async def test_recall_matches_any_word_best_first_and_lists_pinned(self,
                                                                       store: Store) -> None:
        agent = new_agent_name()
        ids = {}
        for name, content, pinned in (("printer", "The printer jams on thick paper", False),
                                      ("paper", "Orders paper by the pallet", True),
                                      ("city", "Lives in Lisbon", True)):
            result = await store.remember(f"{agent}:{name}", NewMemory(
                agent, "agent", None, content, pinned=pinned))
            ids[name] = result.memory_id
        view = MemoryView(agent, None)
        found = await store.recall_memories(view, "printers and papers", limit=5)
        assert [m.id for m in found] == [ids["printer"], ids["paper"]]  # two words beat one
        first, second = found[0].score, found[1].score
        assert first is not None and second is not None and first > second > 0
        assert [m.id for m in await store.recall_memories(view, "printer", limit=1)] == [
            ids["printer"]]
        newest_first = [ids["city"], ids["paper"], ids["printer"]]
        assert [m.id for m in await store.recall_memories(view, None, limit=5)] == newest_first
        assert [m.id for m in await store.recall_memories(view, "the", limit=5)] == newest_first
        assert [m.id for m in await store.pinned_memories(view, limit=5)] == [
            ids["city"], ids["paper"]]
        searched = await store.list_memories(agents=[agent], search="lisbon")
        assert [m.id for m in searched] == [ids["city"]]
        assert [m.id for m in await store.list_memories(agents=[agent], scope="user")] == []

    async def test_people_edit_and_erase_by_subject_and_old_ones_expire(self,
                                                                        store: Store) -> None:
        agent, other, ann = new_agent_name(), new_agent_name(), new_id()
        mine = await store.remember(f"{agent}:1", NewMemory(agent, "user", ann, "Ann: plan A"))
        theirs = await store.remember(f"{other}:1", NewMemory(other, "user", ann, "Ann: VIP"))
        kept = await store.remember(f"{agent}:2", NewMemory(agent, "agent", None, "A note"))
        assert mine.memory_id and theirs.memory_id and kept.memory_id
        edited = await store.edit_memory(mine.memory_id, content="Ann: plan B", pinned=True)
        assert edited is not None and (edited.content, edited.pinned) == ("Ann: plan B", True)
        assert {m.id for m in await store.list_memories(agents=None, subject=ann)} == {
            mine.memory_id, theirs.memory_id}
        assert await store.delete_memories(agents=[agent], subject=ann) == [mine.memory_id]
        assert await store.delete_memories(subject=ann) == [theirs.memory_id]
        assert await store.delete_memories() == []  # no ids, no subject: nothing
        assert await store.expire_memories(agent, 3600) == 0
        await asyncio.sleep(0.05)
        assert await store.expire_memories(agent, 0.01) == 1
        assert await store.get_memory(kept.memory_id) is None

    async def test_vectors_find_what_words_miss_where_the_store_ranks_by_them(
            self, store: Store) -> None:
        agent = new_agent_name()
        near, far = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0)
        printers = await store.remember(f"{agent}:p", NewMemory(
            agent, "agent", None, "Owns two printers", vector=MemoryVector("e3", near)))
        lisbon = await store.remember(f"{agent}:l", NewMemory(
            agent, "agent", None, "Lives in Lisbon", vector=MemoryVector("e3", far)))
        view = MemoryView(agent, None)
        query = MemoryVector("e3", (0.9, 0.1, 0.0))
        found = await store.recall_memories(view, "printing", limit=5, vector=query)
        if await store.semantic_recall():
            assert [m.id for m in found] == [printers.memory_id]
            assert found[0].score is not None and found[0].score > 0.9
            # another embedder's vectors are never compared; a high bar finds nothing
            assert await store.recall_memories(view, "printing", limit=5,
                                               vector=MemoryVector("other", (0.9, 0.1, 0.0))
                                               ) == []
            assert await store.recall_memories(view, "printing", limit=5, vector=query,
                                               min_similarity=0.999) == []
            # words still count: Lisbon by its word, printers by its vector
            both = await store.recall_memories(view, "lisbon printing", limit=5, vector=query)
            assert {m.id for m in both} == {printers.memory_id, lisbon.memory_id}
            # new content without a vector drops the old vector with the old words
            assert lisbon.memory_id is not None and printers.memory_id is not None
            await store.update_memory(f"{agent}:u", view, printers.memory_id,
                                      content="Owns a fax")
            assert await store.recall_memories(view, "printing", limit=5, vector=query) == []
        else:  # recall by words only: "printing" is not "printers"
            assert found == []
