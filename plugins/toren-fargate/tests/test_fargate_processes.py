"""A Fargate task whose worker runs as several processes (``toren worker --processes N``,
``TOREN_SUPERVISOR_SLOT``): each process has its own health port, and the task's scale-in
protection, one state per task, is set by slot 1 alone, on while any sibling is busy."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from toren_fargate.runtime import FargateRuntime
from toren_fargate.settings import FargateSettings
from toren_fargate.siblings import FRESH_S, BusyMarks
from toren_fargate.testing import FakeEcsAgent

from toren.plugin import Settings


@pytest.fixture
def ecs_agent() -> Iterator[FakeEcsAgent]:
    agent = FakeEcsAgent().start()
    yield agent
    agent.stop()


def runtime(agent_url: str, slot: int | None, tmp: Path,
            monkeypatch: pytest.MonkeyPatch) -> FargateRuntime:
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    settings = Settings(supervisor="vm-7-abc" if slot else None, supervisor_slot=slot,
                        shutdown_grace_s=5.0)
    return FargateRuntime(settings, FargateSettings.from_env(
        {"ECS_AGENT_URI": agent_url, "TOREN_FARGATE_HEALTH_PORT": "8081"}))


def test_each_process_listens_on_its_own_health_port_and_only_slot_1_speaks_for_the_task(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone, first, third = (runtime("http://agent", slot, tmp_path, monkeypatch)
                           for slot in (None, 1, 3))
    assert (alone.health_port, first.health_port, third.health_port) == (8081, 8081, 8083)
    assert alone.protection is not None and alone.marks is None
    assert first.protection is not None and first.marks is not None
    assert third.protection is None and third.marks is not None
    assert "health on :8083/healthz" in third.description


async def test_slot_1_keeps_the_task_protected_while_a_sibling_is_busy(
        ecs_agent: FakeEcsAgent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = runtime(ecs_agent.url, 1, tmp_path, monkeypatch)
    second = runtime(ecs_agent.url, 2, tmp_path, monkeypatch)
    assert first.protection is not None
    first.protection.idle_before_release_s = 0.0
    try:
        # slot 2 busy (it marks itself; it never calls the agent); slot 1 idle: protected
        monkeypatch.setattr(FargateRuntime, "busy", property(lambda self: self is second))
        await second._protect()
        assert ecs_agent.states() == []
        await first._protect()
        assert ecs_agent.states() == [True]
        # slot 2 idle again: slot 1 gives the protection up
        monkeypatch.setattr(FargateRuntime, "busy", property(lambda self: False))
        await second._protect()
        await first._protect()
        assert ecs_agent.states() == [True, False]
    finally:
        await first.protection.close()


def test_a_mark_left_by_a_dead_process_stops_counting(tmp_path: Path) -> None:
    first, second = BusyMarks("vm-7-abc", 1, tmp_path), BusyMarks("vm/7 x", 2, tmp_path)
    other = BusyMarks("vm/7 x", 1, tmp_path)
    assert not first.others_busy()  # no directory yet
    second.mark(True)
    assert other.others_busy() and not first.others_busy()  # one supervisor's marks only
    assert not second.others_busy()  # its own mark is not a sibling's
    stale = time.time() - FRESH_S - 1
    os.utime(second.directory / "slot-2", (stale, stale))
    assert not other.others_busy()
    second.mark(False)
    second.mark(False)  # idempotent
    assert list(second.directory.iterdir()) == []
