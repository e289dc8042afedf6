#!/usr/bin/env python3
"""Provider rate limits across a fleet: 3 ``toren worker`` processes work 60 runs (2 model calls
each: a tool call, then the answer) against a fake Anthropic API that enforces the account's
limits, 60 requests and 20,000 input tokens per minute (a 429 with ``retry-after`` past either).

    .venv/bin/python bench/rate_limits.py --server-url postgresql://postgres@127.0.0.1/postgres
    .venv/bin/python bench/rate_limits.py --server-url URL --smoke

Each mode on a fresh database, the same runs and the same fake:

- ``with_limiter``: ``TOREN_RATE_LIMITS`` says the account's limits; every worker takes from
  the one budget in Postgres before each call and waits (parked, in line) when it does not fit.
- ``without_limiter``: no limits file; workers call as fast as they can, back off on each 429
  (at least ``retry-after``) and retry, each on its own.

Figures: the 429s the fake answered and the retries the runs recorded, the most requests and
input tokens the fake admitted in any one window (never past the limit with the limiter), and
throughput against the limit: requests admitted per window over the windows the work took
(from the first admitted request to one window after the last). Full mode: a one-minute window
(a few minutes in all); ``--smoke``: 6 runs, a 2 s window and limits scaled to it (seconds).
Prints one JSON object on stdout. Needs toren-anthropic (the fake and the SDK); without it the
figure reports itself skipped. ``bench/run.py`` runs it as figure 13 (``ratelimits``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAKES = ROOT / "plugins" / "toren-anthropic" / "tests"
TOREN = Path(sys.executable).parent / "toren"
WORKERS = 3
#: About 300 input tokens a call, as the fake bills them (4 characters a token).
PROMPT = "You are a careful agent. Do the one step the user asks for, then report it. " * 16
TOOLS = '''
from toren import tool


@tool(idempotent=True)
def step(n: int) -> str:
    """Do step number n."""
    return f"step {n} done"
'''


def log(message: str) -> None:
    print(f"[rate_limits] {message}", file=sys.stderr, flush=True)


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.load(answer)


async def create_runs(database_url: str, directory: Path, work: Path, runs: int) -> list[str]:
    from toren.config import Settings
    from toren.host.runtime import Runtime

    settings = dataclasses.replace(
        Settings.from_env({}), database_url=database_url, home=work / "creator-home",
        load_plugins=("toren-anthropic",), skip_preflight=True)
    runtime = Runtime([directory], settings=settings)
    await runtime.start(workers=False)
    try:
        return [await runtime.start_run("limited", f"go {index}") for index in range(runs)]
    finally:
        await runtime.stop()


def count_events(database_url: str, kind: str) -> int:
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM agent_limited.events WHERE type = %s",
                           [kind]).fetchone()
    return int(row[0]) if row else 0


def finished(database_url: str) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT status, count(*) FROM agent_limited.runs "
                            "GROUP BY status").fetchall()
    counts = dict(rows)
    return int(counts.get("completed", 0)), sum(int(v) for v in counts.values())


def measure(server_url: str, limiter: bool, *, runs: int, window_s: float, requests: int,
            input_tokens: int, cap_s: float) -> dict[str, Any]:
    """One mode on a fresh database: the fake, the runs, 3 workers until every run is done."""
    from fake_limited import most_in_any_window
    from toren_bench import BenchDatabase

    db = BenchDatabase(server_url, "ratelimits")
    processes: list[subprocess.Popen[str]] = []
    work = Path(tempfile.mkdtemp(prefix="toren-ratelimits-"))
    try:
        env = {key: value for key, value in os.environ.items()
               if key != "DATABASE_URL" and not key.startswith(("TOREN_", "ANTHROPIC_"))}
        env |= {"DATABASE_URL": db.url, "ANTHROPIC_API_KEY": "x", "NO_COLOR": "1",
                "TOREN_LOAD_PLUGINS": "toren-anthropic", "TOREN_SKIP_PREFLIGHT": "1",
                "TOREN_RETRY_MAX_ATTEMPTS": "100"}
        fake = subprocess.Popen(
            [sys.executable, str(FAKES / "fake_limited.py"), "--requests", str(requests),
             "--input-tokens", str(input_tokens), "--window", str(window_s),
             "--tool-steps", "1"], env=env, stdout=subprocess.PIPE, text=True)
        processes.append(fake)
        assert fake.stdout is not None
        url = f"http://127.0.0.1:{json.loads(fake.stdout.readline())['port']}"
        limits = work / "limits.yaml"
        per_minute = 60 / window_s
        limits.write_text(f"windowSeconds: {window_s:g}\nlimits:\n  anthropic:\n"
                          f"    requestsPerMinute: {round(requests * per_minute)}\n"
                          f"    inputTokensPerMinute: {round(input_tokens * per_minute)}\n")
        if limiter:
            env["TOREN_RATE_LIMITS"] = str(limits)
        from toren.testing import write_agent_dir

        directory = write_agent_dir(work, "limited", model="anthropic/claude-sonnet-4-6",
                                    baseUrl=url, tools_py=TOOLS, prompt=PROMPT)
        os.environ["ANTHROPIC_API_KEY"] = "x"
        made = time.monotonic()
        run_ids = asyncio.run(create_runs(db.url, directory, work, runs))
        log(f"created {len(run_ids)} runs in {time.monotonic() - made:.1f}s")
        started = time.monotonic()
        for index in range(WORKERS):
            worker_env = env | {"TOREN_HOME": str(work / f"home-{index}")}
            processes.append(subprocess.Popen(
                [str(TOREN), "worker", "--dir", str(directory), "--json"], env=worker_env,
                stdout=subprocess.DEVNULL, stderr=open(work / f"worker-{index}.log", "w")))  # noqa: SIM115
        done = 0
        while time.monotonic() - started < cap_s:
            done, _total = finished(db.url)
            if done == len(run_ids):
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        log(f"{done} runs done {elapsed:.1f}s after the workers started")
        seen = fetch_json(f"{url}/_fake/limits")
        admitted = [tuple(item) for item in seen["admitted"]]
        most_requests, most_tokens = most_in_any_window(admitted, window_s)
        span = (admitted[-1][0] - admitted[0][0]) + window_s if admitted else 0.0
        per_window = len(admitted) / span * window_s if span else 0.0
        return {
            "runs": len(run_ids), "completed": done, "elapsed_s": round(elapsed, 2),
            "model_calls": len(admitted), "status_429": seen["refused"],
            "retries": count_events(db.url, "RetryScheduled"),
            "waited_calls": _waited(db.url),
            "most_requests_in_a_window": most_requests,
            "most_input_tokens_in_a_window": most_tokens,
            "requests_per_window": round(per_window, 2),
            "throughput_vs_limit": round(per_window / requests, 3),
            "input_tokens_per_window": round(sum(t for _, t in admitted) / span * window_s, 1)
            if span else 0.0,
        }
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        db.close()


def _waited(database_url: str) -> int:
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM agent_limited.events "
                           "WHERE type = 'ModelCallStarted' "
                           "AND data->>'rate_limit_wait_s' IS NOT NULL").fetchone()
    return int(row[0]) if row else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-url", required=True,
                        help="Postgres server (the role needs CREATEDB): a fresh database a mode")
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--window", type=float, default=60.0, help="the limits' window (s)")
    parser.add_argument("--smoke", action="store_true", help="6 runs, a 2 s window")
    args = parser.parse_args()
    runs, window = (6, 2.0) if args.smoke else (args.runs, args.window)
    # the account's limits per window: 60 requests and 20,000 input tokens a minute, scaled
    requests = max(1, round(60 * window / 60)) if not args.smoke else 6
    input_tokens = round(20_000 * window / 60) if not args.smoke else 2_000
    result: dict[str, Any] = {"bench": "toren_ratelimits", "figure": "ratelimits",
                              "smoke": args.smoke, "workers": WORKERS, "window_s": window,
                              "limit_requests": requests, "limit_input_tokens": input_tokens}
    if importlib.util.find_spec("toren_anthropic") is None:
        result |= {"ok": True, "skipped": "toren-anthropic not installed "
                                          "(pip install -r requirements/test.txt)"}
        print(json.dumps(result), flush=True)
        return 0
    sys.path[:0] = [str(FAKES), str(Path(__file__).resolve().parent)]
    try:
        cap = 60 if args.smoke else 20 * window
        for mode, limiter in (("with_limiter", True), ("without_limiter", False)):
            log(f"{mode}: {runs} runs, {WORKERS} workers, {requests} requests and "
                f"{input_tokens} input tokens per {window:g} s")
            result[mode] = measure(args.server_url, limiter, runs=runs, window_s=window,
                                   requests=requests, input_tokens=input_tokens, cap_s=cap)
            log(f"{mode}: {json.dumps(result[mode])}")
        result["load_average"] = [round(x, 2) for x in os.getloadavg()]
        result["ok"] = all(result[mode]["completed"] == runs
                           for mode in ("with_limiter", "without_limiter"))
    except Exception as exc:
        log(f"failed: {exc!r}")
        result |= {"ok": False, "error": repr(exc)[:500]}
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
