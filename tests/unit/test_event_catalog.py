"""schemas/events.schema.json, the event classes (toren/core/events.py) and
docs/reference/events.md stay in step."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from toren.core import events as ev
from toren.core.catalog import EVENT_TYPES, render_schema, validate_event
from toren.schemas import load_schema

ROOT = Path(__file__).resolve().parents[2]
CATALOG = load_schema("events.schema.json")
TYPES = CATALOG["properties"]["type"]["enum"]
CONSTANTS = {value for name, value in vars(ev).items()
             if name.isupper() and isinstance(value, str) and value[0].isupper()
             and value.isidentifier()}


def test_the_catalog_is_a_valid_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(CATALOG)


def test_the_catalog_file_is_generated_from_the_event_classes() -> None:
    assert json.loads(render_schema()) == CATALOG, (
        "schemas/events.schema.json is stale: run python -m toren.schemas --write")


def test_every_event_type_has_a_class_and_a_stream() -> None:
    assert set(TYPES) == set(EVENT_TYPES)
    for name in TYPES:
        assert CATALOG["$defs"][name]["x-stream"] in ("run", "task", "signals")


def test_every_event_type_in_the_code_is_in_the_catalog_and_back() -> None:
    assert set(TYPES) == CONSTANTS


@pytest.mark.parametrize("event_type", TYPES)
def test_every_event_type_is_documented(event_type: str) -> None:
    assert f"`{event_type}`" in (ROOT / "docs/reference/events.md").read_text()


def test_stop_reasons_match_the_catalog() -> None:
    finished = CATALOG["$defs"]["TaskFinished"]["properties"]
    assert sorted(finished["stop_reason"]["enum"]) == sorted(ev.STOP_REASONS)
    for reason in ev.STOP_REASONS:
        assert ev.status_for(reason) in finished["status"]["enum"]


def test_an_event_on_the_wrong_stream_or_with_a_missing_field_is_rejected() -> None:
    with pytest.raises(jsonschema.ValidationError, match="belongs on a run stream"):
        validate_event("task:main", "RunCreated", {"agent": "a", "input": "x",
                                                   "idempotency_key": None})
    with pytest.raises(jsonschema.ValidationError, match="'step' is a required property"):
        validate_event("task:main", "ModelCallStarted", {"epoch": 1})
    with pytest.raises(jsonschema.ValidationError, match="unknown event type"):
        validate_event("run", "Nope", {})
