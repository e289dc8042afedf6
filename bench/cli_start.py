#!/usr/bin/env python3
"""How long the ``toren`` command takes to start: ``toren --help`` and ``toren version``.

    .venv/bin/python bench/cli_start.py              # 15 runs of each command
    .venv/bin/python bench/cli_start.py --runs 30

Each run is a fresh process of the console script next to this interpreter, with every
installed plugin loaded (``TOREN_LOAD_PLUGINS`` is removed from the environment), timed from
spawn to exit, and by the CPU time (user + system) the process used: on a shared, loaded
machine the wall time includes waiting for a core, the CPU time does not. One warm-up run of
each command comes first (it writes the bytecode caches). Prints one JSON object: per command,
the median and p90 of both in seconds, and which provider SDKs a plain ``toren version``
imported (none: an SDK loads when an agent first uses one of its models).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from importlib.metadata import distributions
from pathlib import Path

TOREN = Path(sys.executable).parent / "toren"
COMMANDS = (("--help",), ("version",))
#: The provider SDKs the plugins wrap: importing one costs about a second.
SDKS = ("anthropic", "openai")


def environment() -> dict[str, str]:
    # every installed plugin loads; bytecode caches are written and used, as for a user
    dropped = ("TOREN_LOAD_PLUGINS", "PYTHONDONTWRITEBYTECODE")
    return {key: value for key, value in os.environ.items() if key not in dropped}


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(args: tuple[str, ...], env: dict[str, str]) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of one run of ``toren *args``."""
    cpu_before = children_cpu_s()
    started = time.perf_counter()
    subprocess.run([str(TOREN), *args], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=120)
    return time.perf_counter() - started, children_cpu_s() - cpu_before


def summary(samples: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(samples), 3),
            "p90_s": round(statistics.quantiles(samples, n=10)[-1], 3),
            "min_s": round(min(samples), 3)}


def sdks_imported(env: dict[str, str]) -> list[str]:
    """The SDKs in ``sys.modules`` after ``toren version`` ran in-process (all plugins)."""
    code = ("import sys; from toren.cli import main\n"
            "try:\n    main(['version'])\nexcept SystemExit:\n    pass\n"
            f"print(','.join(m for m in {SDKS!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True, timeout=120)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return [name for name in last.split(",") if name in SDKS]


def toren_plugins() -> list[str]:
    return sorted(dist.metadata["Name"] for dist in distributions()
                  if any(ep.group == "toren" for ep in dist.entry_points))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command (>= 2)")
    args = parser.parse_args()
    if args.runs < 2:
        parser.error("--runs must be at least 2 (p90 needs two samples)")
    env = environment()
    figures: dict[str, object] = {}
    for command in COMMANDS:
        time_command(command, env)  # warm-up: bytecode caches, page cache
        samples = [time_command(command, env) for _ in range(args.runs)]
        figures["toren " + " ".join(command)] = {
            "wall": summary([wall for wall, _ in samples]),
            "cpu": summary([cpu for _, cpu in samples]),
            "runs": args.runs,
        }
    print(json.dumps({
        "figure": "cli_start",
        "commands": figures,
        "sdks_imported_by_toren_version": sdks_imported(env),
        "toren_plugins": toren_plugins(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }))


if __name__ == "__main__":
    main()
