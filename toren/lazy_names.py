"""Module attributes imported at their first use (PEP 562), for the public modules ``toren``
and ``toren.plugin``: importing them stays cheap, so any ``toren.`` import (``toren --help``
loads every plugin) does not pay for what it never touches."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(namespace: dict[str, Any], where: Mapping[str, str],
                 module_name: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``where[name]`` (a module's dotted path) at the
    first access of ``name`` and keeps the value in ``namespace`` (the module's globals), so
    later accesses are plain lookups."""

    def __getattr__(name: str) -> Any:
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    return __getattr__
