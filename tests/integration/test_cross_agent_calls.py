"""Cross-agent calls and background runs against real Postgres, with each agent served by its
own runtime (a fleet) on one database: consent on both sides, the durable wait, cancel, the
depth limit, receipts, and a session told once of a background run's end."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.durable import check_log
from toren.core.catalog import decode_events
from toren.core.fold import fold_task
from toren.testing import ScriptedModel, write_agent_dir

WRITER_TOOLS = '''
def facts(topic: str) -> str:
    """Look a topic up in the writer's own notes."""
    return f"the writer's facts about {topic}"
'''


def desk_and_writer(tmp_path: Path, *, accepts: list[str] | None = None,
                    writer_model: str = "toren/scripted") -> tuple[Path, Path]:
    desk = write_agent_dir(tmp_path / "fleet-a", "desk", peers=["writer"])
    fields = {} if accepts is None else {"acceptsFrom": accepts}
    writer = write_agent_dir(tmp_path / "fleet-b", "writer", tools_py=WRITER_TOOLS,
                             model=writer_model, **fields)
    return desk, writer


async def wait_status(runtime, run_id: str, status: str, timeout_s: float = 30) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if (await runtime.get_run(run_id)).status == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never became {status}: {await runtime.get_run(run_id)}")


async def test_a_peer_answers_from_its_own_fleet_and_the_caller_sees_only_the_answer(
        make_runtime, tmp_path: Path) -> None:
    desk_dir, writer_dir = desk_and_writer(tmp_path, accepts=["desk"],
                                           writer_model="test/priced")
    priced = ScriptedModel("test/priced", cost_usd=0.25)
    fleet_b = await make_runtime(dirs=[writer_dir.parent], models={"priced": priced})
    fleet_a = await make_runtime(dirs=[desk_dir.parent])
    assert set(fleet_a.agents) == {"desk"} and set(fleet_b.agents) == {"writer"}
    assert "ask_writer" in fleet_a.agents["desk"].tools
    assert "facts" not in fleet_a.agents["desk"].tools

    run_id = await fleet_a.start_run("desk", "tides")
    done = await fleet_a.wait_for_run(run_id, timeout_s=60)
    assert done.status == "completed", done
    assert "the writer's facts about tides" in done.output

    events = await fleet_a.events(run_id)
    check_log(events)
    task = [e.type for e in events if e.stream == "task:main"]
    assert task.count("PeerCallStarted") == 1 and task.count("PeerCallFinished") == 1
    started = next(e for e in events if e.type == "PeerCallStarted").data
    assert started["peer"] == "writer" and started["depth"] == 1

    (child,) = await fleet_a.children(run_id)
    assert child.id == started["run_id"] and child.agent == "writer"
    assert child.parent == {"agent": "desk", "run_id": run_id, "task_id": "main",
                            "kind": "peer"}
    assert child.depth == 1 and child.status == "completed" and child.input == "tides"
    # the peer ran in its own schema with its own tools; the caller's log holds only the answer
    peer_events = await fleet_b.events(child.id)
    assert any(e.type == "ToolCallCompleted" and e.data["name"] == "facts" for e in peer_events)
    assert not any(e.type == "ToolCallCompleted" and e.data["name"] == "facts" for e in events)
    # the caller's receipt links to the peer's and shows its cost; the peer keeps its own
    receipt = await fleet_a.receipt(run_id)
    (call,) = receipt["peer_calls"]
    assert call["run_id"] == child.id and call["agent"] == "writer"
    peer_receipt = await fleet_b.receipt(child.id)
    assert call["cost_usd"] == peer_receipt["totals"]["cost_usd"] > 0
    assert receipt["totals"]["peer_cost_usd"] == call["cost_usd"]


async def test_a_call_without_the_peers_consent_is_a_tool_error_and_starts_nothing(
        make_runtime, tmp_path: Path) -> None:
    desk_dir, writer_dir = desk_and_writer(tmp_path)  # the writer accepts no one
    fleet_b = await make_runtime(dirs=[writer_dir.parent])
    fleet_a = await make_runtime(dirs=[desk_dir.parent])
    run_id = await fleet_a.start_run("desk", "tides")
    done = await fleet_a.wait_for_run(run_id, timeout_s=60)
    assert done.status == "completed"
    result = next(e.data for e in await fleet_a.events(run_id)
                  if e.type == "ToolCallCompleted")
    assert result["is_error"] and result["error_kind"] == "refused"
    assert "does not accept calls from 'desk'" in result["output"]
    assert "acceptsFrom" in result["output"]
    assert await fleet_a.children(run_id) == []
    assert await fleet_b.list_runs(agent="writer") == []


async def test_an_unregistered_peer_is_refused_by_name(make_runtime, tmp_path: Path) -> None:
    desk_dir, _writer = desk_and_writer(tmp_path, accepts=["desk"])
    fleet_a = await make_runtime(dirs=[desk_dir.parent])  # no fleet ever served the writer
    run_id = await fleet_a.start_run("desk", "tides")
    await fleet_a.wait_for_run(run_id, timeout_s=60)
    result = next(e.data for e in await fleet_a.events(run_id)
                  if e.type == "ToolCallCompleted")
    assert result["error_kind"] == "refused"
    assert "'writer' is not registered in this database" in result["output"]


async def test_a_waiting_caller_holds_nothing_and_cancelling_it_cancels_the_peer(
        make_runtime, database_url: str, tmp_path: Path) -> None:
    import psycopg

    desk_dir, writer_dir = desk_and_writer(tmp_path, accepts=["desk"],
                                           writer_model="test/slow")
    fleet_b = await make_runtime(dirs=[writer_dir.parent],
                                 models={"slow": ScriptedModel("test/slow", delay=30)})
    fleet_a = await make_runtime(dirs=[desk_dir.parent])
    run_id = await fleet_a.start_run("desk", "tides")
    await wait_status(fleet_a, run_id, "waiting")
    (child,) = await fleet_a.children(run_id)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM toren_control.queue WHERE run_id = %s", [run_id])
        assert (await cursor.fetchone())[0] == 0  # no message, no worker: parked
        cursor = await conn.execute(
            "SELECT count(*) FROM toren_control.leases WHERE run_id = %s AND expires_at > now()",
            [run_id])
        assert (await cursor.fetchone())[0] == 0
    await fleet_a.cancel_run(run_id)
    assert (await fleet_b.get_run(child.id)).status == "cancelled"
    assert (await fleet_a.get_run(run_id)).status == "cancelled"


async def test_a_cycle_of_agents_asking_each_other_stops_at_the_depth_limit(
        make_runtime, tmp_path: Path) -> None:
    write_agent_dir(tmp_path, "ping", peers=["pong"], acceptsFrom=["pong"])
    write_agent_dir(tmp_path, "pong", peers=["ping"], acceptsFrom=["ping"])
    runtime = await make_runtime(dirs=[tmp_path], max_call_depth=3)
    run_id = await runtime.start_run("ping", "who is there?")
    done = await runtime.wait_for_run(run_id, timeout_s=90)
    assert done.status == "completed"
    chain, current = [], run_id
    while True:
        children = await runtime.children(current)
        if not children:
            break
        (child,) = children
        chain.append((child.agent, child.depth))
        current = child.id
    assert chain == [("pong", 1), ("ping", 2), ("pong", 3)]
    deepest = await runtime.events(current)
    refused = next(e.data for e in deepest if e.type == "ToolCallCompleted")
    assert refused["error_kind"] == "refused"
    assert "TOREN_MAX_CALL_DEPTH=3" in refused["output"]
    assert "ping -> pong -> ping -> pong -> ping" in refused["output"]


async def test_a_session_is_told_once_when_its_background_run_ends(
        make_runtime, database_url: str, tmp_path: Path) -> None:
    import psycopg

    write_agent_dir(tmp_path / "a", "chat", background=["writer"])
    write_agent_dir(tmp_path / "b", "writer", tools_py=WRITER_TOOLS, acceptsFrom=["chat"])
    fleet_b = await make_runtime(dirs=[tmp_path / "b"])
    fleet_a = await make_runtime(dirs=[tmp_path / "a"])
    session_id = await fleet_a.start_session("chat")
    await fleet_a.send_message(session_id, "tides")
    turn = await fleet_a.wait_for_turn(session_id, timeout_s=30)
    assert turn["status"] == "awaiting_input"
    (background,) = turn["background_runs"]
    assert background["agent"] == "writer"
    await fleet_b.wait_for_run(background["run_id"], timeout_s=60)
    for _ in range(200):
        session = await fleet_a.get_session(session_id)
        if session["background_runs"][0]["reported"]:
            break
        await asyncio.sleep(0.05)
    notices = [e for e in session["transcript"] if e["role"] == "background"]
    assert len(notices) == 1 and "the writer's facts about tides" in notices[0]["text"]
    assert session["background_runs"][0]["status"] == "completed"
    assert session["status"] == "awaiting_input"
    # a wake-up delivered again (a redelivery, a guardian) finds the session already told
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await conn.execute(
            "INSERT INTO toren_control.queue (agent, run_id, kind, payload) VALUES "
            "('chat', %s, 'task', jsonb_build_object('task_id', 'main', 'child_run_id', %s::text))",
            [session_id, background["run_id"]])
    for _ in range(200):
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            cursor = await conn.execute("SELECT count(*) FROM toren_control.queue "
                                        "WHERE run_id = %s", [session_id])
            if (await cursor.fetchone())[0] == 0:
                break
        await asyncio.sleep(0.05)
    assert [e.type for e in await fleet_a.events(session_id)].count("BackgroundRunFinished") == 1
    # the next turn's model sees the notice in its conversation (the offline model starts
    # another background run each turn: each is told once)
    await fleet_a.send_message(session_id, "what did the writer say?")
    await fleet_a.wait_for_turn(session_id, timeout_s=30)
    for _ in range(400):
        session = await fleet_a.get_session(session_id)
        if all(run["reported"] for run in session["background_runs"]):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(1)  # a stray wake-up now would tell it twice
    events = await fleet_a.events(session_id)
    told = [e.data["run_id"] for e in events if e.type == "BackgroundRunFinished"]
    started = [e.data["run_id"] for e in events if e.type == "BackgroundRunStarted"]
    assert len(started) == 2 and sorted(told) == sorted(started)
    # the conversation the model is sent holds the first notice
    state = fold_task(decode_events(e for e in events if e.stream == "task:main"))
    assert any(m.role == "user" and m.text.startswith(f"[background run {told[0]}")
               for m in state.messages)
    check_log(events)


FLOW = '''
async def workflow(ctx):
    results = await ctx.wave([("asker", "tides"), ("asker", "postgres")])
    return " | ".join(result.output or result.status for result in results)
