"""The aiohttp names the HTTP server's connection limits use beyond aiohttp's public API
(``toren.server.connections``) exist in the installed aiohttp, whose version is in the range
pyproject.toml pins: an aiohttp upgrade that moves them fails here, by name, not in production."""

from __future__ import annotations

import tomllib
from pathlib import Path

import aiohttp
from packaging.requirements import Requirement

from toren.server.connections import PRIVATE_AIOHTTP_NAMES

ROOT = Path(__file__).resolve().parents[2]


def test_every_private_aiohttp_name_the_server_uses_exists() -> None:
    missing = [f"{cls.__name__}.{name}" for cls, names in PRIVATE_AIOHTTP_NAMES.items()
               for name in names if not _has(cls, name)]
    assert not missing, (f"aiohttp {aiohttp.__version__} lacks {', '.join(missing)}, which "
                         "toren/server/connections.py uses: adapt it, then widen the pin")


def test_the_installed_aiohttp_is_in_the_range_the_names_were_checked_on() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [pin] = [Requirement(spec) for spec in project["dependencies"]
             if Requirement(spec).name == "aiohttp"]
    assert any(spec.operator == "<" for spec in pin.specifier), (
        "aiohttp needs an upper bound: its private server API changes without notice")
    assert pin.specifier.contains(aiohttp.__version__), (
        f"aiohttp {aiohttp.__version__} is outside {pin.specifier}, the range "
        "toren/server/connections.py was checked on")


def _has(cls: type, name: str) -> bool:
    """Whether ``cls`` or its instances have ``name`` (instance attributes set in
    ``__init__`` are found in its code, since making an instance needs a running server)."""
    if hasattr(cls, name):
        return True
    init = cls.__init__
    code = getattr(init, "__code__", None)
    return code is not None and name in code.co_names
