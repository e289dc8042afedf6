#!/usr/bin/env python3
"""Extra latency to first token through Toren: a model's first text piece read from Toren's
SSE event stream, against the same piece read from the provider directly.

    .venv/bin/python bench/first_token.py               # 30 calls each way
    .venv/bin/python bench/first_token.py --calls 10 --split

A fake OpenAI-compatible server (its own process) streams each answer after a pause, and puts
the ``time.monotonic()`` at which it wrote the first content chunk into that chunk's text
(``CLOCK_MONOTONIC`` is one clock for every process on the machine). Direct: the official
``openai`` SDK streams from it, and the latency is when the first piece arrives minus when it
was written. Through Toren: a real ``toren dev`` (worker and server in one process: the
in-process fan-out) runs an agent on that server; this process starts a run over HTTP and reads
its ``/runs/{id}/events`` stream; the latency is when the first ``text_delta`` arrives minus
when the fake wrote it. ``--split`` also measures ``toren worker`` and ``toren serve`` as two
processes (the piece crosses through Postgres NOTIFY). Prints one JSON object: p50/p90 per way
and the extra latency (Toren minus direct). Needs toren-openai (``requirements/test.txt``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

TOREN = Path(sys.executable).parent / "toren"
#: Seconds the fake waits before the first piece: time for the reader to be listening (a
#: stream's run is watched across processes within half a second of opening).
FIRST_PIECE_AFTER_S = 1.0
PIECES = 8


# -- the fake provider (run as `first_token.py --serve`) -------------------------------------

async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
            "model": body.get("model", "m")}

    async def send(delta: dict[str, Any], finish: str | None = None) -> None:
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

    await send({"role": "assistant", "content": ""})
    await asyncio.sleep(FIRST_PIECE_AFTER_S)
    await send({"content": f"{time.monotonic():.6f} "})  # the time it is written, in it
    for index in range(PIECES):
        await asyncio.sleep(0.01)
        await send({"content": f"piece{index} "})
    await send({}, "stop")
    usage = {"prompt_tokens": 10, "completion_tokens": PIECES + 1, "total_tokens": 19}
    await response.write(f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n"
                         .encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def serve() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(json.dumps({"port": runner.addresses[0][1]}), flush=True)
    await asyncio.Event().wait()


# -- the measurement ---------------------------------------------------------------------------

def written_at(text: str) -> float:
    return float(text.split()[0])


async def direct(base_url: str, calls: int) -> list[float]:
    import openai

    client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0)
    latencies = []
    for _ in range(calls):
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True)
        async for chunk in stream:
            text = chunk.choices[0].delta.content if chunk.choices else None
            if text:
                latencies.append(time.monotonic() - written_at(text))
                break
        await stream.close()
    await client.close()
    return latencies


async def frames(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, str]]:
    frame: dict[str, str] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if frame:
                yield frame
            frame = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            frame[name] = value.removeprefix(" ")


async def through_toren(url: str, calls: int) -> list[float]:
    latencies = []
    async with aiohttp.ClientSession() as http:
        for _ in range(calls):
            async with http.post(f"{url}/runs", json={"agent": "talker", "input": "hi"}) as made:
                run_id = (await made.json())["id"]
            async with http.get(f"{url}/runs/{run_id}/events",
                                headers={"Accept": "text/event-stream"}) as stream:
                async for frame in frames(stream):
                    if frame.get("event") == "text_delta":
                        text = json.loads(frame["data"])["text"]
                        latencies.append(time.monotonic() - written_at(text))
                        break
            await wait_ended(http, url, run_id)
    return latencies


async def wait_ended(http: aiohttp.ClientSession, url: str, run_id: str) -> None:
    while True:
        async with http.get(f"{url}/runs/{run_id}") as response:
            if (await response.json())["status"] in ("completed", "failed", "stopped",
                                                     "cancelled"):
                return
        await asyncio.sleep(0.05)


@contextlib.contextmanager
def process(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def ready_url(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    for line in proc.stdout:
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict) and "url" in data:
                return str(data["url"]).rstrip("/")
    raise RuntimeError(f"{proc.args} exited without a ready line")


def summary(latencies: list[float]) -> dict[str, float]:
    ms = sorted(value * 1000 for value in latencies)
    return {"p50_ms": round(statistics.median(ms), 3),
            "p90_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.9))], 3),
            "min_ms": round(ms[0], 3), "calls": len(ms)}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="toren-first-token-"))
    with process([sys.executable, __file__, "--serve"], dict(os.environ)) as fake:
        assert fake.stdout is not None
        port = json.loads(fake.stdout.readline())["port"]
        base_url = f"http://127.0.0.1:{port}/v1"
        agent = home / "agents" / "talker"
        agent.mkdir(parents=True)
        (agent / "agent.yaml").write_text(f"name: talker\nmodel: openai/gpt-4o-mini\n"
                                          f"baseUrl: {base_url}\n")
        (agent / "prompt.md").write_text("Answer.\n")
        env = {**os.environ, "TOREN_HOME": str(home / "state"), "TOREN_SKIP_PREFLIGHT": "1",
               "TOREN_LOAD_PLUGINS": "toren-openai", "TOREN_PORT": "0"}
        env.pop("OPENAI_API_KEY", None)
        result: dict[str, Any] = {"direct": summary(await direct(base_url, args.calls))}
        with process([str(TOREN), "dev", "--dir", str(agent.parent), "--json"], env) as dev:
            url = ready_url(dev)
            await through_toren(url, 2)  # warm-up: the SDK import, the first connections
            result["toren_dev"] = summary(await through_toren(url, args.calls))
        if args.split:
            env["TOREN_ALLOW_NO_KEYS"] = "1"
            dirs = ["--dir", str(agent.parent)]
            with process([str(TOREN), "worker", *dirs], env), \
                    process([str(TOREN), "serve", *dirs, "--json"], env) as server:
                url = ready_url(server)
                await through_toren(url, 2)
                result["toren_split"] = summary(await through_toren(url, args.calls))
    for way in ("toren_dev", "toren_split"):
        if way in result:
            result[f"extra_{way}_p50_ms"] = round(
                result[way]["p50_ms"] - result["direct"]["p50_ms"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--split", action="store_true",
                        help="also measure `toren worker` + `toren serve` (NOTIFY path)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve())
        return
    print(json.dumps(asyncio.run(measure(args))))


if __name__ == "__main__":
    main()
