"""Roles and scopes, key names, expiry and approver references: pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from toren.core.actors import (
    ANONYMOUS,
    Actor,
    actor_of_label,
    check_approver,
    cli_actor,
    may_decide,
)
from toren.core.keys import ApiKey
from toren.core.scopes import ROLES, SCOPES, check_grant, check_key_agents, role_scopes
from toren.errors import ConfigError
from toren.keys import check_key_name, parse_expiry

NOW = datetime(2027, 1, 1, 12, 0, tzinfo=UTC)


def key(**fields: object) -> ApiKey:
    values: dict[str, object] = {"id": "6c1f0c5e-0000-4000-8000-000000000001",
                                 "name": "finance-lead", "prefix": "toren_1a2b3c4d",
                                 "created_at": NOW}
    return ApiKey(**(values | fields))  # type: ignore[arg-type]


def test_the_roles_hold_the_scopes_the_guide_lists() -> None:
    assert ROLES["admin"] == set(SCOPES)
    assert ROLES["operator"] == set(SCOPES) - {"keys:manage", "audit:read"}
    # memories are personal data: a viewer reads runs, not what agents keep about people
    assert ROLES["viewer"] == {s for s in SCOPES if s.endswith(":read")} - {"audit:read",
                                                                            "memory:read"}
    assert ROLES["approver"] == {"agents:read", "runs:read", "sessions:read",
                                 "approvals:read", "approvals:decide"}
    assert role_scopes("custom", ["runs:read", "made:up"]) == {"runs:read"}
    assert role_scopes("from-a-newer-version") == frozenset()  # grants nothing


def test_grants_are_checked_with_the_fix_in_the_message() -> None:
    assert check_grant("viewer") == ("viewer", ())
    assert check_grant("custom", ["runs:read", " runs:read", "files:read"]) == (
        "custom", ("files:read", "runs:read"))
    for role, scopes, message in (
            ("root", (), "unknown role 'root': one of admin, operator"),
            ("viewer", ["runs:write"], "--scope gives the scopes of a custom key"),
            ("custom", [], "a custom key needs at least one --scope"),
            ("custom", ["runs:delete"], "unknown scope 'runs:delete'"),
            ("custom", ["runs:read\x1b[31m"], "unknown scope")):
        with pytest.raises(ConfigError, match=message):
            check_grant(role, scopes)


def test_agent_lists() -> None:
    assert check_key_agents(None) is None and check_key_agents([]) is None
    assert check_key_agents(["b", "a", "a"]) == ("a", "b")
    for bad in ("", "Crew", "crew;drop", "x" * 58, "é", "a b"):
        with pytest.raises(ConfigError, match="is not an agent name"):
            check_key_agents([bad])
    with pytest.raises(ConfigError, match="at most 100 agents"):
        check_key_agents([f"a{i}" for i in range(101)])


def test_key_names_may_not_look_like_the_cli() -> None:
    for name in ("cli:alice", "CLI:alice", " Cli:x"):
        with pytest.raises(ConfigError, match="may not start with 'cli:'"):
            check_key_name(name)
    assert check_key_name("client") == "client"  # only the cli: prefix is reserved


def test_expiry_takes_lifetimes_and_iso_times() -> None:
    assert parse_expiry("30d", NOW) == NOW + timedelta(days=30)
    assert parse_expiry("12h", NOW) == NOW + timedelta(hours=12)
    assert parse_expiry("90m", NOW) == NOW + timedelta(minutes=90)
    assert parse_expiry("2w", NOW) == NOW + timedelta(weeks=2)
    assert parse_expiry("2027-02-01", NOW) == datetime(2027, 2, 1, tzinfo=UTC)
    assert parse_expiry("2027-01-02T00:00:00+02:00", NOW).utcoffset() == timedelta(hours=2)
    for bad, message in (("", "neither a lifetime"), ("30 days", "neither a lifetime"),
                         ("-1d", "neither a lifetime"), ("0d", "not in the future"),
                         ("2026-12-31", "not in the future"), ("999999w", "ten years"),
                         ("999999999999w", "ten years"),
                         ("1" * 5000, "characters long"), ("30d\x00", "neither")):
        with pytest.raises(ConfigError, match=message):
            parse_expiry(bad, NOW)


def test_a_key_past_its_expiry_is_not_active() -> None:
    assert key().active and not key().expired
    past = key(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    assert past.expired and not past.active
    assert key(expires_at=datetime.now(UTC) + timedelta(days=1)).active
    assert key(agents=("crew",)).may_touch("crew") and not key(agents=("crew",)).may_touch("x")
    assert key().to_json()["role"] == "admin" and key().to_json()["agents"] is None


def test_approvers_match_keys_by_id_prefix_or_role_never_by_name() -> None:
    finance = Actor.of_key(key(role="approver"))
    impostor = Actor.of_key(key(id="6c1f0c5e-0000-4000-8000-000000000002",
                                prefix="toren_99999999", role="viewer"))
    assert finance.name == impostor.name == "finance-lead"
    for reference in ("key:6c1f0c5e-0000-4000-8000-000000000001", "key:toren_1a2b3c4d",
                      "key:1a2b3c4d", "key:TOREN_1A2B3C4D", "role:approver"):
        assert may_decide([reference], finance), reference
        assert not may_decide([reference], impostor), reference
    assert not may_decide(["finance-lead"], finance)  # a free-text name never matches
    assert not may_decide(["cli:finance-lead"], finance)
    assert may_decide([], impostor)  # no approvers: anyone who may decide
    alice = cli_actor({"TOREN_ACTOR": "alice"})
    assert alice.id == "cli:alice" and may_decide(["cli:alice"], alice)
    assert not may_decide(["role:admin", "key:1a2b3c4d"], alice)
    telegram = actor_of_label("telegram:123")
    assert may_decide(["telegram:123"], telegram) and not may_decide(["telegram:1234"], telegram)
    assert not may_decide(["cli:alice"], ANONYMOUS)
    assert finance.label == "finance-lead (key 6c1f0c5e-0000-4000-8000-000000000001)"


def test_approver_references_and_the_cli_actor_are_checked() -> None:
    for good in ("key:1a2b3c4d", "role:viewer", "cli:alice", "telegram:123", "slack:U0ABC"):
        assert check_approver(good) == good
    for bad in ("alice", "", ":x", "key:", "role:boss", "Cli:x", 7):
        with pytest.raises(ValueError):
            check_approver(bad)  # type: ignore[arg-type]
    for bad in ("", "  ", "two words", "x" * 101, "bell\x07"):
        with pytest.raises(ConfigError, match="TOREN_ACTOR must be a user name"):
            cli_actor({"TOREN_ACTOR": bad})
    assert cli_actor({}).id.startswith("cli:")
