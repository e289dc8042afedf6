"""The collector tuning of a process that runs workers: taken by the first, undone by the last."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from toren.host import gc_tuning


@pytest.fixture
def thresholds() -> Iterator[tuple[int, ...]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    while gc_tuning._holders:
        gc_tuning.untune_for_workers()
    gc.set_threshold(*before)


def test_first_tunes_last_restores(thresholds: tuple[int, ...]) -> None:
    gc_tuning.tune_for_workers()
    assert gc.get_threshold() == (gc_tuning.YOUNG_THRESHOLD, 10, 10)
    assert gc.get_freeze_count() > 0
    gc_tuning.tune_for_workers()  # a second runtime with workers in the process
    gc_tuning.untune_for_workers()
    assert gc.get_threshold() == (gc_tuning.YOUNG_THRESHOLD, 10, 10)  # the first still runs
    gc_tuning.untune_for_workers()
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == 0
    gc_tuning.untune_for_workers()  # unpaired: nothing to undo
    assert gc.get_threshold() == thresholds


def test_a_higher_threshold_of_the_process_is_kept(thresholds: tuple[int, ...]) -> None:
    gc.set_threshold(50_000, 20, 5)
    gc_tuning.tune_for_workers()
    assert gc.get_threshold() == (50_000, 20, 5)
    gc_tuning.untune_for_workers()
    assert gc.get_threshold() == (50_000, 20, 5)


def test_cycles_are_still_collected(thresholds: tuple[int, ...]) -> None:
    class Node:
        other: object = None

    gc_tuning.tune_for_workers()
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None
