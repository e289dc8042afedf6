"""The contract of ``FileStore``: uploads stored once per distinct content, read back whole
from memory or in pieces, listed in pages, deleted, and kept under the deployment's quota."""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from collections.abc import AsyncIterator

import pytest

from toren.core.files import StoredFile
from toren.files import CHUNK_BYTES, StorageQuotaExceeded
from toren.seams.store import Store
from toren.testing.contracts.base import StoreFixtures

#: Ids that are no UUID: a driver answers ``None`` for them, never an error.
NOT_IDS = ("", "nope", "../../etc/passwd", "1" * 36, "00000000-0000-0000-0000-00000000000g",
           "x" * 10_000)


class PiecesOfContent:
    """A ``toren.core.files.FileContent``: content read a piece at a time, as an upload
    spooled to disk is. Counts the pieces read and the most read at once."""

    def __init__(self, data: bytes, piece_bytes: int = CHUNK_BYTES) -> None:
        self.data = data
        self.piece_bytes = piece_bytes
        self.largest_piece = 0

    @property
    def size_bytes(self) -> int:
        return len(self.data)

    async def chunks(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.data), self.piece_bytes):
            piece = self.data[start:start + self.piece_bytes]
            self.largest_piece = max(self.largest_piece, len(piece))
            yield piece


