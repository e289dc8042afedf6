#!/usr/bin/env python3
"""Before and after: Toren's figures for two checkouts, alternating, against one Postgres.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/ab.py --before /tmp/before --figures throughput,latency --pairs 4

Each pair runs ``bench/toren_bench.py FIGURE`` (this checkout's script) once with the kernel and
the Postgres drivers of ``--before`` put first on ``PYTHONPATH`` (A) and once with this
checkout's (B), the order alternating from pair to pair (AB, BA, ...), each in a fresh process
and database. Only ``toren`` and ``toren_postgres`` come from ``--before``: the other plugins,
the dependencies and the benchmark script are this checkout's, so the script's figures exist on
both sides. Records every run's JSON and, per figure and numeric field, the median of the pairs'
B/A ratios with their spread in ``bench/history/ab/<UTC time>-<label>.json``, and prints that
summary. Ratios within a pair are what to read on a shared machine: the load moves both runs of
a pair alike, and load-proof fields (CPU per operation, the Postgres backends' CPU, counts) move
least.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run import BENCH, HISTORY, ROOT, TOREN_FIGURES, git_commit, log, run_json, start_postgres


def numeric_fields(result: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every number in a figure's JSON, flattened to dotted names (lists by index)."""
    found: dict[str, float] = {}
    items = result.items() if isinstance(result, dict) else enumerate(result)
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            found[name] = float(value)
        elif isinstance(value, dict | list):
            found |= numeric_fields(value, name + ".")  # type: ignore[arg-type]
    return found


def summarise(pairs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per figure and field: A's and B's medians, and the median B/A ratio of the pairs."""
    out: dict[str, Any] = {}
    for figure in pairs[0]:
        fields: dict[str, dict[str, list[float]]] = {}
        for pair in pairs:
            a, b = (numeric_fields(pair[figure][side]) for side in ("A", "B"))
            for name in a.keys() & b.keys():
                entry = fields.setdefault(name, {"A": [], "B": [], "ratios": []})
                entry["A"].append(a[name])
                entry["B"].append(b[name])
                if a[name]:
                    entry["ratios"].append(b[name] / a[name])
        out[figure] = {
            name: {"A": round(statistics.median(v["A"]), 3),
                   "B": round(statistics.median(v["B"]), 3),
                   "B_over_A": round(statistics.median(v["ratios"]), 3) if v["ratios"] else None,
                   "spread": [round(min(v["ratios"]), 3), round(max(v["ratios"]), 3)]
                   if v["ratios"] else None}
            for name, v in sorted(fields.items())}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True,
                        help="an older checkout of this repository (git worktree add DIR REF)")
    parser.add_argument("--figures", default="throughput,latency,queue")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--label", default="ab")
    parser.add_argument("--toren-arg", action="append", default=[], metavar="ARG",
                        help="passed to toren_bench.py on both sides")
    args = parser.parse_args()
    before = args.before.resolve()
    sources = [before, before / "plugins" / "toren-postgres" / "src"]
    if not all((path / name).is_dir() for path, name in zip(
            sources, ("toren", "toren_postgres"), strict=True)):
        raise SystemExit(f"--before {before}: no toren/ and plugins/toren-postgres/src/ there")
    figures = [f for f in args.figures.split(",") if f]
    unknown = set(figures) - set(TOREN_FIGURES)
    if unknown:
        raise SystemExit(f"unknown figures: {', '.join(sorted(unknown))}")
    server_url, server, source = start_postgres()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOREN_")}
    env["DATABASE_URL"] = server_url
    env.pop("PYTHONPATH", None)
    side_env = {"A": env | {"PYTHONPATH": os.pathsep.join(map(str, sources))}, "B": env}
    pairs: list[dict[str, dict[str, Any]]] = []
    try:
        for index in range(args.pairs):
            pair: dict[str, dict[str, Any]] = {figure: {} for figure in figures}
            for side in ("A", "B") if index % 2 == 0 else ("B", "A"):
                for figure in figures:
                    log(f"pair {index + 1}/{args.pairs}: {side} {figure}")
                    pair[figure][side] = run_json(
                        [sys.executable, str(BENCH / "toren_bench.py"), figure,
                         "--server-url", server_url, *args.toren_arg], side_env[side],
                        timeout=3600)
                    if not pair[figure][side].get("ok"):
                        log(f"[red]{side} {figure} failed:[/] {pair[figure][side].get('error')}")
                        return 1
            pairs.append(pair)
    finally:
        if server is not None:
            server.cleanup()
    summary = summarise(pairs)
    record = {
        "what": "bench/ab.py: A = --before's toren and toren_postgres, B = this checkout",
        "recorded": datetime.now(UTC).strftime("%Y-%m-%dT%H:%MZ"), "label": args.label,
        "before": {"path": str(before), "commit": git_commit(before)},
        "after": {"commit": git_commit()}, "postgres": source,
        "load_average_at_end": os.getloadavg()[0], "toren_args": args.toren_arg,
        "summary": summary, "pairs": pairs}
    folder = HISTORY / "ab"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M')}-{args.label}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    log(f"recorded {path.relative_to(ROOT)}")
    print(json.dumps({"summary": summary, "history": str(path.relative_to(ROOT))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
