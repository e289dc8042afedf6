"""``POST /evals`` on a par with ``toren eval run``, over real HTTP on real Postgres: a kept
version (``version``), another model (``model``), a dataset of recorded runs (``from_runs``)
replayed as forks (``fork_at``), ``function:`` graders of the deployed ``evals.py``; and every
hostile value of those fields refused with an error naming the field, starting nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.test_http_api import conforms
from toren.agents.datasets import dataset_from_json
from toren.client import TorenClient
from toren.core import events as ev
from toren.core.evals import fork_run_id
from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.server.evals import KEEPER
from toren.testing import ScriptedModel, serve_on_free_port, write_agent_dir

pytestmark = pytest.mark.timeout(120)

EVALS_PY = """\
from os.path import exists  # imported: not a grader a request may name


def says_hello(output):
    return "hello" in output, "says hello"


def _private(output):
    return True
"""


def write_crew(directory: Path, version: str, prompt: str) -> Path:
    directory.mkdir(exist_ok=True)
    (directory / "agent.yaml").write_text(
        f'name: crew\nmodel: toren/scripted\nversion: "{version}"\n')
    (directory / "prompt.md").write_text(prompt)
    (directory / "evals.py").write_text(EVALS_PY)
    return directory


@pytest.fixture
async def served(toren_runtime: Any, tmp_path: Path
                 ) -> AsyncIterator[tuple[TorenClient, Runtime, str]]:
    crew = write_crew(tmp_path / "crew", "1.0", "Answer briefly.\n")
    first = await toren_runtime([crew])  # keeps version 1.0 in the database
    old = first.agents["crew"].version
    await first.stop()
    write_crew(crew, "2.0", "Answer very briefly.\n")
    runtime = await toren_runtime([crew])
    _, token = await runtime.keys.create("ops")
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
    async with TorenClient(url, api_key=token) as client:
        yield client, runtime, old.hash
    await runner.cleanup()


async def pinned(runtime: Runtime, run_id: str) -> tuple[str, set[str]]:
    """The version a run is pinned to, and the models its calls used."""
    events = await runtime.events(run_id)
    version = next(e.data["version"] for e in events if e.type == "AgentVersionPinned")
    return version, {e.data["model"] for e in events if e.type == ev.MODEL_CALL_COMPLETED}


async def test_a_kept_version_and_another_model_over_http(
        served: tuple[TorenClient, Runtime, str]) -> None:
    client, runtime, old = served
    new = runtime.agents["crew"].version
    assert new is not None and new.hash != old
    dataset = {"cases": [{"id": "hi", "input": "hello there",
                          "graders": [{"contains": "hello"}, {"function": "says_hello"}]}]}

    by_version = await client.start_eval("crew", dataset, version="1.0")
    conforms("Eval", by_version)
    assert (by_version["version"], by_version["human_version"]) == (old, "1.0")
    assert by_version["auto_resume"] is True
    assert by_version["functions"].endswith("crew/evals.py")
    report = await client.wait_for_eval(by_version["id"], poll_s=0.1, timeout_s=60)
    assert report["totals"]["pass_rate"] == 1.0
    (run_id,) = report["cases"][0]["run_ids"]
    assert await pinned(runtime, run_id) == (old, {"toren/scripted"})

    with_model = await client.start_eval("crew", dataset, version=old[:8],
                                         model="toren/scripted-other")
    assert with_model["model"] == "toren/scripted-other"
    assert with_model["version"] not in (old, new.hash)
    assert "version=" in with_model["source"] and "model=" in with_model["source"]
    report = await client.wait_for_eval(with_model["id"], poll_s=0.1, timeout_s=60)
    assert report["totals"]["pass_rate"] == 1.0
    (run_id,) = report["cases"][0]["run_ids"]
    assert await pinned(runtime, run_id) == (with_model["version"], {"toren/scripted-other"})
    # the model's definition is a version of its own, kept, derived from 1.0
    kept = {v["hash"]: v for v in (await client.agent_versions("crew"))["versions"]}
    assert kept[with_model["version"]]["human_version"] == "1.0"

    # the served version with another model
    served_model = await client.start_eval("crew", dataset, model="toren/scripted-other")
    assert served_model["version"] not in (old, new.hash, with_model["version"])
    report = await client.wait_for_eval(served_model["id"], poll_s=0.1, timeout_s=60)
    assert report["totals"]["pass_rate"] == 1.0


async def test_recorded_runs_replayed_as_forks_over_http(
        served: tuple[TorenClient, Runtime, str]) -> None:
    client, runtime, _old = served
    recorded = []
    for n in range(3):
        recorded.append(await runtime.start_run("crew", f"question {n}"))
        await runtime.wait_for_run(recorded[-1], timeout_s=30)
    fresh = await client.start_eval("crew", from_runs={"q": "question"})
    assert fresh["dataset"]["cases"] == 3
    assert (await client.wait_for_eval(fresh["id"], poll_s=0.1,
                                       timeout_s=60))["totals"]["pass_rate"] == 1.0
    # an eval's own case runs are never recorded runs of the next one
    again = await client.start_eval("crew", from_runs={"q": "question"})
    assert again["dataset"]["cases"] == 3
    await client.wait_for_eval(again["id"], poll_s=0.1, timeout_s=60)

    started = await client.start_eval(
        "crew", from_runs={"status": "completed", "since": "1h", "limit": 2,
                           "graders": [{"contains": "question"}]}, fork_at=0)
    assert started["fork_at"] == 0 and "from_runs" in started["source"]
    report = await client.wait_for_eval(started["id"], poll_s=0.1, timeout_s=60)
    assert {c["case_id"] for c in report["cases"]} == {f"run:{r}" for r in recorded[1:]}
    assert report["totals"]["pass_rate"] == 1.0  # exact: the recorded answers
    for case in report["cases"]:
        (fork,) = case["run_ids"]
        assert fork not in recorded
        found = await runtime.get_run(fork)
        assert found.input == (await runtime.get_run(case["case_id"][4:])).input
        # the fork's id is the eval's, the case's and the repeat's: a resume finds it
        assert fork == fork_run_id(started["id"], case["case_id"], 1)


async def post(client: TorenClient, body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.post(
            f"{client.base_url}/evals", json=body,
            headers={"Authorization": f"Bearer {client.api_key}"}) as answer:
        return answer.status, await answer.json()


CASES = {"cases": [{"input": "hello"}]}
HOSTILE = [
    ({"version": "zz!"}, 400, "invalid_body", "'version' must be a kept version's hash"),
    ({"version": ""}, 400, "invalid_body", "'version' must be"),
    ({"version": 12}, 400, "invalid_body", "'version' must be"),
    ({"version": "ffffffff"}, 404, "eval_version_not_found",
     "version ffffffff: no kept version matches for agent 'crew'"),
    ({"version": "9.9"}, 404, "eval_version_not_found", "version 9.9: no kept version"),
    ({"model": "nowhere/judge"}, 422, "invalid_eval_request",
     "model 'nowhere/judge' cannot be used"),
    ({"model": "a\nb"}, 400, "invalid_body", "'model' must be a model id"),
    ({"model": "a b"}, 400, "invalid_body", "no spaces or control characters"),
    ({"fork_at": 0}, 400, "invalid_body", "'fork_at' replays recorded runs"),
    ({"fork_at": -1, "from_runs": {}, "dataset": None}, 400, "invalid_body",
     "'fork_at' must be an integer from 0 to 100000"),
    ({"fork_at": 10**12, "from_runs": {}, "dataset": None}, 400, "invalid_body",
     "'fork_at' must be an integer from 0 to 100000"),
    ({"fork_at": "1", "from_runs": {}, "dataset": None}, 400, "invalid_body", "'fork_at'"),
    ({"from_runs": {}}, 400, "invalid_body", "give 'dataset'"),
    ({"from_runs": "status=completed", "dataset": None}, 400, "invalid_body",
     "'from_runs' must be an object"),
    ({"from_runs": {"colour": "red"}, "dataset": None}, 400, "invalid_body",
     "from_runs: unknown field(s): colour"),
    ({"from_runs": {"status": "nope"}, "dataset": None}, 400, "config_error",
     "from_runs status=nope: a run's status is one of"),
    ({"from_runs": {"schedule": "Bad Name"}, "dataset": None}, 400, "config_error",
     "from_runs schedule=Bad Name"),
    ({"from_runs": {"since": "yesterday"}, "dataset": None}, 400, "invalid_since",
     "since must be an ISO 8601 date"),
    ({"from_runs": {"since": "99999999999d"}, "dataset": None}, 400, "invalid_since",
     "from_runs: since 99999999999d is too far back"),
    ({"from_runs": {"version": "../x"}, "dataset": None}, 400, "invalid_version",
     "version must be"),
    ({"from_runs": {"limit": 0}, "dataset": None}, 400, "invalid_body",
     "from_runs.limit must be an integer from 1 to 10000"),
    ({"from_runs": {"q": 5}, "dataset": None}, 400, "invalid_body", "from_runs.q must be text"),
    ({"from_runs": {"graders": [{"regex": "("}]}, "dataset": None}, 400,
     "eval_dataset_error", "from_runs: graders[0].regex is not a regular expression"),
    ({"from_runs": {"status": "failed"}, "dataset": None}, 400, "eval_dataset_error",
     "from_runs: no run matches"),
    ({"dataset": {"cases": [{"input": "a", "graders": [{"function": "exists"}]}]}}, 400,
     "eval_dataset_error", "function: exists is not a function defined in evals.py"),
    ({"dataset": {"cases": [{"input": "a", "graders": [{"function": "_private"}]}]}}, 400,
     "eval_dataset_error", "function: _private is not a function defined"),
    ({"dataset": {"cases": [{"input": "a", "graders": [{"function": "missing"}]}]}}, 400,
     "config_error", "has no function 'missing'"),
]


async def test_hostile_version_model_and_recorded_runs_are_refused(
        served: tuple[TorenClient, Runtime, str]) -> None:
    client, runtime, _old = served
    for fields, status, code, words in HOSTILE:
        body = {"agent": "crew", "dataset": CASES} | fields
        if body.get("dataset", CASES) is None:
            del body["dataset"]
        answer, found = await post(client, body)
        assert (answer, found["error"]["code"]) == (status, code), (fields, found)
        assert words in found["error"]["message"], (fields, found)
        conforms("Error", found)
    assert await runtime.evals.list() == []
    assert await runtime.list_runs(agent="crew") == []


async def test_resume_leaves_an_eval_another_server_holds_to_it(
        served: tuple[TorenClient, Runtime, str]) -> None:
    client, runtime, _old = served
    dataset = dataset_from_json({"cases": [{"id": "hi", "input": "hello"}]})
    record = await runtime.evals.create(dataset, "crew")  # as `toren eval run` makes one
    assert not record.auto_resume
    # another server holds it: this one neither takes it nor works it
    assert await runtime.store.claim_eval_leases("elsewhere", ["crew"], ttl_s=60,
                                                 eval_id=record.id) == [record.id]
    resumed = await client.resume_eval(record.id)
    assert (resumed["working"], resumed["started"]) == (True, False)
    report = await client.eval_report(record.id)
    assert report["working"] is True and report["totals"]["graded"] == 0
    assert await runtime.list_runs(agent="crew") == []
    # let go (its server stopped): a resume takes it, works it and lets the lease go
    await runtime.store.release_eval_lease("elsewhere", record.id)
    resumed = await client.resume_eval(record.id)
    assert (resumed["working"], resumed["started"]) == (True, True)
    report = await client.wait_for_eval(record.id, poll_s=0.1, timeout_s=60)
    assert report["totals"]["complete"] and report["working"] is False
    assert await runtime.store.eval_lease(record.id) is None


async def test_a_server_that_loses_an_eval_s_lease_stops_and_one_that_finds_it_expired_goes_on(
        make_runtime: Any, tmp_path: Path) -> None:
    # model calls of 1 s: the eval is at work when its lease is taken from this server
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "slow", model="test/slow")],
                                 models={"slow": ScriptedModel(delay=1.0)})
    _, token = await runtime.keys.create("ops")
    app = create_app(runtime, require_keys=True)
    runner, url = await serve_on_free_port(app)
    try:
        async with TorenClient(url, api_key=token) as client:
            started = await client.start_eval("slow", {"cases": [
                {"id": f"c{n}", "input": f"q{n}"} for n in range(3)]}, concurrency=1)
            keeper = app[KEEPER]
            assert started["id"] in keeper.working
            # another server took it (this one was cut off): this one stops working it
            async with runtime.store.pool.connection() as conn:
                await conn.execute(
                    "UPDATE toren_control.evals SET lease_holder = 'elsewhere', "
                    "lease_expires_at = now() + interval '1 hour' WHERE id = %s",
                    [started["id"]])
            assert await wait_for_async(lambda: started["id"] not in keeper.working, 10)
            report = await client.eval_report(started["id"])
            assert report["working"] is True and not report["totals"]["complete"]
            # that server died: its lease expires, and this one goes on by itself
            async with runtime.store.pool.connection() as conn:
                await conn.execute(
                    "UPDATE toren_control.evals SET lease_expires_at = now() "
                    "WHERE id = %s", [started["id"]])
            report = await client.wait_for_eval(started["id"], poll_s=0.1, timeout_s=60)
            assert report["totals"]["complete"] and report["totals"]["pass_rate"] == 1.0
            assert len(await runtime.list_runs(agent="slow", limit=10)) == 3
    finally:
        await runner.cleanup()


async def wait_for_async(predicate: Any, timeout_s: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True
