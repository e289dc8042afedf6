"""Language-neutral contracts shipped with the kernel (at the repository root: ``schemas/``)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def load_schema(name: str) -> dict[str, Any]:
    """Parse ``schemas/<name>`` (e.g. ``agent.schema.json``) from the installed package."""
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]
