"""The ids every log line carries (``run_id``, ``task_id``, ``worker_id``, ``agent``): a
context variable the worker sets per message and ``toren.logs`` reads per record. Its own
module, so the CLI's logging set-up does not import the telemetry seam."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from types import MappingProxyType

#: ``run_id``, ``task_id``, ``worker_id`` (and ``agent``) of the work this coroutine does; the
#: log formatter adds them to every line (``toren.logs``). Set by the worker per message.
LOG_CONTEXT: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "toren_log_context", default=MappingProxyType({}))


@contextlib.contextmanager
def log_context(**ids: str | None) -> Iterator[None]:
    """Add ``ids`` (those not ``None``) to every log line emitted inside the block, in this
    coroutine and the tasks and threads it starts with a copied context."""
    merged = dict(LOG_CONTEXT.get())
    merged.update((key, value) for key, value in ids.items() if value is not None)
    token = LOG_CONTEXT.set(merged)
    try:
        yield
    finally:
        LOG_CONTEXT.reset(token)
