"""Write compose/.env.example from README.md's Configuration table, so it lists every setting.

    python compose/ci/env_example.py          # exit 1 (and say so) if .env.example is stale
    python compose/ci/env_example.py --write  # regenerate it

tests/unit/test_compose_files.py runs the check.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "compose" / ".env.example"
#: set by docker-compose.yml or the image itself; changing them here would break the wiring
SET_BY_COMPOSE = {"DATABASE_URL", "TOREN_HOME", "TOREN_HOST", "TOREN_PORT", "TOREN_DIRS"}
ROW = re.compile(r"^\| `(?P<name>[A-Z][A-Z0-9_]*)` \| (?P<default>.*?) \| (?P<what>.*) \|$")

HEADER = """\
# Settings of the Toren containers of docker-compose.yml: copy this file to .env and edit it.
# Every Toren setting is listed (from README.md's Configuration table); unset means the
# default. Regenerate with: python compose/ci/env_example.py --write

# Required: the password of the `toren` Postgres role. Use URL-safe characters (it goes into
# DATABASE_URL), e.g. the output of: openssl rand -hex 24
POSTGRES_PASSWORD=

# Where `docker compose` publishes the API on the host (loopback: put a TLS proxy in front)
# TOREN_PUBLISH=127.0.0.1:8420

# Long-running agents (runtime: long in agent.yaml) get a worker container of their own with
# the `long` profile: set both lines below (docs/deploy/compose.md, "Long-running agents"),
# and TOREN_LANE=short further down so the toren container leaves them to it
# COMPOSE_PROFILES=long
# TOREN_LONG_CONCURRENCY=8

# Model provider keys, for agents whose model is anthropic/... or openai/...
# ANTHROPIC_API_KEY=
# OPENAI_API_KEY=
"""


def settings(readme: str) -> list[tuple[str, str, str]]:
    """(name, default, description) of each row of README.md's Configuration table."""
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    return [(m["name"], m["default"], m["what"]) for line in section.splitlines()
            if (m := ROW.match(line))]


def render(readme: str) -> str:
    parts = [HEADER]
    for name, default, what in settings(readme):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", what).replace("`", "")
        note = " Set by docker-compose.yml." if name in SET_BY_COMPOSE else ""
        comment = textwrap.fill(f"{plain}{note} Default: {default.replace('`', '')}.",
                                width=96, initial_indent="# ", subsequent_indent="# ")
        parts.append(f"\n{comment}\n# {name}=\n")
    return "".join(parts)


def main(argv: list[str]) -> int:
    wanted = render((ROOT / "README.md").read_text())
    if argv[1:] == ["--write"]:
        TARGET.write_text(wanted)
        return 0
    if not TARGET.exists() or TARGET.read_text() != wanted:
        print(f"{TARGET} is not in step with README.md's Configuration table; run: "
              "python compose/ci/env_example.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
