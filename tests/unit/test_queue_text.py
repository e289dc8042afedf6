"""``toren jobs show``'s queue line (``toren.cli.render.queue_text``): what a person reads of a
run's priority, concurrency key and why it waits."""

from __future__ import annotations

from toren.cli.render import queue_text


def test_nothing_to_say_is_no_line() -> None:
    assert queue_text(None) == ""
    assert queue_text({"priority": 0, "concurrency_key": None, "waiting": None}) == ""


def test_priority_key_and_reason_in_one_line() -> None:
    assert queue_text({"priority": -5, "concurrency_key": "acme", "waiting": "queued"}) == (
        "priority -5 · concurrency key 'acme' · ready, waiting for a worker")
    assert queue_text({"priority": 0, "concurrency_key": "", "waiting": "delayed"}) == (
        "concurrency key '' · waiting for a retry or a wake-up that is not due yet")


def test_an_unknown_reason_from_a_newer_server_is_shown_as_is() -> None:
    assert queue_text({"priority": 0, "concurrency_key": None, "waiting": "rate_limit"}) == (
        "waiting (rate_limit)")
