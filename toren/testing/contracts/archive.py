"""Contracts of the run archive: the store's index (``RunArchiveIndex``: which runs may go,
what went where, purges and restores) and the backends that hold the objects
(``ArchiveBackend``: ``ArchiveContract``, run by ``file`` and ``s3``)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest

from toren.core.events import Event
from toren.core.retention import ArchiveDigest
from toren.core.runs import RunUpdate
from toren.core.schedules import ScheduleSpec
from toren.errors import ArchiveMismatch, ArchiveUnavailable, RestoreConflict
from toren.seams.archive import ArchiveBackend
from toren.seams.shapes import OutgoingMessage
from toren.seams.store import Store, ToolManifest
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.decisions import request, scheduled_run, wake
from toren.testing.contracts.runs import leased
from toren.testing.contracts.support import (
    call_completed,
    call_started,
    eventually,
    new_id,
    started,
    task_finished,
)

#: What an index row says of the object (the tests store no object: the index only records).
SUMMARY = {"events": 4, "model_calls": 1, "bytes": 123}
DIGEST = ArchiveDigest("ab" * 32, 123, 456)


class RunArchiveIndexContract(StoreFixtures):
    """``toren.seams.store.RunArchiveIndex``: the steps of an archive pass, each as the host
    calls them, and what reads see between them. Uses ``RunLog`` to make finished runs and
    ``RunReader`` to look. Each test registers an agent of its own (archivable runs and the
    archived list are agent-wide)."""

    async def finished(self, store: Store, agent: str, *, key: str | None = None,
                       status: str = "completed") -> str:
        """A run that ended a moment ago with four events, its lease released and its
        messages sent: archivable by everything the store can see."""
        return await self.finish(store, agent, await self.create(store, agent, key=key),
                                 status=status)

    async def finish(self, store: Store, agent: str, run_id: str, *,
                     status: str = "completed") -> str:
        """End ``run_id`` as ``finished`` does."""
        lease = await leased(store, run_id)
        await store.append(agent, lease, 1, [started(lease.epoch), call_started(1, lease.epoch),
                                             call_completed(1, lease.epoch),
                                             task_finished(lease.epoch)],
                           ttl_s=60, release=True,
                           run_update=RunUpdate(status=status, output="done", finished=True))
        await self.drain(store, agent)
        return run_id

    async def archivable(self, store: Store, agent: str, older_than_s: float = 0.0
                         ) -> list[str]:
        return [run.id for run in await store.archivable_runs(agent, older_than_s, 100)]

    async def indexed(self, store: Store, agent: str, run_id: str
                      ) -> tuple[Any, list[Event], list[dict[str, Any]]]:
        """The run exported and indexed (not purged), as a pass leaves it after the index."""
        exported = await store.export_run(agent, run_id)
        assert exported is not None
        record, events, manifests = exported
        assert await store.index_archived_run(agent, record, f"file:///archive/{run_id}",
                                              SUMMARY, len(events), DIGEST)
        return record, events, manifests

    # -- archive_lock ---------------------------------------------------------------------

    async def test_the_archive_lock_is_held_by_one_at_a_time(self, store: Store) -> None:
        second = type(store)(store.settings)  # another process of the fleet
        await second.open()
        try:
            async with store.archive_lock() as held:
                assert held is True
                async with second.archive_lock() as also:
                    assert also is False
                async with store.archive_lock() as again:  # another pass in this process
                    assert again is False
            async with second.archive_lock() as held:
                assert held is True
            async with store.archive_lock() as held:
                assert held is True
        finally:
            await second.close()

    async def test_the_archive_lock_is_let_go_when_the_pass_fails(self, store: Store) -> None:
        with contextlib.suppress(RuntimeError):
            async with store.archive_lock() as held:
                assert held is True
                raise RuntimeError("the pass died")
        async with store.archive_lock() as held:
            assert held is True

    # -- archivable_runs ------------------------------------------------------------------

    async def test_finished_runs_nothing_refers_to_are_archivable_oldest_end_first(
            self, store: Store, fresh_agent: str) -> None:
        ended = [await self.finished(store, fresh_agent, status=status)
                 for status in ("completed", "failed", "cancelled", "stopped")]
        found = await eventually(lambda: self.archivable(store, fresh_agent),
                                 "the finished runs becoming archivable")
        assert found == ended
        page = await store.archivable_runs(fresh_agent, 0.0, 3)
        assert [run.id for run in page] == ended[:3]
        assert all(run.agent == fresh_agent and run.finished_at is not None for run in page)
        last = page[-1]
        assert last.finished_at is not None
        rest = await store.archivable_runs(fresh_agent, 0.0, 3, (last.finished_at, last.id))
        assert [run.id for run in rest] == ended[3:]
        assert await self.archivable(store, fresh_agent, older_than_s=3600) == []

    async def test_runs_still_referred_to_are_not_archivable(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        running = await self.create(store, agent)  # not finished
        await self.drain(store, agent)
        lease = await leased(store, running)
        await store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=60, release=True)
        # finished, but a worker still holds one of its streams
        held = await self.finished(store, agent)
        assert await store.acquire_lease(held, "task:late", "w2", 60) is not None
        messaged = await self.finished(store, agent)
        free = await self.finished(store, agent)
        # finished, but a message would still act on it
        other = await leased(store, messaged, "w3", stream="task:other")
        await store.append(agent, other, 1, [started(other.epoch)], ttl_s=60, release=True,
                           messages=[OutgoingMessage("run", {"reason": "late tick"})])
        assert await eventually(lambda: self.archivable(store, agent),
                                "the free run becoming archivable") == [free]

    async def test_a_run_followed_live_or_awaiting_a_decision_is_not_archivable(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        watched = await self.finished(store, agent)
        await store.wait_for_appends({watched}, 0.05)  # an open event stream follows it
        asked = await self.create(store, agent)
        await store.open_approvals(agent, asked, "main", [request(new_id())], wake())
        await self.finish(store, agent, asked)
        free = await self.finished(store, agent)
        assert await eventually(lambda: self.archivable(store, agent),
                                "the free run becoming archivable") == [free]

    async def test_the_latest_run_of_a_schedule_in_use_is_not_archivable(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        await store.sync_schedules(agent, [ScheduleSpec(name="s", cron="0 0 1 1 *")])
        first = (await store.trigger_schedule(agent, "s", scheduled_run)).run_id
        await self.finish(store, agent, first)
        free = await self.finished(store, agent)
        assert await eventually(lambda: self.archivable(store, agent),
                                "the free run becoming archivable") == [free]
        latest = (await store.trigger_schedule(agent, "s", scheduled_run)).run_id
        await self.finish(store, agent, latest)
        assert await eventually(lambda: self.archivable(store, agent),
                                "the schedule's earlier run becoming archivable") == [
            first, free]
        await store.sync_schedules(agent, [])  # the schedule left agent.yaml
        assert await self.archivable(store, agent) == [first, free, latest]

    async def test_an_indexed_run_is_not_archivable_again(
            self, store: Store, fresh_agent: str) -> None:
        run_id = await self.finished(store, fresh_agent)
        await eventually(lambda: self.archivable(store, fresh_agent), "archivable")
        await self.indexed(store, fresh_agent, run_id)
        assert await self.archivable(store, fresh_agent) == []

    # -- export_run, index_archived_run ---------------------------------------------------

    async def test_an_export_holds_the_row_and_every_event_in_read_order(
            self, store: Store, fresh_agent: str) -> None:
        run_id = await self.finished(store, fresh_agent, key=f"key-{new_id()}")
        exported = await store.export_run(fresh_agent, run_id)
        assert exported is not None
        record, events, manifests = exported
        hot = await store.get_run(run_id, fresh_agent)
        assert hot is not None
        assert (record.id, record.agent, record.status, record.output, record.idempotency_key,
                record.created_at, record.finished_at) == (
            hot.id, fresh_agent, "completed", "done", hot.idempotency_key, hot.created_at,
            hot.finished_at)
        loaded = await store.load_events(fresh_agent, run_id)
        assert [(e.stream, e.seq, e.type, e.data) for e in events] == [
            (e.stream, e.seq, e.type, e.data) for e in loaded]
        assert len(events) == 6 and isinstance(manifests, list)
        assert await store.export_run(fresh_agent, new_id()) is None

    async def test_a_run_that_changed_since_its_export_is_not_indexed(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        run_id = await self.finished(store, agent)
        exported = await store.export_run(agent, run_id)
        assert exported is not None
        record, events, _ = exported
        # an event appended since (a late unleased append, say) changes the count
        assert not await store.index_archived_run(agent, record, "file:///x", SUMMARY,
                                                  len(events) - 1, DIGEST)
        assert await store.archived_run(run_id, [agent]) is None
        # a run that is not terminal is never indexed
        live = await self.create(store, agent)
        exported = await store.export_run(agent, live)
        assert exported is not None
        assert not await store.index_archived_run(agent, exported[0], "file:///y", SUMMARY,
                                                  len(exported[1]), DIGEST)
        assert await store.archived_run(live, [agent]) is None
        assert await store.index_archived_run(agent, record, "file:///x", SUMMARY,
                                              len(events), DIGEST)
        assert not await store.index_archived_run(agent, record, "file:///z", SUMMARY,
                                                  len(events), DIGEST)  # indexed already
        found = await store.archived_run(run_id, [agent])
        assert found is not None and found.extra["archive"]["location"] == "file:///x"

    # -- purge_archived_run, unpurged_runs, archived_run -----------------------------------

    async def test_a_purge_removes_an_indexed_run_in_batches_and_reads_go_to_the_index(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        run_id = await self.finished(store, agent)
        record, events, _ = await self.indexed(store, agent, run_id)
        assert await store.unpurged_runs(agent, 10) == [run_id]
        assert await store.get_run(run_id, agent) is not None  # hot until purged
        assert await store.purge_archived_run(agent, run_id, 4) == len(events)
        assert await store.get_run(run_id, agent) is None
        assert await store.load_events(agent, run_id) == []
        assert await store.unpurged_runs(agent, 10) == []
        assert await store.purge_archived_run(agent, run_id, 4) == 0
        for agents in ([agent], None):
            found = await store.archived_run(run_id, agents)
            assert found is not None
            assert (found.id, found.agent, found.status, found.output) == (
                run_id, agent, "completed", "done")
            assert found.created_at == record.created_at
            archive = found.extra["archive"]
            assert archive["location"] == f"file:///archive/{run_id}"
            assert archive["summary"] == SUMMARY and archive["archived_at"]
            assert archive["sha256"] == DIGEST.sha256
            assert found.extra["archive_digest"] == DIGEST

    async def test_a_purge_never_touches_a_run_not_in_the_index(
            self, store: Store, fresh_agent: str) -> None:
        run_id = await self.finished(store, fresh_agent)
        assert await store.purge_archived_run(fresh_agent, run_id, 1) == 0
        assert await store.get_run(run_id, fresh_agent) is not None
        assert len(await store.load_events(fresh_agent, run_id)) == 6

    async def test_a_run_indexed_without_a_digest_says_so(
            self, store: Store, fresh_agent: str) -> None:
        run_id = await self.finished(store, fresh_agent)
        exported = await store.export_run(fresh_agent, run_id)
        assert exported is not None
        assert await store.index_archived_run(fresh_agent, exported[0], "file:///old",
                                              SUMMARY, len(exported[1]), None)
        found = await store.archived_run(run_id, [fresh_agent])
        assert found is not None and found.extra["archive_digest"] is None
        assert found.extra["archive"]["sha256"] is None

    async def test_an_archived_run_is_none_for_any_other_id(
            self, store: Store, fresh_agent: str) -> None:
        run_id = await self.finished(store, fresh_agent)
        assert await store.archived_run(run_id, [fresh_agent]) is None  # hot, not archived
        for other in (new_id(), "not-a-uuid", "", "'; drop table runs; --"):
            assert await store.archived_run(other) is None
            assert await store.archived_run(other, [fresh_agent]) is None

    # -- list_archived_runs ---------------------------------------------------------------

    async def test_archived_runs_list_newest_first_in_pages(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        runs = [await self.finished(store, agent) for _ in range(5)]
        for run_id in runs:
            await self.indexed(store, agent, run_id)
            await store.purge_archived_run(agent, run_id, 100)
        listed = await store.list_archived_runs(agents=[agent], limit=50)
        assert [run.id for run in listed] == runs[::-1]
        assert all(run.extra["archive"]["location"].endswith(run.id) for run in listed)
        pages: list[str] = []
        before = None
        while page := await store.list_archived_runs(agents=[agent], limit=2, before=before):
            assert len(page) <= 2
            pages += [run.id for run in page]
            last = page[-1]
            assert last.created_at is not None
            before = (last.created_at, last.id)
        assert pages == runs[::-1]
        everyone = await store.list_archived_runs(limit=1000)
        assert set(runs) <= {run.id for run in everyone}
        assert await store.list_archived_runs(agents=[], limit=10) == []

    # -- restore_archived_run -------------------------------------------------------------

    async def test_a_restore_puts_the_run_back_whole_and_drops_its_index_row(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        run_id = await self.finished(store, agent, key=f"key-{new_id()}")
        record, events, manifests = await self.indexed(store, agent, run_id)
        await store.purge_archived_run(agent, run_id, 2)
        assert await store.restore_archived_run(agent, record, events, manifests) is True
        assert await store.archived_run(run_id, [agent]) is None
        found = await store.get_run(run_id, agent)
        assert found is not None
        assert (found.status, found.output, found.idempotency_key, found.created_at,
                found.finished_at) == (record.status, record.output, record.idempotency_key,
                                       record.created_at, record.finished_at)
        assert [(e.stream, e.seq, e.type, e.data) for e in
                await store.load_events(agent, run_id)] == [
            (e.stream, e.seq, e.type, e.data) for e in events]
        # restored, it is an ordinary finished run again, and not in the index
        assert await store.restore_archived_run(agent, record, events, manifests) is False
        assert run_id in await eventually(lambda: self.archivable(store, agent),
                                          "the restored run archivable again")

    async def test_tool_manifests_are_exported_purged_and_restored_with_their_run(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        run_id = await self.create(store, agent)
        for seq in (1, 2):
            await store.save_manifest(agent, run_id, "sandbox:main", ToolManifest(
                seq=seq, parent_seq=seq - 1 or None, step=seq, epoch=1, call_id=f"c{seq}",
                full=seq == 1, entries={f"f{seq}.txt": {"sha256": "0" * 64}},
                removed=["old.txt"] if seq == 2 else [], total_bytes=seq * 10))
        await self.finish(store, agent, run_id)
        before = await store.load_manifests(agent, run_id, "sandbox:main")
        record, events, manifests = await self.indexed(store, agent, run_id)
        assert [(m["scope"], m["seq"], m["parent_seq"], m["call_id"], m["full_state"],
                 m["entries"], m["removed"], m["total_bytes"]) for m in manifests] == [
            ("sandbox:main", 1, None, "c1", True, {"f1.txt": {"sha256": "0" * 64}}, [], 10),
            ("sandbox:main", 2, 1, "c2", False, {"f2.txt": {"sha256": "0" * 64}},
             ["old.txt"], 20)]
        assert all(isinstance(m["created_at"], str) for m in manifests)  # JSON, as archived
        await store.purge_archived_run(agent, run_id, 100)
        assert await store.load_manifests(agent, run_id, "sandbox:main") == []
        assert await store.restore_archived_run(agent, record, events, manifests) is True
        assert await store.load_manifests(agent, run_id, "sandbox:main") == before

    async def test_a_restore_replaces_what_a_died_purge_left(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        run_id = await self.finished(store, agent)
        record, events, manifests = await self.indexed(store, agent, run_id)
        # the pass died before its purge (or halfway through it): the run is still hot
        assert await store.restore_archived_run(agent, record, events, manifests) is True
        assert len(await store.load_events(agent, run_id)) == len(events)
        assert await store.unpurged_runs(agent, 10) == []

    async def test_a_restore_is_all_or_nothing(self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        run_id = await self.finished(store, agent)
        record, events, manifests = await self.indexed(store, agent, run_id)
        await store.purge_archived_run(agent, run_id, 100)
        # an object whose events the log refuses: one (stream, seq) twice
        twice: Sequence[Event] = [*events, events[-1]]
        with pytest.raises(ArchiveMismatch):
            await store.restore_archived_run(agent, record, twice, manifests)
        assert await store.get_run(run_id, agent) is None
        assert await store.load_events(agent, run_id) == []
        assert await store.archived_run(run_id, [agent]) is not None
        assert await store.restore_archived_run(agent, record, events, manifests) is True

    async def test_a_restore_whose_key_a_newer_run_took_is_a_conflict(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        key = f"key-{new_id()}"
        run_id = await self.finished(store, agent, key=key)
        record, events, manifests = await self.indexed(store, agent, run_id)
        await store.purge_archived_run(agent, run_id, 100)
        newer = await self.create(store, agent, key=key)  # the key is free in the hot table
        with pytest.raises(RestoreConflict):
            await store.restore_archived_run(agent, record, events, manifests)
        assert await store.get_run(run_id, agent) is None
        assert await store.archived_run(run_id, [agent]) is not None
        kept = await store.get_run(newer, agent)
        assert kept is not None and kept.idempotency_key == key
        assert await store.restore_archived_run(agent, new_record(record), [], []) is False

    async def test_hot_table_sizes_count_each_agent_s_runs_and_events(
            self, store: Store, fresh_agent: str) -> None:
        await self.finished(store, fresh_agent)
        sizes = await store.hot_table_sizes([fresh_agent])
        assert set(sizes) == {fresh_agent}
        entry = sizes[fresh_agent]
        for name in ("runs_rows", "runs_bytes", "events_rows", "events_bytes"):
            assert isinstance(entry[name], int) and entry[name] >= 0, name
        assert entry["runs_bytes"] > 0 and entry["events_bytes"] > 0
        assert await store.hot_table_sizes([]) == {}


def new_record(record: Any) -> Any:
    """``record`` as another run (an id the index never had)."""
    from dataclasses import replace
    return replace(record, id=new_id())


class ArchiveContract:
    """What every archive backend (``toren.seams.archive.ArchiveBackend``) promises the
    archive pass and the reads of archived runs.

    Override ``backend`` in the subclass: an archive backend of your driver over an empty
    place of its own (a directory, a bucket prefix), closed at teardown. ``foreign_locations``
    are locations of other backends it must refuse (``ArchiveUnavailable``) rather than read.
    Override ``missing_location`` if the backend's locations do not end with the object's key.
    """

    foreign_locations: ClassVar[tuple[str, ...]] = (
        "file:///etc/passwd", "s3://another-bucket/run.jsonl.gz",
        "https://example.com/run.jsonl.gz", "not a location")

    @pytest.fixture
    def backend(self) -> ArchiveBackend:
        pytest.fail(f"{type(self).__name__} must override the fixture `backend`: an archive "
                    "backend of your driver (see toren.testing.contracts)")

    def key(self, name: str = "run") -> str:
        """An object key as the archive pass makes them: ``<agent>/<YYYY>/<MM>/<run>``."""
        return f"contract-agent/2026/03/{name}-{uuid.uuid4().hex[:8]}.jsonl.gz"

    def missing_location(self, location: str) -> str:
        """A location of this backend where no object is: ``location`` with another last
        name (the ``file`` and ``s3`` backends end a location with the object's key)."""
        head, _, name = location.rpartition("/")
        assert head and name, (f"{location!r} does not end with its object's name: override "
                               "missing_location in the contract's subclass")
        return f"{head}/absent-{name}"

    async def test_an_object_reads_back_as_it_was_put(self, backend: ArchiveBackend) -> None:
        data = bytes(range(256)) * 4001  # not a multiple of any read size
        location = await backend.put(self.key(), data)
        assert isinstance(location, str) and location
        assert await backend.get(location, max_bytes=len(data)) == data
        assert await backend.get(location, max_bytes=len(data) + 10_000) == data
        empty = await backend.put(self.key("empty"), b"")
        assert await backend.get(empty, max_bytes=0) == b""

    async def test_the_backend_describes_itself_in_one_line(
            self, backend: ArchiveBackend) -> None:
        assert backend.description.strip() and "\n" not in backend.description

    async def test_a_put_replaces_the_object_at_its_key(self, backend: ArchiveBackend) -> None:
        key = self.key()
        first = await backend.put(key, b"first version, longer than the second")
        second = await backend.put(key, b"second")
        assert second == first
        assert await backend.get(second, max_bytes=100) == b"second"

    async def test_an_object_longer_than_the_cap_is_refused(
            self, backend: ArchiveBackend) -> None:
        data = b"x" * 5000
        location = await backend.put(self.key(), data)
        assert await backend.get(location, max_bytes=5000) == data
        for cap in (4999, 100, 0):
            with pytest.raises(ArchiveMismatch):
                await backend.get(location, max_bytes=cap)

    async def test_a_missing_object_is_unavailable(self, backend: ArchiveBackend) -> None:
        location = await backend.put(self.key("present"), b"here")
        with pytest.raises(ArchiveUnavailable):
            await backend.get(self.missing_location(location), max_bytes=100)

    async def test_a_location_of_another_backend_is_refused(
            self, backend: ArchiveBackend) -> None:
        own = urlsplit(await backend.put(self.key(), b"mine")).scheme
        for location in self.foreign_locations:
            if urlsplit(location).scheme == own:
                continue
            with pytest.raises(ArchiveUnavailable):
                await backend.get(location, max_bytes=1 << 20)

    async def test_puts_and_gets_at_once_each_read_one_whole_object(
            self, backend: ArchiveBackend) -> None:
        contents = {self.key(f"c{n}"): hashlib.sha256(bytes([n])).digest() * (500 + n)
                    for n in range(8)}
        locations = await asyncio.gather(*(backend.put(key, data)
                                           for key, data in contents.items()))
        read = await asyncio.gather(*(backend.get(location, max_bytes=1 << 20)
                                      for location in locations))
        assert read == list(contents.values())
        shared = self.key("shared")
        versions = [bytes([n]) * (100_000 + n) for n in range(4)]
        puts = await asyncio.gather(*(backend.put(shared, data) for data in versions))
        assert len(set(puts)) == 1
        assert await backend.get(puts[0], max_bytes=1 << 20) in versions  # never part of one