'''


async def test_the_tasks_of_a_workflow_wave_ask_a_peer_at_once(make_runtime,
                                                                tmp_path: Path) -> None:
    flow = write_agent_dir(tmp_path / "a", "flow", peers=["writer"], subagents={
        "asker": "---\ndescription: asks the writer\n---\nAsk the writer.\n"})
    (flow / "workflow.py").write_text(FLOW)
    write_agent_dir(tmp_path / "b", "writer", tools_py=WRITER_TOOLS, acceptsFrom=["flow"])
    fleet_b = await make_runtime(dirs=[tmp_path / "b"])
    fleet_a = await make_runtime(dirs=[tmp_path / "a"])
    run_id = await fleet_a.start_run("flow", "go")
    done = await fleet_a.wait_for_run(run_id, timeout_s=90)
    assert done.status == "completed", done
    assert "facts about tides" in done.output and "facts about postgres" in done.output
    children = await fleet_a.children(run_id)
    assert sorted(child.parent["task_id"] for child in children) == ["w1-0", "w1-1"]
    assert {child.status for child in children} == {"completed"}
    assert len(await fleet_b.list_runs(agent="writer")) == 2
    check_log(await fleet_a.events(run_id))


async def test_hostile_calls_from_the_model_are_tool_errors_and_start_nothing(
        make_runtime, tmp_path: Path) -> None:
    from toren.seams.model import ModelResponse, ToolCall

    def asks(*calls: tuple[str, object]) -> ModelResponse:
        return ModelResponse(text="", stop_reason="tool_use", tool_calls=tuple(
            ToolCall(id=f"c{i}", name=name, arguments=args)  # type: ignore[arg-type]
            for i, (name, args) in enumerate(calls)))

    script = [
        asks(("ask_writer", {}), ("ask_writer", {"request": "x", "as": "admin"})),
        # not a session: no background tool; and a peer it was not given
        asks(("start_background_run", {"agent": "writer", "request": "x"}),
             ("ask_boss", {"request": "x"})),
        ModelResponse(text="done"),
    ]
    write_agent_dir(tmp_path / "a", "desk", model="test/hostile", peers=["writer"],
                    background=["writer"])
    write_agent_dir(tmp_path / "b", "writer", acceptsFrom=["desk"])
    fleet_b = await make_runtime(dirs=[tmp_path / "b"])
    fleet_a = await make_runtime(dirs=[tmp_path / "a"],
                                 models={"hostile": ScriptedModel("test/hostile",
                                                                  script=script)})
    run_id = await fleet_a.start_run("desk", "go")
    done = await fleet_a.wait_for_run(run_id, timeout_s=60)
    # each went back to the model as an error; four in a row stop the task (as for any tool)
    assert done.status == "failed" and done.error["code"] == "invalid_tool_calls"
    results = [e.data for e in await fleet_a.events(run_id) if e.type == "ToolCallCompleted"]
    assert [r["error_kind"] for r in results] == ["invalid_arguments"] * 2 + ["unknown_tool"] * 2
    assert "'request' is a required property" in results[0]["output"]
    assert await fleet_a.children(run_id) == []
    assert await fleet_b.list_runs(agent="writer") == []


async def test_the_peers_own_fleet_refuses_a_caller_its_agent_yaml_does_not_accept(
        make_runtime, database_url: str, tmp_path: Path) -> None:
    import psycopg

    desk_dir, writer_dir = desk_and_writer(tmp_path)  # the writer's agent.yaml accepts no one
    fleet_b = await make_runtime(dirs=[writer_dir.parent])
    # a registry that says otherwise (stale, or written by hand) does not override agent.yaml
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await conn.execute("UPDATE toren_control.agents SET accepts_from = '{desk}' "
                           "WHERE name = 'writer'")
    fleet_a = await make_runtime(dirs=[desk_dir.parent])
    run_id = await fleet_a.start_run("desk", "tides")
    done = await fleet_a.wait_for_run(run_id, timeout_s=60)
    assert done.status == "completed"
    (child,) = await fleet_a.children(run_id)
    peer = await fleet_b.get_run(child.id)
    assert peer.status == "failed" and peer.error["code"] == "call_refused"
    result = next(e.data for e in await fleet_a.events(run_id)
                  if e.type == "ToolCallCompleted")
    assert result["is_error"] and "does not accept calls from 'desk'" in result["output"]
    assert not any(e.type == "TaskScheduled" for e in await fleet_b.events(child.id))


async def test_a_channel_in_the_process_gets_the_notice_and_a_failing_one_loses_nothing(
        make_runtime, tmp_path: Path) -> None:
    from toren import hookimpl
    from toren.seams.channels import Channel

    class Inbox(Channel):
        description = "collects notices"

        def __init__(self, name: str, fail: bool) -> None:
            self.name, self.fail, self.notices = name, fail, []

        async def start(self, runtime: object) -> None:
            return None

        async def stop(self) -> None:
            return None

        async def notify(self, session_id: str, agent: str, text: str) -> None:
            if self.fail:
                raise RuntimeError("the chat app is down")
            self.notices.append((session_id, agent, text))

    inbox, broken = Inbox("inbox", False), Inbox("broken", True)

    class Plugin:
        @hookimpl
        def register_channels(self, register) -> None:
            register(broken)
            register(inbox)

    write_agent_dir(tmp_path / "a", "chat", background=["writer"])
    write_agent_dir(tmp_path / "b", "writer", tools_py=WRITER_TOOLS, acceptsFrom=["chat"])
    await make_runtime(dirs=[tmp_path / "b"])
    fleet_a = await make_runtime(dirs=[tmp_path / "a"])
    fleet_a.plugins.add_plugin(Plugin(), "inbox")
    # channels serve the agents that list them; these were added after loading, so the agent
    # lists them here (as `channels: {broken: {}, inbox: {}}` in agent.yaml would)
    fleet_a.agents["chat"].channels.update({"broken": {}, "inbox": {}})
    await fleet_a.start_channels()
    session_id = await fleet_a.start_session("chat")
    await fleet_a.send_message(session_id, "tides")
    for _ in range(400):
        if inbox.notices:
            break
        await asyncio.sleep(0.05)
    ((noticed_session, agent, text),) = inbox.notices
    assert (noticed_session, agent) == (session_id, "chat")
    assert text.startswith("[background run ") and "the writer's facts about tides" in text
    session = await fleet_a.get_session(session_id)
    assert [e["text"] for e in session["transcript"] if e["role"] == "background"] == [text]
    await fleet_a.stop_channels()
