"""memory: against real Postgres, through the runtime: what an agent remembers in one session
it recalls in the next, about the same person only; pinned memories reach the next session's
system prompt; a memory a person erased is never recalled again; recall weighs recency and
keeps to its budget; workers erase memories past memory.keep. (The store's own rules, a write
once per key and who sees what, are toren.testing.contracts.MemoryStoreContract.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from tests.durable import check_log
from tests.integration.test_approvals import wait_status
from toren.agents.loader import load_agent
from toren.core.memory import MemoryView, NewMemory, recall_text
from toren.errors import AgentDefinitionError, ConfigError, InvalidMemory, MemoryNotFound
from toren.seams.model import ModelRequest, ModelResponse, ToolCall
from toren.testing import ScriptedModel, write_agent_dir


def scripted(plan: dict[str, list[tuple[str, dict[str, object]]]], systems: list[str]):
    """A model that, for a user message naming a plan, calls the plan's tools one per step,
    then answers with every tool result it got this turn (each on its own line). Each
    request's system prompt is appended to ``systems``."""
    def script(request: ModelRequest) -> ModelResponse:
        systems.append(request.system)
        turn = []
        for message in reversed(request.messages):
            if message.role == "user":
                break
            turn.append(message)
        turn.reverse()
        user = next(m for m in reversed(request.messages) if m.role == "user")
        calls = plan.get(user.text, [])
        done = sum(1 for m in turn if m.role == "tool")
        if done < len(calls):
            name, arguments = calls[done]
            return ModelResponse(text="", stop_reason="tool_use", tool_calls=(
                ToolCall(id=f"c{len(request.messages)}", name=name, arguments=arguments),))
        return ModelResponse(text="\n".join(m.text for m in turn if m.role == "tool")
                             or "nothing to do")
    return script


async def session_turn(runtime, session_id: str, text: str) -> str:
    await runtime.send_message(session_id, text)
    await runtime.wait_for_turn(session_id, timeout_s=30)
    return str((await runtime.get_run(session_id)).output)


async def test_remembered_in_one_session_recalled_in_the_next_and_gone_once_erased(
        make_runtime, tmp_path: Path) -> None:
    systems: list[str] = []
    model = ScriptedModel(script=scripted({
        "remember": [("remember", {"content": "Prefers e-mail over phone calls"}),
                     ("remember", {"content": "Account number is 4411", "pinned": True})],
        "recall": [("recall", {"query": "how to contact them by e-mail"})],
    }, systems))
    directory = write_agent_dir(tmp_path, "support", model="test/support", memory={})
    runtime = await make_runtime(dirs=[directory], models={"support": model})

    first = await runtime.sessions.start("support", subject="telegram:42")
    said = await session_turn(runtime, first, "remember")
    assert said.count("Remembered as memory") == 2
    await runtime.sessions.close(first)
    [pinned, plain] = await runtime.memory.list(agent="support")
    assert (pinned.content, pinned.pinned, pinned.scope, pinned.subject) == (
        "Account number is 4411", True, "user", "telegram:42")
    assert (plain.content, plain.pinned) == ("Prefers e-mail over phone calls", False)

    second = await runtime.sessions.start("support", subject="telegram:42")
    said = await session_turn(runtime, second, "recall")
    assert f"[{plain.id}]" in said and "Prefers e-mail over phone calls" in said
    assert "Account number" not in said  # no word of the query: not recalled
    # the pinned memory is in the new session's system prompt, as MemoryLoaded recorded it
    assert "Account number is 4411" in systems[-1]
    events = await runtime.events(second)
    check_log(events)
    [loaded] = [e.data for e in events if e.type == "MemoryLoaded"]
    assert loaded["subject"] == "telegram:42" and loaded["memory_ids"] == [pinned.id]

    # somebody else's session sees none of it
    stranger = await runtime.sessions.start("support", subject="telegram:7")
    said = await session_turn(runtime, stranger, "recall")
    assert "No memory matches" in said and "e-mail over" not in said
    assert "Account number" not in systems[-1]

    # a person erases the memory: the agent's recall no longer finds it
    erased = await runtime.memory.delete(plain.id)
    assert erased.id == plain.id
    with pytest.raises(MemoryNotFound):
        await runtime.memory.get(plain.id)
    said = await session_turn(runtime, second, "recall")
    assert "No memory matches" in said and "Prefers e-mail" not in said
    # and everything about the person goes at once
    assert await runtime.memory.erase_subject("telegram:42") == [pinned.id]
    assert await runtime.memory.list(subject="telegram:42") == []


