"""The cyclic garbage collector of a process that runs workers.

CPython's collector runs a young-generation pass every 700 net allocations of container objects
and, when enough objects have survived, a full pass over every object it tracks, including the
tens of thousands a worker makes at start-up (modules, classes, plugins, agent definitions) that
live as long as the process. With 1,000 runs in flight it took 17-20% of the worker's CPU
(bench/README.md, figure 9: 1.2 of 7 CPU seconds, 100 ms per full pass) while it found almost
nothing to collect (a few thousand objects over 4,000 model calls): runs' objects are freed by
reference counting.

While a ``Runtime`` of the process runs workers, therefore:

- what exists when the first one has started is frozen (``gc.freeze``, after a collection of
  the young generations): full passes no longer walk it. Not after a full collection: that
  blocks the event loop for as long as the heap is big (0.5 s in a test process); cyclic
  garbage already in the oldest generation then is kept until the workers stop;
- the young generation's threshold is raised to ``YOUNG_THRESHOLD``, unless the process had set
  a higher one itself.

The last such ``Runtime`` to stop undoes both (``gc.unfreeze``, the thresholds as they were).
Nothing else changes: objects are still freed by reference counting, and reference cycles are
still collected, a little later.
"""

from __future__ import annotations

import gc

#: Net container allocations between young-generation passes while workers run (CPython's
#: default is 700): fewer passes, and fewer short-lived objects promoted to older generations.
YOUNG_THRESHOLD = 10_000

_holders = 0
_saved_threshold: tuple[int, ...] | None = None


def tune_for_workers() -> None:
    """Freeze the objects that exist now and raise the young threshold (the first call of the
    process; later calls only count). Each call is paired with ``untune_for_workers``."""
    global _holders, _saved_threshold
    _holders += 1
    if _holders > 1:
        return
    _saved_threshold = gc.get_threshold()
    gc.collect(1)  # the young generations only: quick, whatever the size of the heap
    gc.freeze()
    young, *older = _saved_threshold
    if young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, *older)


def untune_for_workers() -> None:
    """Undo ``tune_for_workers`` when its last caller is done."""
    global _holders, _saved_threshold
    if _holders == 0:
        return
    _holders -= 1
    if _holders > 0:
        return
    gc.unfreeze()
    if _saved_threshold is not None:
        gc.set_threshold(*_saved_threshold)
        _saved_threshold = None
