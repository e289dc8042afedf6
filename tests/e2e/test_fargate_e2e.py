"""``TOREN_QUEUE=sqs TOREN_RUNTIME=fargate toren worker`` as real processes: the example crew
runs against moto in server mode (SQS and CloudWatch, real boto3) with a fake ECS agent for
task protection; SIGTERM drains within the stop timeout (finishing work that fits in
``TOREN_SHUTDOWN_GRACE``, handing back what does not)."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from toren_fargate.testing import FakeEcsAgent

from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import wait_until
from tests.durable import check_log

EXAMPLES = Path(__file__).resolve().parents[2] / "contrib" / "examples"


@pytest.fixture
def ecs_agent() -> Iterator[FakeEcsAgent]:
    agent = FakeEcsAgent().start()
    yield agent
    agent.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fargate_env(sqs_env: dict[str, str], database_url: str, agent: FakeEcsAgent,
                **extra: str) -> dict[str, str]:
    """A Fargate task's environment, every AWS endpoint pointing at moto."""
    return sqs_env | {
        "DATABASE_URL": database_url, "TOREN_QUEUE": "sqs", "TOREN_RUNTIME": "fargate",
        "ECS_AGENT_URI": agent.url, "TOREN_FARGATE_HEALTH_HOST": "127.0.0.1",
        "TOREN_FARGATE_HEALTH_PORT": str(free_port()),
        "TOREN_FARGATE_METRIC_NAMESPACE": f"Toren-{sqs_env['TOREN_SQS_PREFIX'].rstrip('-')}",
        "TOREN_FARGATE_METRIC_INTERVAL": "1",
        "TOREN_CLOUDWATCH_ENDPOINT_URL": sqs_env["TOREN_SQS_ENDPOINT_URL"],
        "TOREN_LEASE_TTL": "2", "TOREN_POLL_INTERVAL": "0.2"} | extra


def health(env: dict[str, str]) -> tuple[int, dict[str, object]]:
    url = f"http://127.0.0.1:{env['TOREN_FARGATE_HEALTH_PORT']}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_toren_queue_sqs_toren_runtime_fargate_toren_worker_runs_the_example_crew(
        sqs_env: dict[str, str], ecs_agent: FakeEcsAgent, start_toren, toren_cli,
        database_url: str, tmp_path: Path) -> None:
    crew = tmp_path / "research-crew"
    shutil.copytree(EXAMPLES / "research-crew", crew)
    # model calls of 1.5 s: longer than the 1 s between the runtime's looks at its work
    env = fargate_env(sqs_env, database_url, ecs_agent, TOREN_SCRIPTED_DELAY="1.5")

    worker = start_toren("worker", "--dir", str(crew), "--json", env=env)
    ready = worker.next_json()
    assert ready["event"] == "ready" and ready["queue"].startswith("Amazon SQS at http://127.")
    assert ready["workers"].startswith("Fargate task (")
    assert health(env)[0] == 200

    run_id = create_run(toren_cli, crew, "research-crew", "What is event sourcing?", env)
    assert wait_until(lambda: run_row(database_url, "agent_research_crew", run_id)[0]
                      in ("completed", "failed"), 60), worker.stderr
    status, output, error = run_row(database_url, "agent_research_crew", run_id)
    assert status == "completed", error
    assert "Event sourcing stores every change" in json.dumps(output)
    check_log(run_events(database_url, "agent_research_crew", run_id))
    # the task was protected from scale-in while it worked, and released after
    assert ecs_agent.wait_for([True, False], timeout=15), ecs_agent.requests
    # the queue-depth metric reached CloudWatch (moto)
    cloudwatch = boto3.client("cloudwatch", endpoint_url=sqs_env["TOREN_SQS_ENDPOINT_URL"],
                              region_name="us-east-1")
    namespace = env["TOREN_FARGATE_METRIC_NAMESPACE"]
    assert wait_until(lambda: cloudwatch.list_metrics(
        Namespace=namespace, MetricName="QueueDepth")["Metrics"], 15)

    started = time.monotonic()
    assert worker.stop(signal.SIGTERM, timeout=30) == 0, worker.stderr
    assert time.monotonic() - started < 30  # ECS's default stopTimeout


@pytest.mark.slow
def test_sigterm_finishes_work_in_hand_stops_claiming_and_exits_within_the_stop_timeout(
        sqs_env: dict[str, str], ecs_agent: FakeEcsAgent, start_toren, toren_cli,
        database_url: str, tmp_path: Path) -> None:
    crew = tmp_path / "research-crew"
    shutil.copytree(EXAMPLES / "research-crew", crew)
    # each model call takes 1 s; the drain may take 15 (stopTimeout 25)
    calls = tmp_path / "model-calls.jsonl"
    env = fargate_env(sqs_env, database_url, ecs_agent, TOREN_SCRIPTED_DELAY="1",
                      TOREN_SCRIPTED_CALL_LOG=str(calls), TOREN_SHUTDOWN_GRACE="15",
                      TOREN_FARGATE_STOP_TIMEOUT="25")
    worker = start_worker(start_toren, crew, env)
    first = create_run(toren_cli, crew, "research-crew", "postgres", env)
    assert ecs_agent.wait_for([True], timeout=30), worker.stderr  # busy with its task

    worker.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert wait_until(lambda: health(env)[0] == 503, 5)  # draining: unhealthy at once
    second = create_run(toren_cli, crew, "research-crew", "durable execution", env)
    code = worker.proc.wait(timeout=25)
    drained_in = time.monotonic() - signalled
    worker.close()

    assert code == 0, worker.stderr
    assert drained_in < 25
    # the task in hand finished during the drain; the run's next step waits for a worker
    timeline = [(e.stream, e.type, e.created_at.isoformat() if e.created_at else None)
                for e in run_events(database_url, "agent_research_crew", first)]
    assert "TaskFinished" in {kind for _stream, kind, _at in timeline}, (
        timeline, drained_in, worker.stderr[-3000:])
    assert run_events(database_url, "agent_research_crew", second) == [] or not any(
        e.type == "TaskStarted" for e in run_events(database_url, "agent_research_crew",
                                                     second))  # never claimed
    assert ecs_agent.states() == [True, False]  # protection given up on the way out

    # the next task picks both runs up, and repeats no model call
    replacement = start_worker(start_toren, crew, env | {"TOREN_SCRIPTED_DELAY": "0"})
    for run_id in (first, second):
        assert wait_until(lambda run_id=run_id: run_row(
            database_url, "agent_research_crew", run_id)[0] == "completed", 60), \
            replacement.stderr
    replacement.stop()
    completed = sum(e.type == "ModelCallCompleted" for run_id in (first, second)
                    for e in run_events(database_url, "agent_research_crew", run_id))
    assert completed == len(calls.read_text().splitlines())


