"""Fixtures: the fake Graph API, and an agent served over WhatsApp on a real Toren server."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_graph import ACCESS_TOKEN, APP_SECRET, FRIEND, PHONE_ID, VERIFY_TOKEN, FakeGraph

from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir


@pytest.fixture
def fake_graph() -> Iterator[FakeGraph]:
    fake = FakeGraph().start()
    yield fake
    fake.stop()


@pytest.fixture
async def whatsapp_agent(fake_graph: FakeGraph, toren_runtime: Callable[..., Awaitable[Runtime]],
                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                         ) -> AsyncIterator[Callable[..., Awaitable[tuple[Runtime, str]]]]:
    """``await whatsapp_agent(**settings)`` -> (runtime, webhook URL) of agent ``bot``,
    served over WhatsApp by a Toren server with API keys required (with the agents in the
    directories ``also`` names beside it); ``runtime_settings`` overrides the runtime's
    ``Settings`` (``max_file_bytes``)."""
    for name, value in (("TEST_WA_TOKEN", ACCESS_TOKEN), ("TEST_WA_SECRET", APP_SECRET),
                        ("TEST_WA_VERIFY", VERIFY_TOKEN)):
        monkeypatch.setenv(name, value)
    cleanup: list[Callable[[], Awaitable[None]]] = []

    async def make(*, tools_py: str | None = None, approvals: dict[str, Any] | None = None,
                   also: Sequence[Path] = (), runtime_settings: dict[str, Any] | None = None,
                   **settings: Any) -> tuple[Runtime, str]:
        extra = {"approvals": approvals} if approvals else {}
        directory = write_agent_dir(tmp_path, "bot", tools_py=tools_py, **extra,
                                    channels={"whatsapp": {
            "phone_number_id": PHONE_ID, "access_token_env": "TEST_WA_TOKEN",
            "app_secret_env": "TEST_WA_SECRET", "verify_token_env": "TEST_WA_VERIFY",
            "api_url": fake_graph.url, "allow_from": [FRIEND]} | settings})
        runtime = await toren_runtime([directory, *also], load_plugins=("toren-whatsapp",),
                                      **(runtime_settings or {}))
        await runtime.start_channels()
        runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
        cleanup.extend([runner.cleanup, runtime.stop_channels])
        return runtime, f"{url}/channels/whatsapp/bot"

    yield make
    for step in cleanup:
        await step()
