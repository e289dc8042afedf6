"""Runtime lanes without a database: ``runtime:`` in agent.yaml, ``TOREN_LANE``, which agents a
lane holds, what ``toren top`` says of work no live worker serves."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from toren.agents import load_agent
from toren.cli.top import render
from toren.config import Settings, worker_lane
from toren.errors import AgentDefinitionError, ConfigError
from toren.host.fleet import unserved
from toren.host.lanes import agents_in_lane
from toren.seams.store.fleet import FleetGauges, QueueGauge
from toren.testing import write_agent_dir


def test_runtime_defaults_to_short_and_takes_long(tmp_path: Path) -> None:
    assert load_agent(write_agent_dir(tmp_path, "quick")).runtime == "short"
    slow = load_agent(write_agent_dir(tmp_path, "slow", runtime="long"))
    assert slow.runtime == "long" and slow.to_json()["runtime"] == "long"


@pytest.mark.parametrize("value", ["medium", "LONG", 1, True, None, ["long"], "long\n",
                                   "\uff4c\uff4f\uff4e\uff47"])  # fullwidth "long"
def test_a_runtime_that_is_not_short_or_long_names_the_file_and_line(tmp_path: Path,
                                                                      value: object) -> None:
    directory = write_agent_dir(tmp_path, "crew", runtime=value)
    with pytest.raises(AgentDefinitionError) as caught:
        load_agent(directory)
    message = str(caught.value)
    assert str(directory / "agent.yaml") in message and "runtime" in message
    assert "short" in message and "long" in message


def test_a_misspelt_runtime_key_is_pointed_at(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "crew", runtme="long")
    with pytest.raises(AgentDefinitionError, match="did you mean 'runtime'"):
        load_agent(directory)


def test_toren_lane_defaults_to_all_and_is_checked() -> None:
    assert Settings.from_env({}).lane == "all"
    assert Settings.from_env({"TOREN_LANE": " Long "}).lane == "long"
    for bad in ("medium", "short,long", "\x00", "x" * 5000):
        with pytest.raises(ConfigError, match=r"TOREN_LANE=.* is not a lane: use short"):
            Settings.from_env({"TOREN_LANE": bad})
    with pytest.raises(ConfigError) as caught:
        worker_lane("y" * 5000, "--lane")
    assert len(caught.value.message) < 200


class Spec:
    def __init__(self, name: str, runtime: str) -> None:
        self.name, self.runtime = name, runtime


def test_a_lane_is_the_agents_of_that_runtime_and_all_is_every_agent() -> None:
    agents = [Spec("quick", "short"), Spec("slow", "long"), Spec("chat", "short")]
    assert agents_in_lane(agents, "short") == ["quick", "chat"]
    assert agents_in_lane(agents, "long") == ["slow"]
    assert agents_in_lane(agents, "all") == ["quick", "slow", "chat"]
    assert agents_in_lane([], "long") == []


def test_work_waiting_that_no_live_worker_serves_is_listed_with_its_lane() -> None:
    gauges = FleetGauges(queue={"slow": QueueGauge(ready=2, delayed=1),
                                "quick": QueueGauge(ready=4),
                                "idle": QueueGauge()},
                         active_runs={"slow": {"queued": 3}, "parked": {"awaiting_input": 1}})
    found = unserved(["idle", "parked", "quick", "slow", "other"], gauges,
                     {"quick": 2}, {"slow": "long", "quick": "short"})
    assert [(e["agent"], e["lane"], e["waiting"], e["active_runs"]) for e in found] == [
        ("slow", "long", 3, 3)]
    assert found[0]["message"] == ("no live worker serves lane long: slow has 3 message(s) "
                                   "waiting and 3 unfinished run(s)")
    gauges = FleetGauges(queue={"gone": QueueGauge(in_flight=1)})
    (entry,) = unserved(["gone"], gauges, {}, {})
    assert entry["lane"] is None and entry["message"].startswith(
        "no live worker serves agent gone:")


def test_top_shows_each_workers_and_agents_lane_and_says_what_waits_unserved() -> None:
    snapshot = {
        "at": "2026-12-01T14:46:20+00:00",
        "workers": [{"id": "vm-1-abcd", "version": "0.1.0", "agents": ["quick"],
                     "hostname": "vm", "pid": 1, "started_at": "2026-12-01T14:40:00+00:00",
                     "last_heartbeat": "2026-12-01T14:46:18+00:00", "lane": "short"}],
        "versions": ["0.1.0"],
        "agents": {"quick": {"queue": None, "dead_letters": 0, "runs": {}, "lane": "short",
                             "served_by": 1},
                   "slow": {"queue": {"ready": 1, "in_flight": 0, "delayed": 0,
                                      "oldest_ready_age_s": 3.0},
                            "dead_letters": 0, "runs": {"queued": 1}, "lane": "long",
                            "served_by": 0}},
        "unserved": [{"agent": "slow", "lane": "long", "waiting": 1, "active_runs": 1,
                      "message": "no live worker serves lane long: slow has 1 message(s) "
                                 "waiting and 1 unfinished run(s) [red]x[/red]"}],
        "runs_in_flight": [], "recent_failures": []}
    console = Console(width=200, record=True, no_color=True)
    console.print(render(snapshot))
    text = console.export_text()
    assert "lane" in text and "short" in text and "long" in text
    assert "! no live worker serves lane long: slow has 1 message(s) waiting" in text
    assert "[red]x[/red]" in text  # markup in data is shown, not interpreted
    # a snapshot from a server without lanes still renders
    for key in ("unserved",):
        snapshot.pop(key)
    for worker in snapshot["workers"]:
        worker.pop("lane")
    console.print(render(snapshot))
