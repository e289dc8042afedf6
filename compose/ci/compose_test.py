"""The Compose rung, really run (compose/test.sh builds the images, then runs this).

Brings compose/docker-compose.yml up on real containers and checks what a user relies on:
1. the stack comes up from nothing: Postgres healthy, migrations applied, the first API key
   printed by the setup service, `/healthz` answering;
2. an agent's run over the HTTP API survives a SIGKILL of the Toren container mid-run and
   finishes with no model call paid twice (the call log of the offline model counts payments);
3. SIGTERM drains: `docker compose stop` ends the container cleanly within the grace period;
4. a Postgres restart is survived by the running Toren process (it reconnects; the container
   is not restarted): `/healthz` answers again and a new run completes;
5. everything is torn down, volumes included, also on failure.

Prints one JSON line of figures at the end. Environment: TOREN_IMAGE and POSTGRES_IMAGE (the
images to use, already built), COMPOSE (the compose command, default `docker compose`).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
COMPOSE_DIR = HERE.parent
FINISHED = {"completed", "failed", "stopped", "cancelled"}


def log(message: str) -> None:
    print(f"compose-test: {message}", file=sys.stderr, flush=True)


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class Stack:
    """One compose project, named uniquely, with its own env file and call log directory."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.project = f"toren-ci-{os.getpid()}"
        self.port = free_port()
        self.calls_dir = workdir / "calls"
        self.calls_dir.mkdir()
        self.calls_dir.chmod(0o777)  # the container runs as uid 10001
        self.env_file = workdir / "ci.env"
        self.env_file.write_text(f"POSTGRES_PASSWORD={secrets.token_hex(16)}\n"
                                 f"TOREN_PUBLISH=127.0.0.1:{self.port}\n"
                                 # the toren container serves the short lane only: long-crew
                                 # waits for the worker-long container (the long profile)
                                 "TOREN_LANE=short\n")
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = ""
        self.command = shlex.split(os.environ.get("COMPOSE", "docker compose"))

    def compose(self, *args: str, check: bool = True, capture: bool = False,
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = os.environ | {"TOREN_ENV_FILE": str(self.env_file),
                            "CI_CALLS_DIR": str(self.calls_dir)}
        argv = [*self.command, "-p", self.project, "--env-file", str(self.env_file),
                "-f", str(COMPOSE_DIR / "docker-compose.yml"),
                "-f", str(HERE / "compose.ci.yml"), *args]
        result = subprocess.run(argv, cwd=COMPOSE_DIR, env=env, text=True, timeout=timeout,
                                stdout=subprocess.PIPE if capture else sys.stderr,
                                stderr=subprocess.PIPE if capture else sys.stderr)
        if check and result.returncode != 0:
            raise AssertionError(f"{shlex.join(argv)} failed ({result.returncode}): "
                                 f"{result.stderr if capture else ''}")
        return result

    def container(self, service: str) -> str:
        return self.compose("ps", "-a", "-q", service, capture=True).stdout.strip()

    def http(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {self.key}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def healthy(self) -> bool:
        with urllib.request.urlopen(self.url + "/healthz", timeout=5) as response:
            return response.status == 200 and json.loads(response.read())["status"] == "ok"

    def run_status(self, run_id: str) -> str:
        return str(self.http("GET", f"/runs/{run_id}")["status"])

    def events(self, run_id: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        after = ""
        while True:
            page = self.http("GET", f"/runs/{run_id}/events" + (f"?after={after}" if after
                                                                  else ""))
            if not page["events"]:
                return events
            events.extend(page["events"])
            after = page["cursor"]

    def paid_calls(self) -> int:
        calls = self.calls_dir / "calls.jsonl"
        return len(calls.read_text().splitlines()) if calls.exists() else 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def container_state(container: str) -> dict[str, Any]:
    result = subprocess.run(["docker", "inspect", "--format", "{{json .State}}", container],
                            check=True, text=True, stdout=subprocess.PIPE)
    state: dict[str, Any] = json.loads(result.stdout)
    return state


def first_key(stack: Stack) -> str:
    """The API key the setup service printed on its first run (docs/deploy/compose.md)."""
    logs = stack.compose("logs", "--no-log-prefix", "setup", capture=True).stdout
    keys = [line.strip() for line in logs.splitlines() if line.strip().startswith("toren_")]
    assert len(keys) == 1, f"the setup service printed no key (or several): {logs!r}"
    return keys[0]


def check(stack: Stack) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    started = time.monotonic()
    stack.compose("up", "-d", timeout=600)
    wait_for("/healthz", stack.healthy, 180)
    figures["up_s"] = round(time.monotonic() - started, 1)
    setup = stack.compose("ps", "-a", "--format", "json", "setup", capture=True).stdout
    assert '"ExitCode":0' in setup.replace(" ", ""), setup
    stack.key = first_key(stack)
    agents = {agent["name"] for agent in stack.http("GET", "/agents")["agents"]}
    assert {"research-crew", "planner-crew", "slow-crew", "long-crew"} <= agents, agents
    log(f"up in {figures['up_s']} s; agents: {sorted(agents)}")

    # -- SIGKILL mid-run, while a tool runs: the run finishes, no model call is paid twice ------
    run_id = stack.http("POST", "/runs", {"agent": "slow-crew", "input": "compose"})["id"]
    wait_for("the first tool call to start", lambda: stack.events(run_id)[-1]["type"]
             == "ToolCallStarted", 60, every=0.2)
    toren = stack.container("toren")
    subprocess.run(["docker", "kill", "--signal", "KILL", toren], check=True,
                   stdout=subprocess.DEVNULL)
    killed_at = time.monotonic()
    log("SIGKILLed the toren container during a tool call")
    stack.compose("up", "-d", "toren")
    wait_for("/healthz after the kill", stack.healthy, 120)
    wait_for("the run to finish", lambda: stack.run_status(run_id) in FINISHED, 120)
    figures["recovered_s"] = round(time.monotonic() - killed_at, 1)
    run = stack.http("GET", f"/runs/{run_id}")
    assert run["status"] == "completed", run
    completed = [e for e in stack.events(run_id) if e["type"] == "ModelCallCompleted"]
    repeated = [e for e in completed if e["data"].get("repeated")]
    figures |= {"model_calls": len(completed), "model_calls_paid": stack.paid_calls(),
                "repeated": len(repeated)}
    assert len(completed) == 3 and not repeated, figures
    assert stack.paid_calls() == len(completed), figures  # nothing paid twice
    log(f"the run finished after the kill: {figures}")

    # -- SIGTERM drains within the grace period, exit code 0 -------------------------------------
    second = stack.http("POST", "/runs", {"agent": "research-crew", "input": "postgres"})["id"]
    stopping = time.monotonic()
    stack.compose("stop", "toren")
    figures["sigterm_stop_s"] = round(time.monotonic() - stopping, 1)
    state = container_state(toren)
    assert state["ExitCode"] == 0 and not state["OOMKilled"], state
    assert figures["sigterm_stop_s"] < 20, figures  # stop_grace_period: never SIGKILLed
    stack.compose("start", "toren")
    wait_for("/healthz after the stop", stack.healthy, 120)
    wait_for("the run started before the stop", lambda: stack.run_status(second) == "completed",
             120)

    # -- a Postgres restart is survived by the running process (not by restarting it) -----------
    toren = stack.container("toren")
    before = container_state(toren)
    subprocess.run(["docker", "restart", stack.container("postgres")], check=True,
                   stdout=subprocess.DEVNULL)
    wait_for("/healthz after the Postgres restart", stack.healthy, 120)
    after = container_state(toren)
    assert (after["StartedAt"], after["Running"]) == (before["StartedAt"], True), (before, after)
    third = wait_for("a new run to be accepted", lambda: stack.http(
        "POST", "/runs", {"agent": "research-crew", "input": "event sourcing"})["id"], 60)
    wait_for("a new run after the Postgres restart",
             lambda: stack.run_status(third) == "completed", 120)

    # -- the long lane: a runtime: long agent's run waits, visibly, for worker-long -------------
    lanes_started = time.monotonic()
    long_run = stack.http("POST", "/runs", {"agent": "long-crew", "input": "the archive"})["id"]
    waiting = wait_for("the long run to show as unserved in /fleet", lambda: [
        entry for entry in stack.http("GET", "/fleet")["unserved"]
        if entry["agent"] == "long-crew"], 30)
    assert waiting[0]["lane"] == "long", waiting
    assert stack.run_status(long_run) == "queued"  # the short-lane toren container left it
    stack.compose("--profile", "long", "up", "-d", "worker-long")
    wait_for("the long run to finish on worker-long",
             lambda: stack.run_status(long_run) == "completed", 120)
    # each container is one supervisor of TOREN_PROCESSES=auto worker processes (the image's
    # setting): one supervisor per lane, however many cores the host has
    workers = stack.http("GET", "/fleet")["workers"]
    supervisors: dict[str, set[str]] = {}
    for worker in workers:
        supervisors.setdefault(worker["lane"], set()).add(worker["supervisor"] or worker["id"])
    assert sorted(supervisors) == ["long", "short"], workers
    assert all(len(each) == 1 for each in supervisors.values()), workers
    figures["worker_processes"] = len(workers)
    figures["long_lane_s"] = round(time.monotonic() - lanes_started, 1)
    log(f"the long run waited for worker-long, then completed on it "
        f"({figures['long_lane_s']} s)")
    figures["total_s"] = round(time.monotonic() - started, 1)
    return figures


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="toren-compose-") as tmp:
        stack = Stack(Path(tmp))
        ok = False
        try:
            figures = check(stack)
            ok = True
            print(json.dumps({"compose": "ok"} | figures))
        finally:
            # with the long profile, so worker-long (started by the lanes check) goes too
            if not ok:
                stack.compose("--profile", "long", "ps", "-a", check=False)
                stack.compose("--profile", "long", "logs", "--tail", "80", check=False)
            stack.compose("--profile", "long", "down", "-v", "--remove-orphans", "--timeout", "5",
                          check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