def unique_content(size: int) -> bytes:
    """``size`` bytes no other test stores (so adding them stores new content)."""
    head = uuid.uuid4().bytes
    return (head * (size // len(head) + 1))[:size]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FileStoreContract(StoreFixtures):
    """``toren.seams.store.FileStore``: what ``POST /files`` stores and tools read.

    The store may hold other tests' files (the listing and ``stored_bytes`` are deployment
    wide): each test adds content of its own and checks what changed by it. The quota tests
    assume no other process adds files while they run.
    """

    async def add(self, store: Store, data: bytes, name: str = "notes.txt",
                  **fields: object) -> StoredFile:
        return await store.add_file(name=name, content_type="text/plain", data=data,
                                    sha256=sha256(data), **fields)  # type: ignore[arg-type]

    async def test_a_file_is_recorded_and_read_back_whole(self, store: Store,
                                                          agent: str) -> None:
        data = unique_content(1000)
        run_id = str(uuid.uuid4())
        added = await store.add_file(name="report.txt", content_type="text/plain", data=data,
                                     sha256=sha256(data), uploaded_by="key:ops", agent=agent,
                                     run_id=run_id)
        assert (added.name, added.content_type, added.size_bytes, added.sha256,
                added.uploaded_by, added.agent, added.run_id) == (
            "report.txt", "text/plain", 1000, sha256(data), "key:ops", agent, run_id)
        assert uuid.UUID(added.id) and added.created_at is not None
        assert await store.get_file(added.id) == added
        assert await store.read_file(added.id) == (added, data)
        assert await store.get_file(added.id.upper()) == added  # a UUID however written

    async def test_content_added_in_pieces_reads_back_whole(self, store: Store) -> None:
        data = unique_content(2 * CHUNK_BYTES + 12_345)  # more than one piece
        content = PiecesOfContent(data)
        before = await store.stored_bytes()
        added = await store.add_file(name="big.bin", content_type="application/octet-stream",
                                     data=content, sha256=sha256(data))
        assert added.size_bytes == len(data)
        found = await store.read_file(added.id)
        assert found is not None and found[1] == data
        assert await store.stored_bytes() == before + len(data)
        small = unique_content(10)
        added = await store.add_file(name="small.bin", content_type="application/octet-stream",
                                     data=PiecesOfContent(small), sha256=sha256(small))
        assert await store.read_file(added.id) == (added, small)

    async def test_one_copy_of_each_distinct_content(self, store: Store) -> None:
        data = unique_content(5000)
        before = await store.stored_bytes()
        first = await self.add(store, data, "a.txt")
        second = await self.add(store, data, "b.txt", max_stored_bytes=before + len(data))
        assert first.id != second.id and (first.name, second.name) == ("a.txt", "b.txt")
        assert await store.stored_bytes() == before + len(data)
        # the same content in pieces is the same content
        third = await store.add_file(name="c.txt", content_type="text/plain",
                                     data=PiecesOfContent(data, 1000), sha256=sha256(data))
        assert await store.stored_bytes() == before + len(data)
        assert await store.read_file(third.id) == (third, data)

    async def test_deleting_one_of_two_files_sharing_content_keeps_the_other(
            self, store: Store) -> None:
        data = unique_content(3 * CHUNK_BYTES // 2)  # stored in more than one piece
        before = await store.stored_bytes()
        first, second = await self.add(store, data, "a"), await self.add(store, data, "b")
        assert await store.delete_file(first.id) == first
        assert await store.get_file(first.id) is None
        assert await store.read_file(first.id) is None
        assert await store.delete_file(first.id) is None
        assert await store.read_file(second.id) == (second, data)
        assert await store.stored_bytes() == before + len(data)
        assert await store.delete_file(second.id) == second
        assert await store.stored_bytes() == before
        assert await store.read_file(second.id) is None
        again = await self.add(store, data, "c")  # stored anew once gone
        assert await store.read_file(again.id) == (again, data)

    async def test_ids_that_are_no_uuid_find_nothing(self, store: Store) -> None:
        unknown = str(uuid.uuid4())
        for file_id in (*NOT_IDS, unknown):
            assert await store.get_file(file_id) is None
            assert await store.read_file(file_id) is None
            assert await store.delete_file(file_id) is None

    async def test_pages_list_every_file_once_newest_first(self, store: Store) -> None:
        mine = [await self.add(store, unique_content(10), f"page-{n}") for n in range(7)]
        ids = {f.id for f in mine}
        seen: list[StoredFile] = []
        before = None
        added_meanwhile: StoredFile | None = None
        while len([f for f in seen if f.id in ids]) < len(mine):
            page = await store.list_files(limit=2, before=before)
            assert page and len(page) <= 2
            seen += page
            before = (page[-1].created_at, page[-1].id)
            if added_meanwhile is None:
                added_meanwhile = await self.add(store, unique_content(10), "late")
        assert len({f.id for f in seen}) == len(seen)  # nothing repeated
        assert added_meanwhile is not None and added_meanwhile.id not in {f.id for f in seen}
        assert [f.id for f in seen if f.id in ids] == [f.id for f in reversed(mine)]
        times = [f.created_at for f in seen]
        assert times == sorted(times, reverse=True)
        top = await store.list_files(limit=3)
        assert [f.id for f in top] == [added_meanwhile.id, mine[-1].id, mine[-2].id]

    async def test_new_content_past_the_quota_is_refused_and_nothing_written(
            self, store: Store) -> None:
        stored = await store.stored_bytes()
        data = unique_content(4000)
        with pytest.raises(StorageQuotaExceeded):
            await self.add(store, data, "over", max_stored_bytes=stored + len(data) - 1)
        big = unique_content(CHUNK_BYTES + 1)
        with pytest.raises(StorageQuotaExceeded):
            await store.add_file(name="over-in-pieces", content_type="text/plain",
                                 data=PiecesOfContent(big), sha256=sha256(big),
                                 max_stored_bytes=stored + len(big) - 1)
        assert await store.stored_bytes() == stored
        assert not {"over", "over-in-pieces"} & {f.name for f in
                                                 await store.list_files(limit=5)}
        exact = await self.add(store, data, "fits", max_stored_bytes=stored + len(data))
        assert await store.stored_bytes() == stored + len(data)
        # content already stored costs nothing: accepted with no room left at all
        again = await self.add(store, data, "again", max_stored_bytes=0)
        assert again.id != exact.id and await store.read_file(again.id) == (again, data)

    async def test_two_uploads_racing_for_the_room_of_one_store_one(
            self, store: Store) -> None:
        size = 64 * 1024
        for round in range(3):
            stored = await store.stored_bytes()
            contents = [unique_content(size), unique_content(size)]
            results = await asyncio.gather(
                *(self.add(store, data, f"race-{round}", max_stored_bytes=stored + size)
                  for data in contents), return_exceptions=True)
            added = [r for r in results if isinstance(r, StoredFile)]
            refused = [r for r in results if isinstance(r, StorageQuotaExceeded)]
            assert (len(added), len(refused)) == (1, 1), results
            assert await store.stored_bytes() == stored + size

    async def test_many_uploads_of_one_new_content_store_it_once(self, store: Store) -> None:
        data = os.urandom(CHUNK_BYTES + 100)
        before = await store.stored_bytes()
        added = await asyncio.gather(*(self.add(store, data, f"same-{n}",
                                                max_stored_bytes=before + len(data))
                                       for n in range(4)))
        assert len({f.id for f in added}) == 4
        assert await store.stored_bytes() == before + len(data)
        for found in added:
            assert await store.read_file(found.id) == (found, data)

    async def test_content_deleted_while_an_upload_of_it_commits_stays_readable(
            self, store: Store) -> None:
        for size in (2000, CHUNK_BYTES + 10):  # in one piece and in several
            for _ in range(3):
                data = unique_content(size)
                last = await self.add(store, data, "last")
                _, racing = await asyncio.gather(store.delete_file(last.id),
                                                 self.add(store, data, "racing"))
                assert await store.read_file(racing.id) == (racing, data)
                assert await store.delete_file(racing.id) == racing

