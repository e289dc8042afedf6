"""/memories over HTTP with the Python client against a real store: a person lists, reads,
corrects and erases what agents keep; keys need memory:read or memory:write (a viewer has
neither); a key limited to an agent sees and erases only that agent's memories; every change
is in the audit trail."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.test_route_scopes import MakeRuntime, Served
from toren.client import TorenAPIError, TorenClient
from toren.core.memory import NewMemory
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir


@pytest.fixture
async def served(make_runtime: MakeRuntime, tmp_path: Path) -> AsyncIterator[Served]:
    """A server of the agents crew and other, with an admin, a viewer and a crew-only key."""
    agents = tmp_path / "agents"
    runtime = await make_runtime(dirs=[write_agent_dir(agents, "crew"),
                                       write_agent_dir(agents, "other")], workers=False)
    tokens = {}
    for role, limited in (("admin", None), ("viewer", None), ("operator", ["crew"])):
        name = "crew-only" if limited else role
        _key, tokens[name] = await runtime.keys.create(f"{name}-key", role=role,
                                                        agents=limited)
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
    try:
        yield Served(runtime, url, tokens, {}, {})
    finally:
        await runner.cleanup()


async def test_people_read_correct_and_erase_memories_within_their_keys(served: Served
                                                                        ) -> None:
    store = served.runtime.store
    ids = {}
    for agent in ("crew", "other"):
        written = await store.remember(f"http-{agent}", NewMemory(
            agent, "user", "ann@example.com", f"Ann uses {agent} weekly", run_id=None))
        ids[agent] = written.memory_id
    note = await store.remember("http-note", NewMemory("crew", "agent", None, "Crew note"))

    async with TorenClient(served.url, served.tokens["admin"]) as admin, \
            TorenClient(served.url, served.tokens["crew-only"]) as crew_only, \
            TorenClient(served.url, served.tokens["viewer"]) as viewer:
        listed = (await admin.list_memories(subject="ann@example.com"))["memories"]
        assert {m["id"] for m in listed} == {ids["crew"], ids["other"]}
        best = (await admin.list_memories(search="weekly crew"))["memories"]
        assert best[0]["id"] == ids["crew"]  # best match first
        assert [m["id"] for m in (await admin.list_memories(agent="crew", scope="agent"))[
            "memories"]] == [note.memory_id]
        with pytest.raises(TorenAPIError) as refused:
            await viewer.list_memories()
        assert refused.value.status == 403 and "memory:read" in refused.value.reason

        # a key limited to crew: crew's memories only, the others as if they did not exist
        assert {m["agent"] for m in (await crew_only.list_memories())["memories"]} == {"crew"}
        for call in (crew_only.get_memory(ids["other"]),
                     crew_only.edit_memory(ids["other"], content="x"),
                     crew_only.delete_memory(ids["other"])):
            with pytest.raises(TorenAPIError) as hidden:
                await call
            assert hidden.value.status == 404
        assert await crew_only.erase_subject("ann@example.com") == [ids["crew"]]
        assert (await admin.get_memory(ids["other"]))["content"] == "Ann uses other weekly"

        edited = await admin.edit_memory(ids["other"], content="Ann uses other daily",
                                         pinned=True)
        assert (edited["content"], edited["pinned"]) == ("Ann uses other daily", True)
        assert await admin.delete_memory(ids["other"]) == {"id": ids["other"],
                                                           "deleted": True}
        with pytest.raises(TorenAPIError) as gone:
            await admin.get_memory(ids["other"])
        assert (gone.value.status, gone.value.code) == (404, "memory_not_found")
        assert (await admin.list_memories(subject="ann@example.com"))["memories"] == []

        trail = (await admin.audit(action="memory"))["entries"]
        assert {(e["action"], e["outcome"]) for e in trail} >= {
            ("memory.erase_subject", "ok"), ("memory.edit", "ok"), ("memory.delete", "ok")}
        assert any(e["action"] == "memory.delete" and e["outcome"] != "ok" for e in trail)