def test_a_memory_block_that_cannot_work_is_a_load_error_at_its_field(tmp_path: Path
                                                                      ) -> None:
    # shareWith needs the scope shared, said at its line
    directory = write_agent_dir(tmp_path, "sharer", model="toren/scripted",
                                memory={"shareWith": ["sales"]})
    with pytest.raises(AgentDefinitionError, match=r"agent\.yaml:\d+: memory\.shareWith: .*"
                                                   r"add shared to memory\.scopes"):
        load_agent(directory)
    directory = write_agent_dir(tmp_path, "keeper", model="toren/scripted",
                                memory={"keep": "forever"})
    with pytest.raises(AgentDefinitionError, match=r"agent\.yaml:\d+: memory\.keep: 'forever' "
                                                   r"is not an age"):
        load_agent(directory)
    directory = write_agent_dir(tmp_path, "typo", model="toren/scripted",
                                memory={"recal": {"limit": 3}})
    with pytest.raises(AgentDefinitionError, match=r"unknown key 'memory\.recal' \(did you "
                                                   r"mean 'recall'\?\)"):
        load_agent(directory)


async def test_recall_ranks_by_relevance_and_recency_within_its_budget(
        make_runtime, database_url: str) -> None:
    runtime = await make_runtime(agents=[], workers=False)
    store = runtime.store
    ids = {}
    for key, content in (("old", "Their printer is a LaserJet 4 printer"),
                         ("new", "The printer jams on thick paper"),
                         ("other", "Lives in Lisbon")):
        ids[key] = (await store.remember(key, NewMemory(
            agent="support", scope="agent", subject=None, content=content))).memory_id
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE toren_control.memories SET updated_at = now() - interval '90 days'"
                     " WHERE id = %s", [ids["old"]])
    view = MemoryView("support", None)
    found = await store.recall_memories(view, "printers", limit=5)
    # two mentions of printer weigh less than ninety days of age
    assert [m.id for m in found] == [ids["new"], ids["old"]]
    assert found[0].score > found[1].score > 0
    assert [m.id for m in await store.recall_memories(view, None, limit=2)] == [
        ids["other"], ids["new"]]
    # only stop words: the most recent first, as without a query
    stop_words = await store.recall_memories(view, "the a", limit=5)
    assert [m.id for m in stop_words] == [ids["other"], ids["new"], ids["old"]]

    text = recall_text(found, 90, "printers")
    assert text.count("[") == 1 and "1 more did not fit in the recall budget" in text

    # memory.keep: the retention pass erases memories unchanged for longer
    assert await store.expire_memories("support", 30 * 86400) == 1
    assert {m.id for m in await runtime.memory.list(agent="support")} == {ids["new"],
                                                                           ids["other"]}


async def test_bad_subjects_and_filters_are_refused_with_what_to_give(make_runtime,
                                                                       tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "support", model="toren/scripted", memory={})
    runtime = await make_runtime(dirs=[directory], workers=False)
    for subject, words in (("", "non-empty"), ("x" * 201, "at most 200"),
                           ("a\nb", "control characters")):
        with pytest.raises(InvalidMemory, match=words):
            await runtime.sessions.start("support", subject=subject)
        with pytest.raises(InvalidMemory, match=words):
            await runtime.start_run("support", "hi", subject=subject)
    with pytest.raises(InvalidMemory, match="unknown memory scope 'everyone'"):
        await runtime.memory.list(scope="everyone")
    with pytest.raises(InvalidMemory, match="nothing to change"):
        await runtime.memory.edit("00000000-0000-0000-0000-000000000000")
    with pytest.raises(InvalidMemory, match="at most 4000"):
        await runtime.memory.edit("00000000-0000-0000-0000-000000000000", content="x" * 4001)
    with pytest.raises(MemoryNotFound):
        await runtime.memory.edit("00000000-0000-0000-0000-000000000000", content="x")
    with pytest.raises(MemoryNotFound):
        await runtime.memory.delete("'; DROP TABLE toren_control.memories; --")
    session = await runtime.sessions.start("support", subject="whatsapp:+351 912")
    await wait_status(runtime, session, "awaiting_input")


