"""Model fallbacks: when the task's model fails for good (or is overloaded, or exhausts its
retries), the next model of ``fallbacks:`` answers, durably: the receipt says which model
answered and why, and a resume never goes back to the failed model."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.durable import check_log
from toren.config import Settings
from toren.default_plugins.scripted import ScriptedModel
from toren.errors import ContextWindowExceeded, ProviderError
from toren.host.runtime import Runtime
from toren.seams.model import Model, ModelRequest, ModelResponse
from toren.testing import write_agent_dir

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


class Failing(Model):
    """Raises ``error`` on its first ``times`` calls, then answers."""

    def __init__(self, error: ProviderError, times: int = 1000) -> None:
        self.error = error
        self.times = times
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return ModelResponse(text=f"answered after {self.times} failures")


TOOLS = '''
def lookup(text: str) -> str:
    """Look up the weather in a city."""
    return f"sunny in {text}"
'''


async def run(runtime: Runtime, agent: str = "resilient") -> tuple[Any, list[Any], dict]:
    run_id = await runtime.start_run(agent, "Paris")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    events = await runtime.events(run_id)
    check_log(events)
    return record, events, await runtime.receipt(run_id)


def resilient(tmp_path: Path, fallbacks: list[str], name: str = "resilient",
              **fields: Any) -> Path:
    return write_agent_dir(tmp_path, name, model="test/primary", fallbacks=fallbacks,
                           tools_py=TOOLS, **fields)


async def test_a_missing_model_falls_back_for_the_rest_of_the_task_and_the_receipt_says_so(
        make_runtime, tmp_path: Path) -> None:
    primary = Failing(ProviderError("404 no such model", status=404, reason="model_not_found"))
    backup = Failing(ProviderError("500 boom", retryable=True, status=500,
                                   reason="server_error"), times=1)
    helper = ScriptedModel("test/backup")
    runtime = await make_runtime(
        dirs=[resilient(tmp_path, ["test/backup", "test/third"])],
        models={"primary": primary, "backup": backup, "third": helper})
    record, events, receipt = await run(runtime)
    assert record.status == "completed", record.error
    assert record.output == "answered after 1 failures"  # the backup's answer
    # the primary failed once and was never asked again: not after the backup's retry (a new
    # delivery of the task, folded from the log), not on the next step
    assert primary.calls == 1
    assert backup.calls == 2
    assert helper.calls == 0  # the backup answered after its retry; no need to go further
    fell = [e.data for e in events if e.type == "ModelFellBack"]
    assert [(f["from_model"], f["to_model"], f["reason"]) for f in fell] == [
        ("test/primary", "test/backup", "model_not_found")]
    assert "404" in fell[0]["error"]["message"]
    calls = receipt["tasks"][0]["model_calls"]
    assert [(c["model"], c["fell_back_from"], c["fallback_reason"]) for c in calls] == [
        ("test/backup", "test/primary", "model_not_found")]
    assert receipt["tasks"][0]["fallbacks"][0]["to_model"] == "test/backup"


async def test_an_overloaded_model_falls_back_at_once_and_a_rate_limit_after_its_retries(
        make_runtime, tmp_path: Path) -> None:
    overloaded = Failing(ProviderError("529 overloaded", retryable=True, status=529,
                                       reason="overloaded"))
    runtime = await make_runtime(dirs=[resilient(tmp_path, ["test/backup"])],
                                 models={"primary": overloaded,
                                         "backup": ScriptedModel("test/backup")})
    record, events, receipt = await run(runtime)
    assert record.status == "completed", record.error
    assert overloaded.calls == 1
    assert not [e for e in events if e.type == "RetryScheduled"]
    calls = receipt["tasks"][0]["model_calls"]
    assert {c["model"] for c in calls} == {"test/backup"}  # a tool step and the answer
    assert calls[0]["fallback_reason"] == "overloaded" and calls[1]["fell_back_from"] is None

    limited = Failing(ProviderError("429 slow down", retryable=True, status=429,
                                    reason="rate_limited"))
    runtime = await make_runtime(dirs=[resilient(tmp_path, ["test/backup"], "patient")],
                                 models={"primary": limited,
                                         "backup": ScriptedModel("test/backup")},
                                 retry_max_attempts=2)
    record, events, _receipt = await run(runtime, "patient")
    assert record.status == "completed", record.error
    assert limited.calls == 3  # the first try and two retries
    assert [e.data["attempt"] for e in events if e.type == "RetryScheduled"] == [1, 2]
    assert [e.data["reason"] for e in events if e.type == "ModelFellBack"] == [
        "retries_exhausted"]


async def test_a_context_overflow_falls_back_before_compacting_and_the_last_model_fails_alone(
        make_runtime, tmp_path: Path) -> None:
    small = Failing(ContextWindowExceeded("prompt is too long", status=400))
    runtime = await make_runtime(dirs=[resilient(tmp_path, ["test/large"])],
                                 models={"primary": small, "large": ScriptedModel("test/large")})
    record, events, _receipt = await run(runtime)
    assert record.status == "completed"
    assert not [e for e in events if e.type == "Compacted"]
    assert [e.data["reason"] for e in events if e.type == "ModelFellBack"] == [
        "context_window_exceeded"]

    broken = Failing(ProviderError("401 bad key", status=401, reason="auth"))
    also_broken = Failing(ProviderError("404 gone", status=404, reason="model_not_found"))
    runtime = await make_runtime(dirs=[resilient(tmp_path, ["test/backup"], "doomed")],
                                 models={"primary": broken, "backup": also_broken})
    record, events, _receipt = await run(runtime, "doomed")
    assert (record.status, record.stop_reason) == ("failed", "error")
    assert record.error is not None and "404 gone" in record.error["message"]
    assert (broken.calls, also_broken.calls) == (1, 1)


# -- the real SDKs against the local fake servers ----------------------------------------------

@pytest.fixture
def fakes_importable() -> Any:
    for plugin in ("toren-anthropic", "toren-openai"):
        sys.path.insert(0, str(PLUGINS / plugin / "tests"))
    yield
    for plugin in ("toren-anthropic", "toren-openai"):
        sys.path.remove(str(PLUGINS / plugin / "tests"))


@pytest.mark.slow  # the first import of both SDKs takes seconds
@pytest.mark.parametrize("failure", ["overloaded", "not_found", "context"])
async def test_anthropic_falls_back_to_openai_with_the_real_sdks(
        fakes_importable: None, database_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    import fake_anthropic
    import fake_openai

    reply = {"overloaded": fake_anthropic.overloaded(),
             "not_found": fake_anthropic.error(404, "not_found_error",
                                               "model: claude-nonexistent"),
             "context": fake_anthropic.prompt_too_long()}[failure]
    anthropic = await fake_anthropic.FakeAnthropic([reply]).start()
    openai = fake_openai.FakeOpenAI()
    openai_url = await openai.start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", fake_anthropic.TEST_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic.url)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "no-config"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_url)
    directory = write_agent_dir(tmp_path, "resilient", model="anthropic/claude-sonnet-4-6",
                                fallbacks=["openai/gpt-4o-mini"], tools_py=TOOLS,
                                limits={"maxBudgetUsd": 5})
    settings = dataclasses.replace(
        Settings(database_url=database_url, home=tmp_path / "home",
                 load_plugins=("toren-anthropic", "toren-openai")),
        # a lease long enough that importing the SDKs (seconds on a loaded machine) cannot
        # expire it mid-call, which would repeat a call and blur the counts below
        lease_ttl_s=10.0, poll_interval_s=0.2, retry_base_s=0.05, retry_max_delay_s=0.2,
        skip_preflight=True)
    runtime = Runtime([directory], settings=settings)
    await runtime.start()
    try:
        record, events, receipt = await run(runtime)
    finally:
        await runtime.stop()
        for model_id in ("anthropic/claude-sonnet-4-6", "openai/gpt-4o-mini"):
            await runtime.model(model_id).aclose()
        await anthropic.stop()
        await openai.stop()
    assert record.status == "completed", record.error
    assert "sunny in Paris" in record.output
    assert len(anthropic.requests) == 1  # tried once, never again
    assert len(openai.requests) == 2  # the tool step and the answer
    reason = {"overloaded": "overloaded", "not_found": "model_not_found",
              "context": "context_window_exceeded"}[failure]
    fell = [e.data for e in events if e.type == "ModelFellBack"]
    assert [(f["from_model"], f["to_model"], f["reason"]) for f in fell] == [
        ("anthropic/claude-sonnet-4-6", "openai/gpt-4o-mini", reason)]
    calls = receipt["tasks"][0]["model_calls"]
    assert calls[0]["provider"] == "openai"
    assert calls[0]["fell_back_from"] == "anthropic/claude-sonnet-4-6"
    # the failed attempt's reservation was released (the provider answered: not billed); the
    # fallback's calls were reserved and settled at the OpenAI price
    settled = [e.data for e in events if e.type == "BudgetSettled"]
    assert settled[0]["settled_usd"] is None
    assert [s["settled_usd"] for s in settled[1:]] == [c["cost_usd"] for c in calls]
    assert all(c["cost_usd"] > 0 for c in calls)
