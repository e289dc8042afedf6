"""Provider rate limits as configured: the limits file (TOREN_RATE_LIMITS) and an agent's
``limits.rate:``, with every mistake an error naming the file, the key and the fix; which
buckets a call takes from, and what it is estimated to take."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from toren.agents import load_agent
from toren.config import Settings
from toren.core.messages import Message, ModelRequest, ToolSpec
from toren.core.rate_limits import (
    BucketLimit,
    RateLimit,
    RateLimits,
    estimate_input_tokens,
    pause_targets,
)
from toren.errors import AgentDefinitionError, ConfigError

MakeAgentDir = Callable[..., Path]

GOOD = """\
limits:
  anthropic:                        # every Claude model
    requestsPerMinute: 4000
    inputTokensPerMinute: 400000
    outputTokensPerMinute: 80000
  anthropic/claude-sonnet-4-5:
    requestsPerMinute: 1000
  key:ANTHROPIC_API_KEY_TEAM_B:
    requestsPerMinute: 50
"""


def settings_with(tmp_path: Path, text: str | bytes, name: str = "limits.yaml") -> Settings:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return Settings.from_env({"TOREN_RATE_LIMITS": str(path)})


def config_error(tmp_path: Path, text: str | bytes) -> str:
    with pytest.raises(ConfigError) as info:
        settings_with(tmp_path, text)
    return str(info.value)


def test_no_limits_file_means_no_limits() -> None:
    assert Settings.from_env({}).rate_limits is None
    assert Settings.from_env({"TOREN_RATE_LIMITS": "  "}).rate_limits is None


def test_a_limits_file_is_read_and_every_matching_bucket_applies(tmp_path: Path) -> None:
    limits = settings_with(tmp_path, GOOD).rate_limits
    assert limits is not None and limits.window_s == 60
    assert limits.buckets["anthropic"] == RateLimit(4000, 400000, 80000)
    sonnet = limits.matching("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY")
    assert [b.name for b in sonnet] == ["anthropic", "anthropic/claude-sonnet-4-5",
                                        "key:ANTHROPIC_API_KEY"]
    # the key's own bucket is unlimited unless configured: what a 429 pauses for the fleet
    assert sonnet[2] == BucketLimit("key:ANTHROPIC_API_KEY", None, None, None)
    assert pause_targets(sonnet, "ANTHROPIC_API_KEY") == ("key:ANTHROPIC_API_KEY",)
    team_b = limits.matching("anthropic/claude-haiku-4-5", "ANTHROPIC_API_KEY_TEAM_B")
    assert [(b.name, b.requests) for b in team_b] == [("anthropic", 4000),
                                                      ("key:ANTHROPIC_API_KEY_TEAM_B", 50)]
    assert limits.matching("openai/gpt-5", None) == ()
    own = {"anthropic": RateLimit(requests=10)}
    mine = limits.matching("anthropic/claude-haiku-4-5", None, ("crew", own))
    assert [b.name for b in mine] == ["agent:crew:anthropic", "anthropic"]


def test_json_works_too_and_a_scaled_window_scales_the_limits(tmp_path: Path) -> None:
    limits = settings_with(tmp_path, '{"windowSeconds": 6, "limits": {"toren": '
                                     '{"requestsPerMinute": 60, "inputTokensPerMinute": 20000}}}',
                           "limits.json").rate_limits
    assert limits is not None
    assert limits.matching("toren/scripted", None) == (BucketLimit("toren", 6, 2000, None),)


@pytest.mark.parametrize(("text", "expected"), [
    ("limits: [1, 2]", "limits: expected a mapping of bucket names to limits"),
    ("limit:\n  anthropic: {requestsPerMinute: 1}\n", "unknown key 'limit'"),
    ("windowSeconds: 5\n", "missing 'limits:'"),
    ("- a\n- b\n", "expected a mapping with a 'limits:' key"),
    ("limits:\n  anthropic: {requestsPerMinte: 5}\n",
     "limits.anthropic.requestsPerMinte: unknown field; use requestsPerMinute"),
    ("limits:\n  anthropic: {requestsPerMinute: 0}\n",
     "limits.anthropic.requestsPerMinute: expected a whole number from 1 to"),
    ("limits:\n  anthropic: {requestsPerMinute: -5}\n", "got -5"),
    ("limits:\n  anthropic: {requestsPerMinute: 1.5}\n", "got 1.5"),
    ("limits:\n  anthropic: {requestsPerMinute: true}\n", "got True"),
    ("limits:\n  anthropic: {requestsPerMinute: '100'}\n", "got '100'"),
    ("limits:\n  anthropic: {requestsPerMinute: 100000000000000}\n", "from 1 to 1000000000"),
    ("limits:\n  anthropic: {}\n", "limits.anthropic: expected a mapping with at least one"),
    ("limits:\n  anthropic: 5\n", "limits.anthropic: expected a mapping"),
    ("limits:\n  'key:sk-ant-123': {requestsPerMinute: 5}\n", "is not a bucket name"),
    ("limits:\n  'anthropic /x': {requestsPerMinute: 5}\n", "is not a bucket name"),
    ("limits:\n  'agent:x:anthropic': {requestsPerMinute: 5}\n", "is not a bucket name"),
    ("limits:\n  \"anth\\u0000ropic\": {requestsPerMinute: 5}\n", "is not a bucket name"),
    ("limits:\n  anthropic: {requestsPerMinute: 5}\nwindowSeconds: 0\n",
     "windowSeconds: expected seconds from 0.1 to 3600"),
    ("limits: {a: 1\n", "not valid YAML or JSON"),
])
def test_a_bad_limits_file_is_an_error_naming_the_file_and_the_key(
        tmp_path: Path, text: str, expected: str) -> None:
    message = config_error(tmp_path, text)
    assert str(tmp_path / "limits.yaml") in message
    assert expected in message


def test_an_unreadable_or_huge_limits_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"TOREN_RATE_LIMITS=.*cannot read the limits file"):
        Settings.from_env({"TOREN_RATE_LIMITS": str(tmp_path / "missing.yaml")})
    assert "not valid YAML or JSON" in config_error(tmp_path, b"\xff\xfe limits")
    assert "larger than" in config_error(tmp_path, b"#" * 1_000_001)


def test_an_agent_s_limits_rate_loads_and_its_mistakes_name_the_field(
        make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="""\
        model: toren/scripted
        limits:
          maxSteps: 5
          rate:
            anthropic: {requestsPerMinute: 10, outputTokensPerMinute: 2000}
        """)
    agent = load_agent(directory)
    assert agent.limits.rate == {"anthropic": RateLimit(requests=10, output_tokens=2000)}
    assert agent.limits.to_json()["rate"] == {
        "anthropic": {"requestsPerMinute": 10, "outputTokensPerMinute": 2000}}
    for body, expected in (("anthropic: {requestsPerMinute: 0}", "requestsPerMinute"),
                           ("anthropic: {tokensPerMinute: 5}", "tokensPerMinute"),
                           ("'sk ant': {requestsPerMinute: 5}", "sk ant"),
                           ("anthropic: {}", "rate")):
        bad = make_agent_dir(agent_yaml=f"model: toren/scripted\nlimits:\n  rate:\n    {body}\n")
        with pytest.raises(AgentDefinitionError) as info:
            load_agent(bad)
        assert str(bad / "agent.yaml") in str(info.value)
        assert expected in str(info.value), str(info.value)


def test_a_definition_without_rate_limits_keeps_its_shape() -> None:
    from toren.core.limits import Limits

    assert "rate" not in Limits().to_json()  # an unchanged agent keeps its version digest


def test_the_input_estimate_counts_characters_of_everything_sent() -> None:
    request = ModelRequest(model="m", system="s" * 400,
                           messages=(Message("user", "u" * 800),),
                           tools=(ToolSpec("t", "d" * 399, {}),))
    assert estimate_input_tokens(request) == (400 + 800 + 1 + 399 + 2) // 4 + 1
    assert RateLimits({}).matching("anthropic/x", None) == ()
    # no limits file: no key bucket either (only an agent's own limits.rate applies)
    assert RateLimits({}, configured=False).matching("anthropic/x", "ANTHROPIC_API_KEY") == ()
