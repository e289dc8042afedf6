"""TOREN_CRASH_AT parsing: a typo must stop startup, not silently never crash."""

from __future__ import annotations

import pytest

from toren.config import Settings
from toren.crashpoints import POINTS, parse
from toren.errors import ConfigError


def test_points_parse_with_counts() -> None:
    assert parse("after_tool, after_append@3") == {"after_tool": 1, "after_append": 3}
    assert parse(None) == {} and parse("") == {}
    assert Settings.from_env({"TOREN_CRASH_AT": "mid_compaction"}).crash_at == {
        "mid_compaction": 1}


@pytest.mark.parametrize("value", ["after_tools", "after_tool@0", "after_tool@x"])
def test_unknown_points_and_bad_counts_are_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="TOREN_CRASH_AT") as raised:
        Settings.from_env({"TOREN_CRASH_AT": value})
    if "@" not in value:
        assert all(point in raised.value.message for point in POINTS)

