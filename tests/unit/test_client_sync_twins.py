"""The sync client mirrors the async one method for method (issue 36 section 3): every public
method of ``TorenClient`` has a blocking twin on ``SyncTorenClient`` with the same signature
(less ``async``), the same docstring and the same types, so a new async method without a twin
fails here; and mypy strict types the twins for a user's code."""

from __future__ import annotations

import inspect
import pydoc
import subprocess
import sys
import typing
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from toren.client import SyncTorenClient, TorenClient

ROOT = Path(__file__).parents[2]
#: Async only, and why: ``aclose`` ends the async client's connection pool; the sync client
#: keeps none between calls, so has nothing to close.
ASYNC_ONLY = {"aclose"}
#: Sync only: nothing.
SYNC_ONLY: set[str] = set()


def public(cls: type) -> dict[str, typing.Any]:
    return {name: member for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")}


ASYNC = public(TorenClient)
SYNC = public(SyncTorenClient)
STREAMS = sorted(name for name, method in ASYNC.items() if inspect.isasyncgenfunction(method))


def test_every_async_method_has_a_sync_twin_and_no_more() -> None:
    assert set(ASYNC) - ASYNC_ONLY - set(SYNC) == set(), "give SyncTorenClient a twin of these"
    assert set(SYNC) - set(ASYNC) - SYNC_ONLY == set(), "SyncTorenClient has methods of its own"
    assert STREAMS == ["stream_events", "stream_live"]
    assert len(SYNC) >= 35  # the enumeration found the methods (not a vacuous pass)


@pytest.mark.parametrize("name", sorted(set(ASYNC) - ASYNC_ONLY))
def test_a_twin_has_the_async_methods_signature_docstring_and_types(name: str) -> None:
    asynchronous, blocking = ASYNC[name], SYNC[name]
    assert (inspect.iscoroutinefunction(asynchronous) or inspect.isasyncgenfunction(asynchronous))
    assert not inspect.iscoroutinefunction(blocking)
    assert not inspect.isasyncgenfunction(blocking)
    assert blocking.__name__ == name and blocking.__qualname__ == f"SyncTorenClient.{name}"
    assert blocking.__module__ == "toren.client"
    assert blocking.__doc__ == asynchronous.__doc__

    expected = inspect.signature(asynchronous)
    hints = typing.get_type_hints(asynchronous)
    if name in STREAMS:  # an async iterator of X becomes an iterator of X
        assert inspect.isgeneratorfunction(blocking)
        assert typing.get_origin(hints["return"]) is AsyncIterator
        hints["return"] = Iterator[typing.get_args(hints["return"])[0]]
        expected = expected.replace(
            return_annotation=str(expected.return_annotation).replace("AsyncIterator[",
                                                                      "Iterator[", 1))
    assert inspect.signature(blocking) == expected
    assert typing.get_type_hints(blocking) == hints


def test_help_shows_the_async_methods_docstring_and_signature() -> None:
    for name in ("receipt", "wait_for_run", "stream_events", "get_run"):
        shown = pydoc.render_doc(getattr(SyncTorenClient, name), renderer=pydoc.plaintext)
        assert str(inspect.signature(ASYNC[name])).replace("AsyncIterator[", "Iterator[") in (
            shown), shown
        assert inspect.cleandoc(ASYNC[name].__doc__ or "").splitlines()[0] in shown, shown
        assert "async" not in shown.splitlines()[2], shown


def test_every_method_has_a_docstring() -> None:
    """One docstring serves both clients, so each call has one to show in ``help()``."""
    assert [name for name, method in ASYNC.items() if not method.__doc__] == []


USER_CODE = '''
from toren.client import SyncTorenClient

client = SyncTorenClient("http://127.0.0.1:8420")
reveal_type(client.get_run)
reveal_type(client.wait_for_run("3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f", timeout_s=5.0))
for event in client.stream_events("3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"):
    reveal_type(event)
client.get_run(42)
client.list_runs(agnet="crew")
client.fork_run("3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f")
'''


@pytest.mark.timeout(600)
def test_mypy_types_the_twins_for_users(tmp_path: Path) -> None:
    """What a user's type checker sees of the twins, toren imported as installed (the
    ``py.typed`` marker): their parameters and return types, and wrong arguments caught (a
    class whose methods appear at run time would type them as ``Any``)."""
    mypy = Path(sys.executable).parent / "mypy"
    assert mypy.exists(), "mypy is a test dependency (requirements/test.txt): install it"
    script = tmp_path / "user_code.py"
    script.write_text(USER_CODE)
    done = subprocess.run(
        [str(mypy), "--strict", "--python-executable", sys.executable, "--config-file=",
         "--cache-dir", str(tmp_path / "cache"), str(script)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    said = {int(line.split(":")[1]): line.split(":", 2)[2].strip()
            for line in done.stdout.splitlines() if line.startswith("user_code.py:")}
    run_detail = "TypedDict({'id': str, 'agent': str, 'kind': str"
    assert said[5].startswith(f'note: Revealed type is "def (run_id: str) -> {run_detail}'), (
        done.stdout)
    assert "'why': str" in said[5] and said[6].startswith(
        f'note: Revealed type is "{run_detail}'), done.stdout
    assert said[8].startswith("note: Revealed type is \"TypedDict({'run_id': str, "
                              "'stream': str, 'seq': int"), done.stdout
    assert said[9].startswith('error: Argument 1 has incompatible type "int"; expected "str"')
    assert said[10].startswith('error: Unexpected keyword argument "agnet"'), done.stdout
    assert said[11].startswith("error: Too few arguments"), done.stdout
    assert len(said) == 6 and done.returncode == 1, done.stdout  # nothing else