async def test_workers_erase_memories_past_memory_keep(make_runtime, database_url: str,
                                                      tmp_path: Path) -> None:
    keeper = write_agent_dir(tmp_path, "keeper", model="toren/scripted",
                             memory={"keep": "2d", "scopes": ["agent"]})
    store = (await make_runtime(agents=[], workers=False)).store
    old = await store.remember("o", NewMemory("keeper", "agent", None, "An old fact"))
    new = await store.remember("n", NewMemory("keeper", "agent", None, "A new fact"))
    other = await store.remember("x", NewMemory("someone", "agent", None, "Kept forever"))
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE toren_control.memories SET updated_at = now() - interval '3 days'"
                     " WHERE id = ANY(%s::uuid[])", [[old.memory_id, other.memory_id]])
    runtime = await make_runtime(dirs=[keeper])  # its worker erases at start, then hourly

    async def kept() -> set[str]:
        return {m.id for m in await runtime.store.list_memories(agents=None)}

    for _ in range(100):
        if old.memory_id not in await kept():
            break
        await asyncio.sleep(0.1)
    assert await kept() == {new.memory_id, other.memory_id}


async def test_semantic_recall_finds_by_similarity_where_words_fail_and_degrades_without_pgvector(
        make_runtime, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    systems: list[str] = []
    plan = {"remember": [("remember", {"content": "Owns two printers"}),
                         ("remember", {"content": "Lives in Lisbon"})],
            "recall": [("recall", {"query": "printing"})]}
    directory = write_agent_dir(tmp_path, "support", model="test/support", memory={
        "embeddings": "toren/hash", "recall": {"minSimilarity": 0.2}})
    runtime = await make_runtime(dirs=[directory],
                                 models={"support": ScriptedModel(script=scripted(plan, systems))})
    assert await runtime.store.semantic_recall()  # the embedded Postgres loads pgvector
    session = await runtime.sessions.start("support", subject="ann")
    await session_turn(runtime, session, "remember")
    said = await session_turn(runtime, session, "recall")
    # "printing" shares no word with "printers" (full text stems them apart), but its vector
    # is close; Lisbon is neither
    assert "Owns two printers" in said and "Lisbon" not in said
    with psycopg.connect(database_url) as conn:
        [[vectors, dimensions]] = conn.execute(
            "SELECT count(*), max(array_length(vector, 1)) FROM toren_control.memory_vectors"
            " WHERE embedder = 'toren/hash'").fetchall()
    assert (vectors, dimensions) == (2, 1024)

    # without pgvector the same recall is by words: it finds nothing, and the worker said why
    await runtime.stop()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP EXTENSION vector")
    with caplog.at_level("WARNING", logger="toren.host.worker"):
        again = await make_runtime(dirs=[directory], models={
            "support": ScriptedModel(script=scripted(plan, systems))})
    assert "no pgvector loaded, so recall is by words only" in caplog.text
    other = await again.sessions.start("support", subject="ann")
    said = await session_turn(again, other, "recall")
    assert "No memory matches 'printing'" in said


def test_an_embedder_no_plugin_registered_is_refused_at_startup(tmp_path: Path) -> None:
    from toren.host.runtime import Runtime
    from toren.seams.plugins import PluginHost

    directory = write_agent_dir(tmp_path, "support", model="toren/scripted",
                                memory={"embeddings": "openai/text-embedding-3-small"})
    with pytest.raises(ConfigError, match=r"names the embedder 'openai/text-embedding-3-small' "
                                          r"under memory\.embeddings.*installed embedders: "
                                          r"toren/hash"):
        Runtime([directory], plugins=PluginHost(load=[], entry_points=False))


async def test_a_fork_is_about_the_same_person_and_does_not_write_the_copied_memories_again(
        make_runtime, tmp_path: Path) -> None:
    systems: list[str] = []
    plan = {"remember": [("remember", {"content": "Ann's VAT number is PT123"})]}
    directory = write_agent_dir(tmp_path, "support", model="test/support", memory={})
    runtime = await make_runtime(dirs=[directory], models={
        "support": ScriptedModel(script=scripted(plan, systems))})
    run_id = await runtime.start_run("support", "remember", subject="ann")
    assert (await runtime.wait_for_run(run_id, timeout_s=30)).status == "completed"
    fork = await runtime.fork_run(run_id, 1)
    assert (await runtime.wait_for_run(fork.id, timeout_s=30)).status == "completed"
    [created] = [e for e in await runtime.events(fork.id) if e.type == "RunCreated"]
    assert created.data["subject"] == "ann"
    # the copied step's write is in the log, not done again
    assert [m.content for m in await runtime.memory.list(subject="ann")] == [
        "Ann's VAT number is PT123"]