@pytest.mark.slow
def test_sigterm_hands_back_work_that_outlasts_the_grace_and_another_task_finishes_it(
        sqs_env: dict[str, str], ecs_agent: FakeEcsAgent, start_toren, toren_cli,
        database_url: str, tmp_path: Path) -> None:
    crew = tmp_path / "research-crew"
    shutil.copytree(EXAMPLES / "research-crew", crew)
    calls = tmp_path / "model-calls.jsonl"
    env = fargate_env(sqs_env, database_url, ecs_agent, TOREN_SCRIPTED_DELAY="30",
                      TOREN_SCRIPTED_CALL_LOG=str(calls), TOREN_SHUTDOWN_GRACE="1",
                      TOREN_FARGATE_STOP_TIMEOUT="10")
    worker = start_worker(start_toren, crew, env)
    run_id = create_run(toren_cli, crew, "research-crew", "postgres", env)
    assert ecs_agent.wait_for([True], timeout=30), worker.stderr

    started = time.monotonic()
    assert worker.stop(signal.SIGTERM, timeout=10) == 0, worker.stderr
    assert time.monotonic() - started < 10  # before ECS's SIGKILL
    assert run_row(database_url, "agent_research_crew", run_id)[0] == "running"

    replacement = start_worker(start_toren, crew, env | {"TOREN_SCRIPTED_DELAY": "0"})
    assert wait_until(lambda: run_row(database_url, "agent_research_crew", run_id)[0]
                      == "completed", 60), replacement.stderr
    replacement.stop()
    events = run_events(database_url, "agent_research_crew", run_id)
    check_log(events, calls=[json.loads(line) for line in calls.read_text().splitlines()])
    # only the call cut off by the drain was made again
    assert sum(e.type == "ModelCallCompleted" for e in events) == len(
        calls.read_text().splitlines()) - 1


TOKEN_TOOLS = '''
import os

from toren import tool


@tool(idempotent=True)
def read_token(topic: str) -> str:
    """Say which token this process holds now."""
    return "token is " + os.environ["CREW_TOKEN"]
'''


@pytest.mark.slow
def test_a_worker_takes_settings_and_agent_env_from_secrets_manager_and_refreshes_on_sighup(
        sqs_env: dict[str, str], start_toren, toren_cli, database_url: str,
        tmp_path: Path) -> None:
    from toren.testing import write_agent_dir

    endpoint = sqs_env["TOREN_SQS_ENDPOINT_URL"]
    secrets = boto3.client("secretsmanager", endpoint_url=endpoint, region_name="us-east-1")
    prefix = sqs_env["TOREN_SQS_PREFIX"]
    bundle = secrets.create_secret(Name=f"{prefix}crew", SecretString=json.dumps(
        {"CREW_TOKEN": "first-7c2e91"}))["ARN"]
    database = secrets.create_secret(Name=f"{prefix}db", SecretString=json.dumps(
        {"url": database_url}))["ARN"]
    crew = write_agent_dir(tmp_path, "vault", tools_py=TOKEN_TOOLS, env=["CREW_TOKEN"])
    # DATABASE_URL and the agent's CREW_TOKEN exist only in Secrets Manager
    env = sqs_env | {"TOREN_QUEUE": "sqs", "TOREN_SECRETSMANAGER_ENDPOINT_URL": endpoint,
                     "TOREN_SECRETS": bundle, "DATABASE_URL": f"aws-sm:{database}#url",
                     "TOREN_LOG_LEVEL": "DEBUG", "TOREN_POLL_INTERVAL": "0.2"}
    worker = start_worker(start_toren, crew, env)

    def run_output(text: str) -> str:
        run_id = create_run(toren_cli, crew, "vault", text, env)
        assert wait_until(lambda: run_row(database_url, "agent_vault", run_id)[0]
                          == "completed", 60), worker.stderr[-3000:]
        return json.dumps(run_row(database_url, "agent_vault", run_id)[1])

    assert "token is first-7c2e91" in run_output("one")
    secrets.put_secret_value(SecretId=bundle, SecretString=json.dumps(
        {"CREW_TOKEN": "second-4b8d03"}))
    worker.proc.send_signal(signal.SIGHUP)
    refreshed = "SIGHUP: refreshed 2 variable(s) from secrets: CREW_TOKEN, DATABASE_URL"
    assert wait_until(lambda: refreshed
                      in " ".join(worker.stderr.split()), 15), [
        line for line in worker.stderr.splitlines() if "SIGHUP" in line or "ecret" in line]
    assert "token is second-4b8d03" in run_output("two")
    assert worker.stop() == 0
    logs = worker.stderr
    for value in ("first-7c2e91", "second-4b8d03", database_url):
        assert value not in logs, f"{value} was logged"
