"""``python -m toren.schemas [--write]``: print or rewrite the generated schemas.

``events.schema.json`` is generated from the event classes (``toren.core.catalog``); run this
after changing an event class, and commit the result (a test fails while the file is stale).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toren.core.catalog import render_schema

EVENTS_FILE = Path(__file__).resolve().parent / "events.schema.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toren.schemas", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"rewrite {EVENTS_FILE}")
    args = parser.parse_args(argv)
    if args.write:
        EVENTS_FILE.write_text(render_schema(), encoding="utf-8")
    else:
        sys.stdout.write(render_schema())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
