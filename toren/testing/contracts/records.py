"""Contracts of what the store keeps beside runs: ``KeyStore``, ``PromptStore``,
``ToolStateStore`` and ``AgentVersionStore``."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from toren.core import events as ev
from toren.core.events import NewEvent
from toren.core.runs import RunUpdate
from toren.core.versions import AgentVersion
from toren.errors import ConfigError
from toren.keys import KeyNameTaken
from toren.seams.store import ManifestSeqTaken, Store, ToolManifest
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import first_events, first_message, new_id, started


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


class KeyStoreContract(StoreFixtures):
    """``toren.seams.store.KeyStore``: API keys, of which only a hash is kept."""

    async def test_a_created_key_verifies_until_it_is_revoked(self, store: Store) -> None:
        record, token = await store.create_key("contract")
        assert (record.name, record.active, record.revoked_at) == ("contract", True, None)
        assert token.startswith(record.prefix) and token != record.prefix
        verified = await store.verify_key(token)
        assert verified is not None and verified.id == record.id
        assert verified.last_used_at is not None  # the use is recorded

        revoked = await store.revoke_key(record.prefix)
        assert revoked is not None and revoked.id == record.id and not revoked.active
        assert await store.verify_key(token) is None
        again = await store.revoke_key(record.id)  # by id this time: changes nothing
        assert again is not None and again.revoked_at == revoked.revoked_at

    async def test_only_the_whole_key_verifies(self, store: Store) -> None:
        record, token = await store.create_key("contract")
        prefix, _, secret = token.rpartition("_")
        wrong = f"{prefix}_{'A' * len(secret)}"
        for attempt in (wrong, record.prefix, token[:-1], "", "toren_", "not a key"):
            assert await store.verify_key(attempt) is None, attempt
        assert await store.verify_key(token) is not None

    async def test_keys_are_listed_newest_first_revoked_ones_included(
            self, store: Store) -> None:
        older, _ = await store.create_key("older")
        newer, token = await store.create_key("newer")
        assert await store.revoke_key(token) is not None  # by the whole key
        listed = [key.id for key in await store.list_keys()]
        assert listed.index(newer.id) < listed.index(older.id)
        found = {key.id: key for key in await store.list_keys()}
        assert not found[newer.id].active and found[older.id].active

    async def test_revoking_what_is_no_key_finds_nothing(self, store: Store) -> None:
        for reference in (new_id(), "toren_00000000", "00000000", "garbage"):
            assert await store.revoke_key(reference) is None

    async def test_a_key_revoked_while_in_use_stops_verifying(self, store: Store) -> None:
        record, token = await store.create_key("busy")
        results = await asyncio.gather(store.revoke_key(record.prefix),
                                       *(store.verify_key(token) for _ in range(5)))
        assert results[0] is not None
        assert await store.verify_key(token) is None
        assert all(r is None or r.id == record.id for r in results[1:])

    async def test_a_bad_key_name_is_refused(self, store: Store) -> None:
        for name in ("", "   ", "x" * 101, "red\x1b[31m", "two\nlines", "cli:alice", "CLI:x"):
            with pytest.raises(ConfigError):
                await store.create_key(name)

    async def test_a_keys_role_scopes_agents_and_expiry_are_kept(self, store: Store) -> None:
        expires = datetime.now(UTC).replace(microsecond=0) + timedelta(days=7)
        record, token = await store.create_key(
            "scoped", role="custom", scopes=["runs:read", "approvals:decide"],
            agents=["crew"], expires_at=expires)
        assert (record.role, record.scopes, record.agents, record.expires_at) == (
            "custom", ("approvals:decide", "runs:read"), ("crew",), expires)
        verified = await store.verify_key(token)
        assert verified is not None and verified.granted == {"runs:read", "approvals:decide"}
        listed = next(k for k in await store.list_keys() if k.id == record.id)
        assert (listed.role, listed.agents, listed.expires_at) == ("custom", ("crew",), expires)
        default, _ = await store.create_key("default")
        assert (default.role, default.agents, default.expires_at) == ("admin", None, None)
        with pytest.raises(ConfigError):
            await store.create_key("bad", role="viewer", scopes=["runs:write"])

    async def test_a_key_past_its_expiry_does_not_verify(self, store: Store) -> None:
        _, token = await store.create_key(
            "brief", expires_at=datetime.now(UTC) + timedelta(seconds=0.5))
        assert await store.verify_key(token) is not None
        await asyncio.sleep(0.6)
        assert await store.verify_key(token) is None

    async def test_active_key_names_are_unique_ignoring_case(self, store: Store) -> None:
        first, _ = await store.create_key("Unique")
        with pytest.raises(KeyNameTaken):
            await store.create_key("unique")
        await store.revoke_key(first.id)
        assert (await store.create_key("UNIQUE"))[0].name == "UNIQUE"


class PromptStoreContract(StoreFixtures):
    """``toren.seams.store.PromptStore``: system prompts kept once each, by SHA-256."""

    async def test_prompts_are_kept_once_per_agent_and_read_back_by_hash(
            self, store: Store, agent: str, other_agent: str) -> None:
        text = f"You are a contract test {new_id()}."
        await store.save_prompt(agent, sha256(text), text)
        await store.save_prompt(agent, sha256(text), text)  # kept: nothing changes
        missing = sha256("never saved " + new_id())
        assert await store.load_prompts(agent, [sha256(text), missing]) == {sha256(text): text}
        assert await store.load_prompts(other_agent, [sha256(text)]) == {}
        assert await store.load_prompts(agent, []) == {}


class ToolStateContract(StoreFixtures):
    """``toren.seams.store.ToolStateStore``: blobs by SHA-256 and a run's manifests. Uses
    ``RunLog`` for runs."""

    async def test_blobs_are_content_addressed_per_agent(
            self, store: Store, agent: str, other_agent: str) -> None:
        blobs = {sha256(data): data for data in (new_id().encode(),
                                                 b"\x00\xff" * 1000 + new_id().encode())}
        assert await store.missing_blobs(agent, [*blobs, *blobs]) == set(blobs)
        await store.save_blobs(agent, blobs)
        await store.save_blobs(agent, blobs)  # already stored: kept
        assert await store.missing_blobs(agent, blobs) == set()
        assert await store.load_blobs(agent, [*blobs, sha256(b"absent")]) == blobs
        assert await store.missing_blobs(other_agent, blobs) == set(blobs)
        assert await store.load_blobs(agent, []) == {}

    async def test_manifests_in_seq_order_whole_or_as_headers(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        scope = "sandbox:main"
        for seq in (1, 2, 3):
            await store.save_manifest(agent, run_id, scope, ToolManifest(
                seq=seq, parent_seq=seq - 1 or None, step=seq, epoch=1, call_id=f"c{seq}",
                full=seq == 1, entries={f"f{seq}.txt": {"sha256": sha256(str(seq))}},
                removed=["old.txt"] if seq == 3 else [], total_bytes=seq * 10))
        found = await store.load_manifests(agent, run_id, scope)
        assert [(m.seq, m.parent_seq, m.full, dict(m.entries), list(m.removed), m.call_id)
                for m in found] == [
            (1, None, True, {"f1.txt": {"sha256": sha256("1")}}, [], "c1"),
            (2, 1, False, {"f2.txt": {"sha256": sha256("2")}}, [], "c2"),
            (3, 2, False, {"f3.txt": {"sha256": sha256("3")}}, ["old.txt"], "c3")]
        assert [m.seq for m in await store.load_manifests(agent, run_id, scope,
                                                          seqs=[3, 1])] == [1, 3]
        headers = await store.load_manifests(agent, run_id, scope, headers_only=True)
        assert [(m.seq, m.total_bytes, dict(m.entries), list(m.removed)) for m in headers] == [
            (1, 10, {}, []), (2, 20, {}, []), (3, 30, {}, [])]
        assert await store.load_manifests(agent, run_id, "sandbox:other") == []

    async def test_two_writers_of_one_manifest_seq_one_wins(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)

        def manifest(call_id: str) -> ToolManifest:
            return ToolManifest(seq=1, parent_seq=None, step=1, epoch=1, call_id=call_id,
                                full=True, entries={}, removed=[], total_bytes=0)

        results = await asyncio.gather(*(store.save_manifest(agent, run_id, "scope",
                                                             manifest(f"c{n}"))
                                         for n in range(4)), return_exceptions=True)
        assert sum(result is None for result in results) == 1
        assert all(isinstance(r, ManifestSeqTaken) for r in results if r is not None), results
        assert len(await store.load_manifests(agent, run_id, "scope")) == 1

    async def test_unfinished_runs_are_the_ones_that_exist_and_have_not_ended(
            self, store: Store, agent: str) -> None:
        active, ended = await self.create(store, agent), await self.create(store, agent)
        await store.cancel_run(ended, "stop")
        assert await store.unfinished_runs(agent, [active, ended, new_id()]) == {active}
        assert await store.unfinished_runs(agent, []) == set()


class AgentVersionStoreContract(StoreFixtures):
    """``toren.seams.store.AgentVersionStore``: definitions by version, and each run's version.
    Uses ``RunLog`` and ``RunReader``."""

    def version(self, text: str, human: str | None = None) -> AgentVersion:
        return AgentVersion.of({"agent.yaml": f"model: {text}\n".encode(),
                                "prompt.md": b"You are kept.\n"}, human)

    async def test_a_kept_version_loads_back_with_its_files(
            self, store: Store, fresh_agent: str) -> None:
        one, two = self.version("one", "1.0"), self.version("two")
        for version in (one, two, one):
            await store.save_agent_version(fresh_agent, version)
        loaded = await store.load_agent_version(fresh_agent, one.hash)
        assert loaded is not None
        assert (loaded.hash, loaded.human, dict(loaded.files)) == (one.hash, "1.0",
                                                                 dict(one.files))
        assert await store.load_agent_version(fresh_agent, "0" * 64) is None
        listed = await store.list_agent_versions(fresh_agent)
        assert [v.hash for v in listed] == [two.hash, one.hash]  # newest first
        assert listed[1].files == one.manifest and listed[1].human_version == "1.0"

    async def test_a_run_is_on_the_version_its_log_last_pinned_or_upgraded_to(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        one, two = self.version("one", "1.0"), self.version("two", "2.0")
        for version in (one, two):
            await store.save_agent_version(agent, version)
        plain = await self.create(store, agent)
        assert await store.run_agent_version(agent, plain) == (True, None)
        assert await store.run_agent_version(agent, new_id()) == (False, None)

        pinned = new_id()
        await store.create_run(agent, pinned, "x", idempotency_key=None, messages=[],
                               events=[*first_events(agent, "x"), NewEvent.of(
                                   ev.AgentVersionPinned(version=one.hash,
                                                         human_version="1.0"))])
        assert await store.run_agent_version(agent, pinned) == (True, one.hash)
        record = await store.get_run(pinned, agent)
        assert record is not None
        assert (record.agent_version, record.agent_human_version) == (one.hash, "1.0")

        upgrade = NewEvent.of(ev.AgentVersionUpgraded(version=two.hash, reason="requested",
                                                      human_version="2.0",
                                                      from_version=one.hash))
        assert not await store.set_run_version(agent, pinned, two.hash, [upgrade])  # not on it
        assert await store.set_run_version(agent, pinned, one.hash, [upgrade])
        assert await store.run_agent_version(agent, pinned) == (True, two.hash)
        assert (await store.load_stream(agent, pinned, "run"))[-1].type == "AgentVersionUpgraded"
        counted = {v.hash: (v.runs, v.active_runs)
                   for v in await store.list_agent_versions(agent)}
        assert counted == {one.hash: (0, 0), two.hash: (1, 1)}

    async def test_two_upgrades_from_one_version_are_recorded_once(
            self, store: Store, agent: str) -> None:
        one, two = self.version("one"), self.version("two")
        run_id = new_id()
        await store.create_run(agent, run_id, "x", idempotency_key=None,
                               messages=[first_message()],
                               events=[*first_events(agent, "x"), NewEvent.of(
                                   ev.AgentVersionPinned(version=one.hash))])
        upgrade = NewEvent.of(ev.AgentVersionUpgraded(version=two.hash, reason="on_change",
                                                      from_version=one.hash))
        results = await asyncio.gather(*(store.set_run_version(agent, run_id, one.hash,
                                                               [upgrade]) for _ in range(4)))
        assert sorted(results) == [False, False, False, True]
        stream = await store.load_stream(agent, run_id, "run")
        assert [e.type for e in stream].count("AgentVersionUpgraded") == 1

    async def test_what_a_store_tells_of_a_run_s_version_is_its_version(
            self, store: Store, agent: str) -> None:
        told: list[tuple[str, str | None]] = []
        store.on_run_version(lambda run_id, version: told.append((run_id, version)))
        one = self.version("told")
        run_id = new_id()
        await store.create_run(agent, run_id, "x", idempotency_key=None, messages=[],
                               events=[*first_events(agent, "x"), NewEvent.of(
                                   ev.AgentVersionPinned(version=one.hash))])
        lease = await store.acquire_lease(run_id, "task:main", "w", 60)
        assert lease is not None
        await store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=60)
        # a store may tell nothing (the default); what it tells must be true
        assert {version for told_run, version in told if told_run == run_id} <= {one.hash}

    async def test_a_finished_run_keeps_its_version(self, store: Store, agent: str) -> None:
        one, two = self.version("one"), self.version("two")
        run_id = new_id()
        await store.create_run(agent, run_id, "x", idempotency_key=None, messages=[],
                               events=[*first_events(agent, "x"), NewEvent.of(
                                   ev.AgentVersionPinned(version=one.hash))])
        assert await store.append_unleased(agent, run_id, "run", [NewEvent.of(
            ev.RunCancelled(reason="stop"))], run_update=RunUpdate(status="cancelled",
                                                                 finished=True))
        upgrade = NewEvent.of(ev.AgentVersionUpgraded(version=two.hash, reason="requested"))
        assert not await store.set_run_version(agent, run_id, one.hash, [upgrade])
        assert await store.run_agent_version(agent, run_id) == (True, one.hash)
