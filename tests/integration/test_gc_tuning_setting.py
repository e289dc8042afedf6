"""``TOREN_GC_TUNING``: a runtime's workers tune the process's collector unless told not to."""

from __future__ import annotations

import gc
from pathlib import Path

from toren.config import Settings
from toren.testing import write_agent_dir


def test_the_setting_is_read_from_the_environment() -> None:
    assert Settings.from_env({}).gc_tuning is True
    assert Settings.from_env({"TOREN_GC_TUNING": "0"}).gc_tuning is False


async def test_workers_tune_the_collector_unless_told_not_to(make_runtime,
                                                            tmp_path: Path) -> None:
    before = gc.get_threshold()
    directory = write_agent_dir(tmp_path, "plain")
    untuned = await make_runtime(dirs=[directory], gc_tuning=False)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    await untuned.stop()

    tuned = await make_runtime(dirs=[directory])
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] >= 10_000
    await tuned.stop()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
