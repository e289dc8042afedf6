"""``toren queue dlq list`` and ``redrive`` as a user runs them (the console script, a
``toren.commands`` entry point of toren-sqs) against a real SQS API (moto server): a
dead-lettered Toren message is listed with its reason, a foreign one is named as such, and a
redrive moves the Toren message back to its agent's queue and leaves the foreign one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import boto3
from toren_sqs.queue import Body

from toren.testing import write_agent_dir

TOREN = Path(sys.executable).parent / "toren"


def toren(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TOREN), *args], env={**os.environ, **env,
                                                    "TOREN_LOAD_PLUGINS": "toren-sqs"},
                          capture_output=True, text=True, timeout=120, check=False)


def test_dead_letters_are_listed_and_redriven_by_the_command(sqs_env, tmp_path: Path) -> None:
    client = boto3.client("sqs", endpoint_url=sqs_env["TOREN_SQS_ENDPOINT_URL"],
                          region_name="us-east-1")
    prefix = sqs_env["TOREN_SQS_PREFIX"]
    queue = client.create_queue(QueueName=f"{prefix}alpha")["QueueUrl"]
    dead = client.create_queue(QueueName=f"{prefix}alpha-dlq")["QueueUrl"]
    body = Body(agent="alpha", run_id="run-7", kind="task", payload={"step": 1},
                prior_attempts=3, dead_reason="delivered 3 times without completing")
    client.send_message(QueueUrl=dead, MessageBody=body.encode())
    client.send_message(QueueUrl=dead, MessageBody="<not json>")
    write_agent_dir(tmp_path / "crews", "alpha")

    listed = toren(sqs_env, "queue", "dlq", "list", "--dir", str(tmp_path / "crews"), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = sorted(json.loads(listed.stdout)["dead_letters"], key=lambda r: r["reason"])
    assert [(r["agent"], r["run_id"], r["kind"], r["reason"]) for r in rows] == [
        ("alpha", "run-7", "task", "delivered 3 times without completing"),
        ("alpha", None, None, "not a Toren message")]

    # a redrive (of another agent's queues: listed messages stay hidden for 30 s) moves the
    # Toren message back with its delivery count reset, and leaves the foreign one
    queue = client.create_queue(QueueName=f"{prefix}beta")["QueueUrl"]
    dead = client.create_queue(QueueName=f"{prefix}beta-dlq")["QueueUrl"]
    client.send_message(QueueUrl=dead, MessageBody=replace(body, agent="beta").encode())
    client.send_message(QueueUrl=dead, MessageBody="<not json>")
    moved = toren(sqs_env, "queue", "dlq", "redrive", "--agent", "beta", "--json")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout) == {"redriven": {"beta": 1}}
    back = client.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    assert [Body.decode(m["Body"]) for m in back] == [
        Body(agent="beta", run_id="run-7", kind="task", payload={"step": 1})]
