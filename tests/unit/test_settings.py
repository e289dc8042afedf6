"""Numeric settings, the kernel's and the provider plugins', are read by one parser."""

from __future__ import annotations

import pytest
from toren_anthropic.provider import timeout_from_env as anthropic_timeout
from toren_openai.provider import timeout_from_env as openai_timeout

from toren.config import Settings
from toren.errors import ConfigError


@pytest.mark.parametrize(("raw", "problem"), [("0", "greater than zero"),
                                              ("-1", "greater than zero"),
                                              ("nan", "greater than zero"),
                                              ("soon", "not a valid float")])
def test_a_bad_number_names_the_variable(raw: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"TOREN_LEASE_TTL={raw!r} .*{problem}"):
        Settings.from_env({"TOREN_LEASE_TTL": raw})


def test_provider_timeouts_use_the_same_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_ANTHROPIC_TIMEOUT", "12.5")
    monkeypatch.setenv("TOREN_OPENAI_TIMEOUT", "nan")
    assert anthropic_timeout() == 12.5
    with pytest.raises(ConfigError, match="TOREN_OPENAI_TIMEOUT='nan' must be greater than zero"):
        openai_timeout()
    assert Settings.from_env({}).lease_ttl_s == 5.0  # unset: the default


@pytest.mark.parametrize(("raw", "on"), [(None, True), ("1", True), ("0", False),
                                          ("off", False), ("false", False)])
def test_group_commit_is_on_unless_turned_off(raw: str | None, on: bool) -> None:
    env = {} if raw is None else {"TOREN_GROUP_COMMIT": raw}
    assert Settings.from_env(env).group_commit is on


def test_a_group_commit_switch_that_is_neither_on_nor_off_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="TOREN_GROUP_COMMIT='maybe' is not on or off"):
        Settings.from_env({"TOREN_GROUP_COMMIT": "maybe"})
