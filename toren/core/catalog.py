"""The event catalog as data: type names to classes, decoding stored events, and the JSON Schema.

``schemas/events.schema.json`` is generated from the event classes by ``catalog_schema``
(``python -m toren.schemas --write`` rewrites it; a test fails when the file is stale), so
the classes stay the single source of truth. ``validate_event`` checks stored JSON against that
schema (the tests do, for every event they see appended).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

import msgspec

from toren.core import events as ev
from toren.core.fold import TaskCheckpoint

if TYPE_CHECKING:
    import jsonschema

#: Every event type by its name in the log.
_CLASSES: list[type[msgspec.Struct]] = [*ev.EVENT_CLASSES, TaskCheckpoint]
EVENT_TYPES: dict[str, type[msgspec.Struct]] = {cls.__name__: cls for cls in _CLASSES}


class UnknownEventType(ValueError):
    """The log holds an event type this version of Toren does not know."""


def decode(event_type: str, data: dict[str, Any]) -> Any:
    """The typed event for stored ``(type, data)``; ``msgspec.ValidationError`` names the field
    when the data does not match its class."""
    cls = EVENT_TYPES.get(event_type)
    if cls is None:
        raise UnknownEventType(f"unknown event type {event_type!r}")
    return msgspec.convert(data, cls)


def decode_events(events: Iterable[ev.Event]) -> Iterator[Any]:
    """The typed payloads of stored events, in order."""
    for event in events:
        yield decode(event.type, event.data)


def catalog_schema() -> dict[str, Any]:
    """The JSON Schema of the event envelope and of every event type's data."""
    classes = list(EVENT_TYPES.values())
    _refs, components = msgspec.json.schema_components(classes, ref_template="#/$defs/{name}")
    for name, cls in EVENT_TYPES.items():
        components[name] = {"x-stream": cls.stream, **components[name]}  # type: ignore[attr-defined]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://toren.dev/schemas/events.schema.json",
        "title": "Toren event catalog",
        "description": (
            "Every event type Toren appends, the stream it belongs on (x-stream: run, task or "
            "signals) and its data. An event is (run_id, stream, seq, type, data, created_at); "
            "streams are 'run', 'task:<task id>' and 'signals'. Generated from "
            "toren/core/events.py."),
        "type": "object",
        "required": ["stream", "seq", "type", "data"],
        "properties": {
            "run_id": {"type": "string", "format": "uuid"},
            "stream": {"type": "string", "pattern": "^(run|signals|task:.+)$"},
            "seq": {"type": "integer", "minimum": 1},
            "type": {"enum": list(EVENT_TYPES)},
            "data": {"type": "object"},
            "created_at": {"type": ["string", "null"]},
        },
        "$defs": dict(sorted(components.items())),
    }


def render_schema() -> str:
    """The catalog as the text of ``schemas/events.schema.json``."""
    return json.dumps(catalog_schema(), indent=2, ensure_ascii=False) + "\n"


@cache
def _validators() -> dict[str, jsonschema.Draft202012Validator]:
    import jsonschema  # only tests validate stored events: keep it off the CLI's start path

    schema = catalog_schema()
    return {name: jsonschema.Draft202012Validator({**schema["$defs"][name],
                                                   "$defs": schema["$defs"]})
            for name in EVENT_TYPES}


def validate_event(stream: str, event_type: str, data: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless the event matches the catalog."""
    import jsonschema

    cls = EVENT_TYPES.get(event_type)
    if cls is None:
        raise jsonschema.ValidationError(f"unknown event type {event_type!r}")
    expected = cls.stream  # type: ignore[attr-defined]
    actual = stream if stream in (ev.RUN_STREAM, ev.SIGNALS_STREAM) else "task"
    if expected != actual:
        raise jsonschema.ValidationError(
            f"{event_type} belongs on a {expected} stream, not {stream!r}")
    _validators()[event_type].validate(data)
