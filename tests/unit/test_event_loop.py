"""TOREN_EVENT_LOOP: the loop `toren worker`, `serve` and `dev` run on."""

from __future__ import annotations

import asyncio

import pytest

from toren.errors import ConfigError
from toren.host import event_loop

uvloop = pytest.importorskip("uvloop")


async def loop_kind() -> type:
    return type(asyncio.get_running_loop())


def test_uvloop_is_the_default_where_installed() -> None:
    assert event_loop.chosen_event_loop({}) == "uvloop"
    assert event_loop.chosen_event_loop({"TOREN_EVENT_LOOP": "auto"}) == "uvloop"
    assert event_loop.run(loop_kind(), {}) is uvloop.Loop


def test_asyncio_can_be_chosen() -> None:
    env = {"TOREN_EVENT_LOOP": " AsyncIO "}
    assert event_loop.chosen_event_loop(env) == "asyncio"
    kind = event_loop.run(loop_kind(), env)
    assert not issubclass(kind, uvloop.Loop)
    assert issubclass(kind, asyncio.BaseEventLoop)


def test_the_loop_is_made_for_the_call_only() -> None:
    """No process-wide policy is left behind: later asyncio.run calls get asyncio's loop."""
    event_loop.run(loop_kind(), {"TOREN_EVENT_LOOP": "uvloop"})
    assert not issubclass(asyncio.run(loop_kind()), uvloop.Loop)


def test_an_unknown_loop_is_a_config_error_naming_the_choices() -> None:
    main = loop_kind()
    with pytest.raises(ConfigError, match="TOREN_EVENT_LOOP='trio' is not one of auto, uvloop, "
                                          "asyncio"):
        event_loop.run(main, {"TOREN_EVENT_LOOP": "trio"})
    assert main.cr_frame is None  # closed, not left to warn that it was never awaited


def test_uvloop_asked_for_but_missing_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    real = event_loop.importlib.util.find_spec
    monkeypatch.setattr(event_loop.importlib.util, "find_spec",
                        lambda name, *a: None if name == "uvloop" else real(name, *a))
    with pytest.raises(ConfigError, match="pip install uvloop"):
        event_loop.chosen_event_loop({"TOREN_EVENT_LOOP": "uvloop"})
    assert event_loop.chosen_event_loop({}) == "asyncio"  # auto falls back quietly
