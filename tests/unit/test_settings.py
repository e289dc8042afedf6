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
