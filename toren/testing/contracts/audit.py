"""Contract of ``AuditStore``: entries kept as given, read back newest first by every filter,
paged, forgotten by age."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

from toren.core.audit import AuditEntry, AuditQuery
from toren.seams.store import Store
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import new_agent_name, new_id


def entry(actor: str, action: str, **fields: object) -> AuditEntry:
    return AuditEntry(actor_kind="key", actor_id=actor, actor_name=f"{actor}-name",
                      action=action, source="http", **fields)  # type: ignore[arg-type]


class AuditStoreContract(StoreFixtures):
    """``toren.seams.store.AuditStore``. Entries of each test name an actor of its own."""

    async def test_an_entry_is_kept_as_given_and_ids_ascend(self, store: Store) -> None:
        actor, run_id = new_id(), new_id()
        first = await store.record_audit(entry(
            actor, "run.cancel", agent="a", run_id=run_id, outcome="ok", status=200,
            remote="10.0.0.1", user_agent="curl/8", details={"reason": "stuck", "n": 2}))
        second = await store.record_audit(entry(actor, "run.cancel", outcome="forbidden",
                                                status=403))
        assert second.id > first.id
        assert second.at >= first.at
        listed = await store.list_audit(AuditQuery(actor=actor))
        assert [r.id for r in listed] == [second.id, first.id]  # newest first
        assert listed[1].entry == first.entry
        assert listed[1].entry.details == {"reason": "stuck", "n": 2}
        assert (listed[0].entry.outcome, listed[0].entry.status) == ("forbidden", 403)

    async def test_every_filter_narrows_the_read(self, store: Store) -> None:
        actor, other, agent, run_id = new_id(), new_id(), new_agent_name(), new_id()
        start = await store.record_audit(entry(actor, "run.start", agent=agent, run_id=run_id))
        approve = await store.record_audit(entry(actor, "approval.approve", agent=agent,
                                                 target=new_id()))
        await store.record_audit(entry(actor, "approvals.weird"))  # not under "approval"
        denied = await store.record_audit(entry(other, "run.cancel", outcome="forbidden"))
        cli = await store.record_audit(replace(entry(actor, "key.create"), actor_kind="cli"))

        async def ids(**filters: object) -> list[int]:
            found = await store.list_audit(AuditQuery(**filters))  # type: ignore[arg-type]
            return [r.id for r in found]

        assert await ids(actor=other) == [denied.id]
        assert await ids(actor=f"{other}-name") == [denied.id]
        assert await ids(actor=f"cli:{actor}") == [cli.id]
        assert await ids(actor=actor, action="approval") == [approve.id]
        assert await ids(actor=actor, action="approval.approve") == [approve.id]
        assert await ids(agent=agent) == [approve.id, start.id]
        assert await ids(run_id=run_id) == [start.id]
        assert await ids(actor=other, outcome="forbidden") == [denied.id]
        assert await ids(actor=actor, limit=2) == [cli.id, (await ids(actor=actor))[1]]
        assert await ids(actor=actor, before=approve.id) == [start.id]
        assert await ids(actor=actor, since=cli.at + timedelta(seconds=1)) == []
        assert await ids(actor=actor, until=start.at) == []
        assert await ids(actor=actor, since=start.at, until=cli.at + timedelta(seconds=1)) \
            == await ids(actor=actor)

    async def test_forget_deletes_only_entries_older_than_the_age(self, store: Store) -> None:
        actor = new_id()
        await store.record_audit(entry(actor, "run.start"))
        assert await store.forget_audit(3600.0) >= 0  # nothing of this test is that old
        assert len(await store.list_audit(AuditQuery(actor=actor))) == 1
        await asyncio.sleep(0.05)
        assert await store.forget_audit(0.01) >= 1
        assert await store.list_audit(AuditQuery(actor=actor)) == []
