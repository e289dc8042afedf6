"""API keys in the Postgres store: create, list, verify, revoke; only hashes are stored."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from toren_postgres.keys import PostgresKeyStore
from toren_postgres.migrations import control_migrations, migrate, render

from toren.config import Settings
from toren.errors import ConfigError
from toren.keys import KeyNameTaken, NewKey, generate_key, parse_key
from toren.seams.store import KeyStore


@pytest.fixture
async def store(make_runtime) -> KeyStore:
    runtime = await make_runtime(agents=[], workers=False)
    return runtime.store


def stored_row(database_url: str, key_id: str) -> dict[str, object]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT row_to_json(k)::jsonb FROM toren_control.keys k WHERE id = %s",
                           (key_id,)).fetchone()
    assert row is not None
    return row[0]


async def test_a_created_key_verifies_and_only_its_hash_is_stored(store: KeyStore,
                                                                   database_url: str) -> None:
    key, token = await store.create_key("  ci  ")

    assert re.fullmatch(r"toren_[0-9a-f]{8}_[A-Za-z0-9_-]{43}", token)
    assert token.startswith(key.prefix + "_")
    assert (key.name, key.last_used_at, key.revoked_at, key.active) == ("ci", None, None, True)
    assert await store.list_keys() == [key]

    secret = token.removeprefix(key.prefix + "_")
    row = stored_row(database_url, key.id)
    assert row["hash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert row["prefix"] == key.prefix
    text = str(row)
    assert secret not in text and secret[:16] not in text and token not in text

    verified = await store.verify_key(token)
    assert verified is not None
    assert (verified.id, verified.name, verified.prefix) == (key.id, "ci", key.prefix)
    assert verified.last_used_at is not None


async def test_wrong_malformed_and_unknown_keys_fail(store: KeyStore) -> None:
    key, token = await store.create_key("ci")
    secret = token.removeprefix(key.prefix + "_")
    other_secret = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    unknown_prefix = "toren_" + ("0" * 8 if key.prefix != "toren_00000000" else "1" * 8)

    for presented in (f"{key.prefix}_{other_secret}", f"{unknown_prefix}_{secret}",
                      token + "x!", token.upper(), key.prefix, secret, "", "Bearer " + token,
                      generate_key().token):
        assert await store.verify_key(presented) is None, presented
    assert (await store.list_keys())[0].last_used_at is None  # failures record no use


async def test_last_used_at_is_written_at_most_once_a_minute(store: KeyStore,
                                                            database_url: str) -> None:
    key, token = await store.create_key("busy")

    first = await store.verify_key(token)
    assert first is not None and first.last_used_at is not None
    for _ in range(3):
        again = await store.verify_key(token)
        assert again is not None and again.last_used_at == first.last_used_at
    assert stored_row(database_url, key.id)["last_used_at"] is not None

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE toren_control.keys SET last_used_at = now() - interval '2 minutes' "
                     "WHERE id = %s", (key.id,))
        stale = conn.execute("SELECT last_used_at FROM toren_control.keys WHERE id = %s",
                             (key.id,)).fetchone()[0]
    later = await store.verify_key(token)
    assert later is not None and later.last_used_at > stale
    assert (await store.list_keys())[0].last_used_at == later.last_used_at


async def test_a_revoked_key_fails_and_revoking_twice_is_fine(store: KeyStore) -> None:
    _, kept_token = await store.create_key("kept")
    key, token = await store.create_key("leaked")
    assert await store.verify_key(token) is not None

    revoked = await store.revoke_key(key.prefix)
    assert revoked is not None and revoked.id == key.id and revoked.revoked_at is not None
    assert await store.verify_key(token) is None
    assert await store.verify_key(kept_token) is not None

    # by id, by the bare hex of the prefix, by the whole key: the same key, revoked once
    bare = key.prefix.removeprefix("toren_")
    for reference in (key.id, bare, token, f"  {key.prefix} "):
        again = await store.revoke_key(reference)
        assert again is not None and again.revoked_at == revoked.revoked_at, reference

    listed = {k.name: k for k in await store.list_keys()}
    assert list(listed) == ["leaked", "kept"]  # newest first
    assert listed["leaked"].revoked_at == revoked.revoked_at and not listed["leaked"].active
    assert listed["kept"].active


async def test_revoking_an_unknown_key_returns_none(store: KeyStore) -> None:
    key, _ = await store.create_key("ci")
    unused = "toren_ffffffff" if key.prefix != "toren_ffffffff" else "toren_eeeeeeee"
    for reference in ("00000000-0000-0000-0000-000000000000", unused, "nonsense", ""):
        assert await store.revoke_key(reference) is None, reference
    assert (await store.list_keys())[0].active


async def test_a_taken_prefix_is_drawn_again(store: KeyStore,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    first, _ = await store.create_key("first")
    colliding = generate_key()
    colliding = NewKey(prefix=first.prefix,
                       token=first.prefix + colliding.token.removeprefix(colliding.prefix),
                       hash=colliding.hash)
    draws = iter([colliding, generate_key()])
    monkeypatch.setattr("toren_postgres.keys.generate_key", lambda: next(draws))

    second, token = await store.create_key("second")

    assert second.prefix != first.prefix
    assert parse_key(token) is not None and token.startswith(second.prefix + "_")
    verified = await store.verify_key(token)
    assert verified is not None and verified.id == second.id


async def test_a_key_needs_a_name(store: KeyStore) -> None:
    with pytest.raises(ConfigError, match="needs a name"):
        await store.create_key("   ")
    with pytest.raises(ConfigError, match="at most 100"):
        await store.create_key("x" * 101)
    assert await store.list_keys() == []


async def test_the_postgres_key_store_works_on_its_own(database_url: str,
                                                      tmp_path: Path) -> None:
    # one interface of the store, without the rest: what a second driver can start from
    keys = PostgresKeyStore(Settings(database_url=database_url, home=tmp_path))
    await keys.open()
    try:
        key, token = await keys.create_key("alone")
        verified = await keys.verify_key(token)
        assert verified is not None and verified.id == key.id
        assert [found.id for found in await keys.list_keys()] == [key.id]
    finally:
        await keys.close()


async def test_roles_agents_and_expiry_are_kept_and_an_expired_key_fails(
        store: KeyStore, database_url: str) -> None:
    soon = datetime.now(UTC) + timedelta(days=30)
    key, token = await store.create_key("desk", role="custom",
                                        scopes=["runs:read", "approvals:decide", "runs:read"],
                                        agents=["crew", "billing"], expires_at=soon)
    assert (key.role, key.scopes, key.agents) == ("custom", ("approvals:decide", "runs:read"),
                                                  ("billing", "crew"))
    assert key.expires_at == soon and key.granted == {"approvals:decide", "runs:read"}
    assert (await store.list_keys())[0] == key
    verified = await store.verify_key(token)
    assert verified is not None and verified.agents == ("billing", "crew")
    plain, _ = await store.create_key("plain")
    assert (plain.role, plain.scopes, plain.agents, plain.expires_at) == ("admin", (), None, None)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE toren_control.keys SET expires_at = now() - interval '1 second' "
                     "WHERE id = %s", (key.id,))
    assert await store.verify_key(token) is None
    listed = {k.id: k for k in await store.list_keys()}
    assert listed[key.id].expired and not listed[key.id].active


async def test_names_are_unique_among_active_keys_ignoring_case(store: KeyStore) -> None:
    first, _ = await store.create_key("Deploy Bot")
    for name in ("deploy bot", "DEPLOY BOT", "  Deploy Bot "):
        with pytest.raises(KeyNameTaken, match="an active API key is named"):
            await store.create_key(name)
    assert await store.revoke_key(first.id) is not None
    again, _ = await store.create_key("deploy bot")  # a revoked key's name is free again
    assert again.name == "deploy bot"
    for bad in ("cli:alice", "CLI:root"):
        with pytest.raises(ConfigError, match="may not start with 'cli:'"):
            await store.create_key(bad)
    for role, scopes, agents in (("root", (), None), ("viewer", ("runs:write",), None),
                                 ("custom", (), None), ("admin", (), ("Bad Agent",))):
        with pytest.raises(ConfigError):
            await store.create_key("bad-grant", role=role, scopes=scopes, agents=agents)
    assert {k.name for k in await store.list_keys()} == {"Deploy Bot", "deploy bot"}


async def test_keys_made_before_roles_become_admin_keys_and_keep_working(
        empty_database: tuple[str, str], tmp_path: Path) -> None:
    _, url = empty_database
    before = [m for m in control_migrations() if m.version < 21]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(render(before).encode())
        legacy = {}
        for n, name in enumerate(("ci", "ci", "CI", "ci (2)", "cli:alice", "ops")):
            new = generate_key()
            row = conn.execute(
                "INSERT INTO toren_control.keys (name, prefix, hash, created_at) VALUES "
                "(%s, %s, %s, now() - make_interval(mins => 10 - %s)) RETURNING id",
                (name, new.prefix, new.hash, n)).fetchone()
            assert row is not None
            legacy[str(row[0])] = new.token
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
        applied = await migrate(aconn, [])
    assert 21 in {m.version for m in applied}
    keys = PostgresKeyStore(Settings(database_url=url, home=tmp_path))
    await keys.open()
    try:
        listed = sorted(await keys.list_keys(), key=lambda k: k.created_at)
        # the oldest keeps its name; the later ones get the next free number (ignoring case)
        assert [k.name for k in listed] == ["ci", "ci (3)", "CI (4)", "ci (2)",
                                            "key-cli:alice", "ops"]
        assert len({k.name.lower() for k in listed}) == len(listed)
        assert {(k.role, k.agents, k.expires_at) for k in listed} == {("admin", None, None)}
        for key_id, token in legacy.items():
            verified = await keys.verify_key(token)
            assert verified is not None and verified.id == key_id and verified.role == "admin"
    finally:
        await keys.close()
