"""``toren run --webhook`` and ``toren jobs show`` as a user runs them, and a worker SIGKILLed
between a webhook's answer and its record (docs/guides/webhooks.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import TorenCli, wait_until
from toren.testing import ServerThread, write_agent_dir
from toren.webhooks import SIGNATURE_HEADER, verify

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_run_with_a_webhook_then_jobs_show_lists_its_delivery(
        toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    env = {"DATABASE_URL": database_url, "TOREN_WEBHOOK_SECRET": "s3cret"}
    refused = toren_cli("run", "crew", "hi", "--dir", str(crew), "--no-follow",
                        "--webhook", "http://127.0.0.1:9/hook", env=env)
    assert refused.returncode == 1
    assert "TOREN_WEBHOOK_ALLOW_PRIVATE" in refused.stderr and "webhook" in refused.stderr

    # a receiver that is not there (port 9, discard): the delivery is recorded all the same
    done = toren_cli("run", "crew", "hi", "--dir", str(crew), "--json",
                     "--webhook", "http://127.0.0.1:9/hook", "--webhook-on", "finished",
                     env=env | {"TOREN_WEBHOOK_ALLOW_PRIVATE": "1"})
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    shown = json.loads(toren_cli("jobs", "show", run["id"], "--json", env=env).stdout)
    [delivery] = shown["webhooks"]
    assert (delivery["event"], delivery["url"], delivery["source"]) == (
        "finished", "http://127.0.0.1:9/hook", "run")
    assert delivery["state"] in ("pending", "failed")
    text = toren_cli("jobs", "show", run["id"], env=env).stdout
    assert "webhooks" in text and "finished -> http://127.0.0.1:9/hook" in text


class CountingReceiver:
    """A receiver on 127.0.0.1 (its own thread and loop) that answers 200 and keeps what came."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.server = ServerThread(self.app).start()

    def app(self) -> web.Application:
        async def hook(request: web.Request) -> web.Response:
            self.requests.append((dict(request.headers), await request.read()))
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_post("/hook", hook)
        return app


def test_a_worker_killed_after_sending_leaves_the_delivery_to_the_next_with_its_event_id(
        start_toren: Any, toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    receiver = CountingReceiver()
    try:
        crew = write_agent_dir(tmp_path, "crew")
        env = {"DATABASE_URL": database_url, "TOREN_WEBHOOK_SECRET": "s3cret",
               "TOREN_WEBHOOK_ALLOW_PRIVATE": "1", "TOREN_WEBHOOK_TIMEOUT": "1",
               "TOREN_POLL_INTERVAL": "0.2", "TOREN_SHUTDOWN_GRACE": "1",
               "TOREN_CRASH_AT": "after_webhook_sent",
               "TOREN_CRASH_ONCE": str(tmp_path / "crashed")}
        done = toren_cli("run", "crew", "hi", "--dir", str(crew), "--no-follow", "--json",
                         "--webhook", f"{receiver.server.url}/hook", env=env)
        assert done.returncode == 0, done.stderr
        run_id = json.loads(done.stdout)["id"]
        first = start_toren("worker", "--dir", str(crew), "--json", env=env)
        # the receiver answered 200, and the worker died before recording it
        assert wait_until(lambda: first.proc.poll() is not None, 60), "no crash"
        assert first.proc.returncode == -9 and len(receiver.requests) == 1

        second = start_toren("worker", "--dir", str(crew), "--json", env=env)
        assert second.next_json()["event"] == "ready"

        def delivered() -> bool:
            shown = json.loads(toren_cli("jobs", "show", run_id, "--json", env=env).stdout)
            return shown["webhooks"][0]["state"] == "delivered"

        assert wait_until(delivered, 60)
        shown = json.loads(toren_cli("jobs", "show", run_id, "--json", env=env).stdout)
        [delivery] = shown["webhooks"]
        # the killed attempt counts (a claim is an attempt) but recorded nothing
        assert delivery["attempts"] == 2
        assert [a["attempt"] for a in delivery["history"]] == [2]
        # at least once, with one event id and body: the receiver deduplicates
        assert len(receiver.requests) == 2
        assert {h["Toren-Event-Id"] for h, _ in receiver.requests} == {delivery["id"]}
        assert len({body for _, body in receiver.requests}) == 1
        for headers, body in receiver.requests:
            verify("s3cret", body, headers[SIGNATURE_HEADER])
    finally:
        receiver.server.stop()
