"""``toren top``'s live view renders a snapshot (the JSON of ``toren top --json``)."""

from __future__ import annotations

from rich.console import Console

from toren.cli.top import render

SNAPSHOT = {
    "at": "2026-12-01T14:46:20+00:00",
    "workers": [{"id": "vm-1-abcd", "version": "0.1.0", "agents": ["slow", "fast"],
                 "hostname": "vm", "pid": 1, "started_at": "2026-12-01T14:40:00+00:00",
                 "last_heartbeat": "2026-12-01T14:46:18+00:00"}],
    "versions": ["0.1.0"],
    "agents": {"slow": {"queue": {"ready": 3, "in_flight": 2, "delayed": 1,
                                  "oldest_ready_age_s": 12.25},
                        "dead_letters": 4, "runs": {"running": 2, "queued": 3}},
               "gone": {"queue": None, "dead_letters": 0, "runs": {}}},
    "runs_in_flight": [{"id": "fabef7f0-732c-4dfa-a074-ceee81199de7", "agent": "slow",
                        "status": "running", "step": 7, "tasks": 3, "elapsed_s": 95.0,
                        "created_at": "2026-12-01T14:44:45+00:00",
                        "updated_at": "2026-12-01T14:46:19+00:00",
                        "error": {"code": "rate_limited", "message": "429 from the provider"}}],
    "recent_failures": [{"id": "0e73dd0e-4db7-4cfa-a70f-51bfbd484e69", "agent": "slow",
                         "stop_reason": "error", "error": {"message": "[red]the plan[/red]"},
                         "finished_at": "2026-12-01T14:36:20+00:00"}],
}


def test_the_live_view_shows_every_part_of_the_snapshot() -> None:
    console = Console(width=200, record=True, no_color=True)
    console.print(render(SNAPSHOT))
    text = console.export_text()
    assert "workers (0.1.0)" in text and "vm-1-abcd" in text and "slow, fast" in text
    assert "2s ago" in text
    for cell in ("slow", "12.2s", "queued 3, running 2"):
        assert cell in text
    assert "fabef7f0" in text and "95s" in text and "429 from the provider" in text
    assert "0e73dd0e" in text and "10m ago" in text
    assert "[red]the plan[/red]" in text  # markup in data is shown, not interpreted
