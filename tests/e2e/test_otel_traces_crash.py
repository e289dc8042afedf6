"""A workflow run that survives a worker SIGKILL is one trace, exported over OTLP/HTTP by two
``toren worker`` processes (the standard OTEL_* variables, toren-otel) to a local receiver
that decodes the protobuf: spans of both processes, the takeover visible, one root."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from toren_otel.testing import OtlpReceiver

from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import wait_until
from toren.seams.telemetry import trace_ids
from toren.testing import write_agent_dir

WORKFLOW = '''
async def workflow(ctx):
    first = await ctx.wave([("worker", f"a{i}") for i in range(3)])
    second = await ctx.wave([("worker", r.task_id) for r in first])
    return " ".join(r.task_id for r in second)
'''
TOOLS = '''
from toren import tool

@tool(idempotent=True)
def note(text: str) -> str:
    """Note something down."""
    return "ok"
'''


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.mark.slow
def test_a_run_across_a_sigkill_is_one_trace_with_the_takeover(
        start_toren, toren_cli, database_url: str, tmp_path: Path, receiver: OtlpReceiver) -> None:
    directory = write_agent_dir(tmp_path, "waves", tools_py=TOOLS, subagents={
        "worker": "---\ndescription: Works.\ntools: [note]\n---\nWork.\n"})
    (directory / "workflow.py").write_text(WORKFLOW)
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.4",
           "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2", "TOREN_CONCURRENCY": "3",
           "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50",
           "OTEL_SERVICE_NAME": "toren-crash-test",
           # the first worker kills itself at its 8th append (mid-wave, calls in flight)
           "TOREN_CRASH_AT": "after_append@8", "TOREN_CRASH_ONCE": str(tmp_path / "crashed")}
    run_id = create_run(toren_cli, directory, "waves", "go", env)
    first = start_worker(start_toren, directory, env)
    first.proc.wait(timeout=60)
    assert first.proc.returncode == -9, first.stderr
    killed_at = datetime.now(UTC)
    assert wait_until(lambda: receiver.named("toren.run_tick"), 10)  # its spans got out
    second = start_worker(start_toren, directory, env)
    assert wait_until(lambda: run_row(database_url, "agent_waves", run_id)[0] == "completed",
                      60), second.stderr
    second.stop()  # SIGTERM: the exporter flushes on the way out
    assert wait_until(lambda: receiver.named("toren.run "), 10)

    trace_id, root_id = trace_ids(run_id)
    assert trace_id == uuid.UUID(run_id).int
    spans = receiver.named("")
    assert {span["trace_id"] for span in spans} == {trace_id}
    [root] = receiver.named("toren.run ")
    assert root["span_id"] == root_id and root["parent_id"] is None
    assert root["attributes"]["toren.status"] == "completed"

    worked = receiver.named("toren.task ") + receiver.named("toren.run_tick")
    assert {span["parent_id"] for span in worked} == {root_id}
    workers = {span["attributes"]["toren.worker_id"] for span in worked}
    assert len(workers) == 2, workers  # both processes, one trace

    takeovers = receiver.named("toren.lease_takeover")
    assert takeovers, [span["name"] for span in spans]
    second_worker = {span["attributes"]["toren.worker_id"] for span in takeovers}
    assert len(second_worker) == 1 and second_worker < workers
    assert all(span["attributes"]["toren.lease.epoch"] >= 2 for span in takeovers)
    assert all(span["attributes"]["toren.stream"].startswith("task:") for span in takeovers)
    # the task spans of the second worker that took over say so in an event
    assert any("toren.lease_takeover" in span["events"] for span in worked)

    events = run_events(database_url, "agent_waves", run_id)
    completed = [e for e in events if e.type == "ModelCallCompleted"]
    assert len(completed) == 12
    chats = receiver.named("chat ")
    spanned = [(span["attributes"]["toren.task_id"], span["attributes"]["toren.step"])
               for span in chats]
    recorded = {(e.stream.removeprefix("task:"), e.data["step"]) for e in completed}
    # one span per recorded call, never two; a call whose result died unrecorded with the
    # first worker has none, and the spans that worker made in its last batching window
    # (OTEL_BSP_SCHEDULE_DELAY) died with it: every call recorded after the kill has one
    assert len(spanned) == len(set(spanned)) and set(spanned) <= recorded
    assert {(e.stream.removeprefix("task:"), e.data["step"]) for e in completed
            if e.created_at is not None and e.created_at > killed_at} <= set(spanned)
    assert len(spanned) >= 6
    assert {span["attributes"]["gen_ai.request.model"] for span in chats} == {"toren/scripted"}
    tools = [(span["attributes"]["toren.task_id"], span["attributes"]["gen_ai.tool.call.id"])
             for span in receiver.named("execute_tool note")]
    results = [e for e in events if e.type == "ToolCallCompleted"]
    assert len(tools) == len(set(tools))
    assert set(tools) <= {(e.stream.removeprefix("task:"), e.data["call_id"]) for e in results}
    assert {(e.stream.removeprefix("task:"), e.data["call_id"]) for e in results
            if e.created_at is not None and e.created_at > killed_at} <= set(tools)
