"""Hostile model output through a real runtime: every case ends with a clear result in the
log, the worker survives it, and a well-behaved run beside it completes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.durable import check_log
from toren.seams.model import ModelResponse, ToolCall
from toren.testing import ScriptedModel, write_agent_dir

TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
'''


def calls(*tool_calls: ToolCall) -> ModelResponse:
    return ModelResponse(text="", tool_calls=tool_calls, stop_reason="tool_use")


def answer(text: str) -> ModelResponse:
    return ModelResponse(text=text)


# name -> (script, expected status, what the tool results' error kinds must be)
CASES = {
    "unknown_tool": ([calls(ToolCall("c1", "rm_rf", {"path": "/"})), answer("ok")],
                     "completed", ["unknown_tool"]),
    "empty_tool_name": ([calls(ToolCall("c1", "", {})), answer("ok")],
                        "completed", ["unknown_tool"]),
    "unparseable_arguments": ([calls(ToolCall("c1", "add", {}, "Expecting ',' at 1:9")),
                               answer("ok")], "completed", ["invalid_arguments"]),
    "wrong_argument_types": ([calls(ToolCall("c1", "add", {"a": "1", "b": None})),
                              answer("ok")], "completed", ["invalid_arguments"]),
    "extra_arguments": ([calls(ToolCall("c1", "add", {"a": 1, "b": 2, "c": 3})),
                         answer("ok")], "completed", ["invalid_arguments"]),
    "arguments_not_an_object": ([calls(ToolCall("c1", "add", [1, 2]))  # type: ignore[arg-type]
                                 , answer("ok")], "completed", ["invalid_arguments"]),
    "duplicate_call_ids": ([calls(ToolCall("c1", "add", {"a": 1, "b": 2}),
                                  ToolCall("c1", "add", {"a": 3, "b": 4})), answer("ok")],
                           "completed", [None, None]),
    "call_id_reused_from_an_earlier_step": (
        [calls(ToolCall("c1", "add", {"a": 1, "b": 2})),
         calls(ToolCall("c1", "add", {"a": 3, "b": 4})), answer("ok")],
        "completed", [None, None]),
    "two_hundred_calls_at_once": ([calls(*(ToolCall(f"c{i}", "add", {"a": i, "b": 1})
                                           for i in range(200))), answer("ok")],
                                  "completed", [None] * 200),
    "nul_bytes_in_text": ([answer("before\x00after")], "completed", []),
    "nul_bytes_in_arguments": ([calls(ToolCall("c1", "add\x00", {"a\x00": "\x00"})),
                                answer("ok\x00")], "completed", ["unknown_tool"]),
    "lone_surrogates": ([answer("broken \ud800 text")], "completed", []),
    "huge_answer": ([answer("x" * 3_000_000)], "completed", []),
    "only_invalid_calls_forever": ([calls(ToolCall("c1", "nope", {}))], "failed",
                                   ["unknown_tool"] * 3),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_hostile_model_output_gets_a_clear_result_and_harms_nothing_else(
        make_runtime, tmp_path: Path, case: str) -> None:
    script, expected_status, error_kinds = CASES[case]
    hostile = ScriptedModel(script=script)
    runtime = await make_runtime(
        dirs=[write_agent_dir(tmp_path, "hostile", tools_py=TOOLS, model="test/hostile"),
              write_agent_dir(tmp_path, "calm", tools_py=TOOLS)],
        models={"hostile": hostile})
    bad = await runtime.start_run("hostile", "go")
    good = await runtime.start_run("calm", "go")
    records = await asyncio.gather(runtime.wait_for_run(bad, timeout_s=60),
                                   runtime.wait_for_run(good, timeout_s=60))
    assert records[1].status == "completed"
    record = records[0]
    assert record.status == expected_status, record.error
    events = await runtime.events(bad)
    check_log(events)
    results = [e.data for e in events if e.type == "ToolCallCompleted"]
    assert [r["error_kind"] for r in results] == error_kinds
    # every result answers exactly one call the model made, by a distinct id
    assert len({r["call_id"] for r in results}) == len(results)
    for result in results:
        if result["is_error"]:
            assert result["output"].startswith("Error: ") and len(result["output"]) > 30
    if expected_status == "failed":
        assert record.error["code"] == "invalid_tool_calls"
    # the worker is alive: another run of the hostile agent's neighbour still completes
    after = await runtime.start_run("calm", "again")
    assert (await runtime.wait_for_run(after, timeout_s=30)).status == "completed"
