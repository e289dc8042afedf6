"""Log output: human-readable (rich) by default or one JSON object a line
(``TOREN_LOG_FORMAT=json``), with the run, task and worker ids of the work in hand on every
line and secrets masked."""

from __future__ import annotations

import json
import logging
import os
import re
import traceback
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from toren.errors import ConfigError
from toren.seams.log_context import LOG_CONTEXT

#: ``TOREN_LOG_FORMAT`` values: ``rich`` (colours, the default on a terminal), ``plain`` (one
#: ``time level logger [ids] message`` line) and ``json``.
FORMATS = ("rich", "plain", "json")
#: Environment variables whose values are secrets, by name.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
#: Toren API keys (``toren_<8 hex>_<secret>``) wherever they appear: the secret part goes.
_TOREN_KEY = re.compile(r"(toren_[0-9a-f]{8}_)[A-Za-z0-9_\-]{20,}")
#: ``password=...`` in a libpq key=value connection string.
_CONNINFO_PASSWORD = re.compile(r"(?:^|\s)password=([^\s']+)")
#: Shorter values are not masked: they would mask ordinary words.
MIN_SECRET_CHARS = 8
MASK = "***"
#: The context ids, in the order the plain format prints them.
CONTEXT_KEYS = ("worker_id", "agent", "run_id", "task_id")


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values to mask: those of variables named like secrets (``*_API_KEY``, ``*_TOKEN``,
    ...) and passwords in URLs (``DATABASE_URL``), longest first."""
    found: set[str] = set()
    for name, value in env.items():
        if _SECRET_NAME.search(name) and len(value) >= MIN_SECRET_CHARS:
            found.add(value)
        for password in _CONNINFO_PASSWORD.findall(value):  # libpq key=value strings
            if len(password) >= MIN_SECRET_CHARS:
                found.add(password)
        if "://" in value:
            try:
                password = urlsplit(value).password
            except ValueError:
                password = None
            if password and len(password) >= MIN_SECRET_CHARS:
                found.add(password)
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value and the secret part of Toren API keys masked."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return _TOREN_KEY.sub(r"\1" + MASK, text) if "toren_" in text else text


class ContextFilter(logging.Filter):
    """Adds the ids of the work in hand (``toren.seams.telemetry.log_context``) to each record
    as ``record.toren`` and masks secrets in its message (args merged in first)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = list(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        record.toren = LOG_CONTEXT.get()
        message = record.getMessage()
        masked = redact(message, self.secrets)
        if record.exc_info and not record.exc_text:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if masked != message or record.args:
            record.msg, record.args = masked, None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time``, ``level``, ``logger``, ``message``, the context ids
    present, and ``exception`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name,
            "message": record.getMessage()}
        line |= getattr(record, "toren", {})
        if record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


class PlainFormatter(logging.Formatter):
    """``time level logger [worker=... run=... task=...] message``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(ids)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.ids = _ids_text(getattr(record, "toren", {}))
        return super().format(record)


class _RichContextFormatter(logging.Formatter):
    """The message, then the context ids in brackets (rich prints time and level)."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage() + _ids_text(getattr(record, "toren", {}))
        return f"{text}\n{record.exc_text}" if record.exc_text else text


def _ids_text(ids: Mapping[str, str]) -> str:
    shown = [f"{key.removesuffix('_id')}={ids[key]}" for key in CONTEXT_KEYS if key in ids]
    return f" [{' '.join(shown)}]" if shown else ""


def log_format(env: Mapping[str, str]) -> str:
    """``TOREN_LOG_FORMAT`` (default ``rich``); ``ConfigError`` for an unknown one."""
    chosen = env.get("TOREN_LOG_FORMAT", "").strip().lower() or "rich"
    if chosen not in FORMATS:
        raise ConfigError(f"TOREN_LOG_FORMAT={env['TOREN_LOG_FORMAT']!r} is not one of "
                          f"{', '.join(FORMATS)}")
    return chosen


def make_handler(format: str, *, stream: Any = None, rich_console: Any = None,
                 env: Mapping[str, str] | None = None) -> logging.Handler:
    """A handler writing ``format`` (``FORMATS``) to ``stream`` (stderr by default; rich
    writes to ``rich_console``), with the context ids and secrets masked."""
    handler: logging.Handler
    if format == "rich":
        from rich.logging import RichHandler

        handler = RichHandler(console=rich_console, show_path=False, rich_tracebacks=False)
        handler.setFormatter(_RichContextFormatter())
    else:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(JsonFormatter() if format == "json" else PlainFormatter())
    handler.addFilter(ContextFilter(secret_values(os.environ if env is None else env)))
    return handler
