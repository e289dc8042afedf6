"""agent.yaml concurrency: and priority:, checked at load with the file and field named; a run's
priority and key (toren.core.flow); a queue without flow control refuses such agents."""

from __future__ import annotations

from pathlib import Path

import pytest

from toren.agents import load_agent
from toren.config import Settings
from toren.core.flow import Concurrency, check_priority, run_flow
from toren.errors import AgentDefinitionError, ConfigError, InvalidFlowControl
from toren.host.flow import check_flow_control
from toren.testing import write_agent_dir


def load_error(directory: Path) -> AgentDefinitionError:
    with pytest.raises(AgentDefinitionError) as info:
        load_agent(directory)
    return info.value


def test_concurrency_and_priority_load(tmp_path: Path) -> None:
    plain = load_agent(write_agent_dir(tmp_path, "plain"))
    assert (plain.concurrency, plain.priority) == (None, 0)
    limited = load_agent(write_agent_dir(tmp_path, "limited", concurrency=3, priority=-5))
    assert limited.concurrency == Concurrency(limit=3)
    assert limited.priority == -5
    floats = load_agent(write_agent_dir(tmp_path, "floats", concurrency=3.0, priority=2.0))
    assert (floats.concurrency, floats.priority) == (Concurrency(limit=3), 2)
    keyed = load_agent(write_agent_dir(tmp_path, "keyed", priority=100, concurrency={
        "limit": 2, "key": "input.customer.id"}))
    assert keyed.concurrency == Concurrency(limit=2, key="input.customer.id")
    assert keyed.to_json()["concurrency"] == {"limit": 2, "key": "input.customer.id"}
    assert keyed.to_json()["priority"] == 100


@pytest.mark.parametrize(("field", "value"), [
    ("priority", "high"), ("priority", 101), ("priority", -101), ("priority", 10**9),
    ("priority", None), ("priority", 1.5), ("priority", True), ("priority", [1]),
    ("concurrency", 0), ("concurrency", -1), ("concurrency", "3"), ("concurrency", 10**9),
    ("concurrency", None), ("concurrency", {"key": "input.a"}),
    ("concurrency", {"limit": "two"}), ("concurrency", {"limit": 2, "key": "customer"}),
    ("concurrency", {"limit": 2, "key": "input."}), ("concurrency", {"limit": 2, "key": ""}),
    ("concurrency", {"limit": 2, "key": "input.a b"}),
    ("concurrency", {"limit": 2, "key": "input.\u202ea"}),
    ("concurrency", {"limit": 2, "key": ["input.a"]}),
    ("concurrency", {"limit": 2, "lmit": 3}),
])
def test_a_bad_value_is_refused_at_load_naming_the_file_and_field(
        tmp_path: Path, field: str, value: object) -> None:
    directory = write_agent_dir(tmp_path, "bad", **{field: value})
    error = load_error(directory)
    assert str(directory / "agent.yaml") in error.message
    assert field in error.message


def test_check_priority_says_what_is_wrong() -> None:
    assert check_priority(-100) == -100
    assert check_priority(-75.0) == -75  # JSON Schema's integer: no fraction
    for value in ("high", "1", 1.5, float("nan"), float("inf"), True, None, 101, -10**12,
                  100.5):
        with pytest.raises(InvalidFlowControl, match="-100 to 100"):
            check_priority(value)


def test_a_runs_flow_takes_its_key_from_its_input_or_its_session() -> None:
    by_customer = Concurrency(limit=1, key="input.customer")
    assert run_flow(by_customer, 3, {"customer": "acme"}, run_id="r") == (3, "acme")
    assert run_flow(by_customer, 3, {"customer": True}, run_id="r", priority=-1) == (-1, "true")
    assert run_flow(by_customer, 0, {"customer": 7.5}, run_id="r") == (0, "7.5")
    # a scheduled run that lacks the key takes its schedule's key instead of failing
    assert run_flow(by_customer, 0, "text", run_id="r", fallback_key="schedule:s") == (
        0, "schedule:s")
    with pytest.raises(InvalidFlowControl, match=r"has no input\.customer"):
        run_flow(by_customer, 0, "text", run_id="r")
    per_session = Concurrency(limit=2, key="session")
    assert run_flow(per_session, 0, None, run_id="own") == (0, "own")
    assert run_flow(per_session, 0, None, run_id="child", parent_run_id="parent") == (
        0, "parent")
    assert run_flow(Concurrency(limit=2), 0, "x", run_id="r") == (0, None)
    assert run_flow(None, 5, "x", run_id="r") == (5, None)


def test_a_queue_without_flow_control_refuses_agents_that_set_it(tmp_path: Path) -> None:
    plain = load_agent(write_agent_dir(tmp_path, "plain"))
    limited = load_agent(write_agent_dir(tmp_path, "limited", concurrency=2))
    urgent = load_agent(write_agent_dir(tmp_path, "urgent", priority=5))
    check_flow_control([plain, limited, urgent], "postgres", True)
    check_flow_control([plain], "sqs", False)
    for agent, field in ((limited, "concurrency:"), (urgent, "priority:")):
        with pytest.raises(ConfigError, match=field) as info:
            check_flow_control([plain, agent], "sqs", False)
        assert str(agent.directory / "agent.yaml") in info.value.message
        assert "TOREN_QUEUE=sqs" in info.value.message


def test_the_aging_setting_must_be_positive() -> None:
    assert Settings.from_env({"TOREN_PRIORITY_AGING_S": "0.5"}).priority_aging_s == 0.5
    assert Settings.from_env({}).priority_aging_s == 30.0
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError, match="TOREN_PRIORITY_AGING_S"):
            Settings.from_env({"TOREN_PRIORITY_AGING_S": bad})
