"""Evals over real HTTP on real Postgres: started, worked by the server, reported, listed,
compared and resumed through the client; every answer conforms to the OpenAPI document;
keys' scopes and agents hold; hostile bodies and ids are refused with a clear error."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.test_http_api import conforms
from toren.client import InvalidId, TorenClient
from toren.core.audit import AuditQuery
from toren.core.messages import ModelResponse
from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import ScriptedModel, serve_on_free_port, write_agent_dir

VERDICT = json.dumps({"passed": True, "score": 0.9, "reason": "greets"})
DATASET = {"name": "http", "graders": [{"max_steps": 5}], "cases": [
    {"id": "hello", "input": "hello", "graders": [{"contains": "hello"}],
     "tags": ["greeting"]},
    {"id": "judged", "input": "hi there", "rubric": "Greets the user"},
    {"id": "never", "input": "x", "graders": [{"regex": "^zebra$"}]},
]}


@pytest.fixture
async def served(make_runtime: Any, tmp_path: Path
                 ) -> AsyncIterator[tuple[str, Runtime, dict[str, str]]]:
    models = {"model": ScriptedModel(cost_usd=0.01),
              "judge": ScriptedModel(script=[ModelResponse(text=VERDICT)], cost_usd=0.25)}
    dirs = [write_agent_dir(tmp_path, "crew", model="test/model"),
            write_agent_dir(tmp_path, "other", model="test/model")]
    runtime = await make_runtime(dirs=dirs, models=models)
    _, token = await runtime.keys.create("ops")
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
    yield url, runtime, {"Authorization": f"Bearer {token}"}
    await runner.cleanup()


async def post(url: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.post(f"{url}{path}", json=body,
                                                          headers=headers) as answer:
        return answer.status, await answer.json()


async def get(url: str, path: str, headers: dict[str, str]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}{path}",
                                                         headers=headers) as answer:
        return answer.status, await answer.json()


async def test_an_eval_over_http_from_start_to_comparison(
        served: tuple[str, Runtime, dict[str, str]]) -> None:
    url, runtime, headers = served
    async with TorenClient(url, api_key=headers["Authorization"][7:]) as client:
        started = await client.start_eval("crew", DATASET, repeat=2, concurrency=2,
                                          grader_model="test/judge")
        conforms("Eval", started)
        assert (started["agent"], started["status"], started["repeat"]) == ("crew", "running", 2)
        report = await client.wait_for_eval(started["id"], poll_s=0.1, timeout_s=60)
        conforms("EvalReport", report)
        assert report["totals"]["pass_rate"] == pytest.approx(4 / 6, abs=1e-4)
        assert report["grader_cost_usd"] == pytest.approx(2 * 0.25)  # the rubric's, apart
        assert report["cost_usd"]["total"] == pytest.approx(6 * 0.01)
        assert report["tags"] == {"greeting": {"passed": 2, "graded": 2, "pass_rate": 1.0}}
        assert report["working"] is False

        second = await client.start_eval("crew", DATASET, grader_model="test/judge")
        await client.wait_for_eval(second["id"], poll_s=0.1, timeout_s=60)
        listed = await client.list_evals(agent="crew")
        conforms("EvalList", listed)
        assert [e["id"] for e in listed["evals"]] == [second["id"], started["id"]]
        page = await client.list_evals(limit=1)
        assert [e["id"] for e in page["evals"]] == [second["id"]]
        rest = await client.list_evals(limit=1, cursor=page["next_cursor"])
        assert [e["id"] for e in rest["evals"]] == [started["id"]]
        assert rest["next_cursor"] is None

        compared = await client.compare_evals(started["id"], second["id"])
        conforms("EvalComparison", compared)
        assert compared["same_dataset"] and compared["changes"]["same"] == 3

        resumed = await client.resume_eval(started["id"])  # finished: nothing to run
        conforms("Eval", resumed)
        assert (resumed["working"], resumed["started"]) == (False, False)
        again = await client.wait_for_eval(started["id"], poll_s=0.1, timeout_s=30)
        assert again["cases"] == report["cases"]
        assert len(await runtime.list_runs(agent="crew", limit=100)) == 6 + 3

        with pytest.raises(InvalidId, match="is not an eval id"):
            await client.eval_report("../runs")
    entries = await runtime.audit.page(AuditQuery(action="eval"))
    assert [(e.entry.action, e.entry.target, e.entry.agent) for e in entries.items] == [
        ("eval.resume", started["id"], "crew"), ("eval.start", second["id"], "crew"),
        ("eval.start", started["id"], "crew")]


HOSTILE = [
    ({"agent": "crew"}, 400, "invalid_body", "give 'dataset'"),
    ({"agent": "nobody", "dataset": DATASET}, 404, "not_found", "no agent named 'nobody'"),
    ({"agent": "crew", "dataset": DATASET, "extra": 1}, 400, "invalid_body",
     "unknown field(s): extra"),
    ({"agent": "crew", "dataset": DATASET, "repeat": 0}, 400, "invalid_body",
     "'repeat' must be an integer from 1 to 100"),
    ({"agent": "crew", "dataset": DATASET, "concurrency": True}, 400, "invalid_body",
     "'concurrency' must be"),
    ({"agent": "crew", "dataset": {"cases": [{"input": "a", "graders": [{"regex": "("}]}]}},
     400, "eval_dataset_error", "dataset: cases[0].graders[0].regex is not a regular"),
    ({"agent": "crew", "dataset": {"cases": [{"input": "a", "graders": [
        {"function": "grade"}]}]}}, 400, "eval_dataset_error",
     "function: graders run the functions of the evals.py deployed with crew"),
    ({"agent": "crew", "dataset": {"cases": [{"input": "a", "rubric": "r"}]}}, 400,
     "eval_dataset_error", "--grader-model"),
    ({"agent": "crew", "dataset": DATASET, "grader_model": "nowhere/judge"}, 400,
     "eval_dataset_error", "a rubric's model 'nowhere/judge' cannot be used"),
    ({"agent": "crew", "dataset": {"cases": "all"}}, 400, "eval_dataset_error",
     "cases: must be a list"),
    ({"agent": "crew", "dataset": {"cases": [{"input": "a", "id": "x"},
                                             {"input": "b", "id": "x"}]}}, 400,
     "eval_dataset_error", "case id 'x' is used twice"),
    ({"agent": "crew", "dataset": [1]}, 400, "eval_dataset_error", "must be a mapping"),
]


async def test_hostile_bodies_are_refused_and_start_nothing(
        served: tuple[str, Runtime, dict[str, str]]) -> None:
    url, runtime, headers = served
    for body, status, code, words in HOSTILE:
        answer, found = await post(url, "/evals", headers, body)
        assert (answer, found["error"]["code"]) == (status, code), found
        assert words in found["error"]["message"]
        conforms("Error", found)
    async with aiohttp.ClientSession() as http, http.post(
            f"{url}/evals", data="not json", headers=headers | {
                "Content-Type": "application/json"}) as answer:
        assert answer.status == 400
    assert await runtime.evals.list() == []
    assert await runtime.list_runs(agent="crew") == []


async def test_scopes_agents_and_ids(served: tuple[str, Runtime, dict[str, str]]) -> None:
    url, runtime, headers = served
    _, viewer = await runtime.keys.create("viewer", role="viewer")
    _, other_only = await runtime.keys.create("other-only", agents=["other"])
    status, made = await post(url, "/evals", headers, {"agent": "crew", "dataset": DATASET,
                                                       "grader_model": "test/judge"})
    assert status == 202
    eval_id = made["id"]
    as_viewer = {"Authorization": f"Bearer {viewer}"}
    status, refused = await post(url, "/evals", as_viewer, {"agent": "crew",
                                                            "dataset": DATASET})
    assert (status, refused["error"]["code"]) == (403, "forbidden")
    assert "runs:write" in refused["error"]["message"]
    assert (await get(url, f"/evals/{eval_id}", as_viewer))[0] == 200

    limited = {"Authorization": f"Bearer {other_only}"}
    status, hidden = await get(url, f"/evals/{eval_id}", limited)
    assert (status, hidden["error"]["code"]) == (404, "eval_not_found")
    assert (await get(url, "/evals", limited))[1]["evals"] == []
    assert (await get(url, f"/evals/{eval_id}/compare/{eval_id}", limited))[0] == 404
    assert (await post(url, f"/evals/{eval_id}/resume", limited, None))[0] == 404
    status, _ = await post(url, "/evals", limited, {"agent": "crew", "dataset": DATASET})
    assert status == 404

    for path in ("/evals/nope", "/evals/00000000-0000-0000-0000-000000000000",
                 f"/evals/{eval_id}/compare/nope"):
        status, found = await get(url, path, headers)
        assert (status, found["error"]["code"]) == (404, "eval_not_found"), path
    for query, code in (("limit=0", "invalid_query"), ("limit=x", "invalid_query"),
                        ("cursor=abc", "invalid_cursor"), ("agent=nobody", "not_found"),
                        ("sort=up", "invalid_query")):
        status, found = await get(url, f"/evals?{query}", headers)
        assert found["error"]["code"] == code, query
        conforms("Error", found)
