"""The parley channel end to end: a real ``toren dev`` process (the offline model, a real
Postgres) serving an agent over the fake Parley platform of ``fake_parley.py``.

Each test waits on what a person would see (``wait_for``), never on a sleep. "Exactly once"
is checked by sending one more message after the reply and waiting for its answer: the
channel sends a chat's messages in order, so a repeated reply would have come before it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_parley import TOKEN, FakeParley

import toren
from toren.plugin import AgentDefinitionError, Settings
from toren.testing import OutputProcess, wait_for, write_agent_dir

TOREN = Path(sys.executable).parent / "toren"
#: The person every agent here allows (``allow_from``); anyone else must pair first.
ADA = "ada"


@pytest.fixture
def parley() -> Iterator[FakeParley]:
    fake = FakeParley().start()
    yield fake
    fake.stop()


def agent_dir(tmp_path: Path, parley_url: str, **yaml_fields: Any) -> Path:
    """Agent ``bot``, served over the parley channel at ``parley_url``; Ada is allowed."""
    settings = {"url": parley_url, "token_env": "PARLEY_TOKEN", "allow_from": [ADA],
                "poll_timeout_s": 1}
    return write_agent_dir(tmp_path / "agents", "bot", channels={"parley": settings},
                           **yaml_fields)


def toren_env(database_url: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of ``toren`` commands: this test's database, only this plugin, short
    leases (a killed process's poller is replaced within seconds)."""
    inherited = {key: value for key, value in os.environ.items()
                 if not key.startswith("TOREN_") and key != "DATABASE_URL"}
    return inherited | {"DATABASE_URL": database_url, "TOREN_LOAD_PLUGINS": "toren-hello",
                        "PARLEY_TOKEN": TOKEN, "TOREN_LEASE_TTL": "2",
                        "TOREN_POLL_INTERVAL": "0.2", "TOREN_HOME": str(home),
                        "NO_COLOR": "1"} | extra


def start_dev(directory: Path, env: dict[str, str], stderr: Path,
              started: list[OutputProcess]) -> OutputProcess:
    """``toren dev`` serving ``directory``, once it printed that it is ready."""
    process = OutputProcess([str(TOREN), "dev", "--dir", str(directory), "--port", "0",
                             "--json"], env=env, stderr_path=stderr)
    started.append(process)
    ready = process.next_json(timeout=60)
    assert ready.get("event") == "ready", ready
    return process


def answered(parley: FakeParley, user: str, count: int, dev: OutputProcess) -> list[str]:
    """The texts ``user`` got, once there are ``count`` (fails with toren's stderr)."""
    assert wait_for(lambda: len(parley.texts(user)) >= count, 30), dev.stderr
    return parley.texts(user)


def test_a_message_gets_the_agents_reply_exactly_once(
        database_url: str, tmp_path: Path, output_processes: list[OutputProcess]) -> None:
    # Parley run as a reader of the walkthrough runs it: its own process, driven over HTTP
    server = OutputProcess([sys.executable, str(Path(__file__).with_name("fake_parley.py")),
                            "0"], env=dict(os.environ), stderr_path=tmp_path / "parley.stderr")
    output_processes.append(server)
    url = server.next_json(timeout=30)["url"]
    people = FakeParley(int(url.rsplit(":", 1)[1]))  # its people's side, over HTTP
    dev = start_dev(agent_dir(tmp_path, url), toren_env(database_url, tmp_path / "home"),
                    tmp_path / "dev.stderr", output_processes)
    people.say(ADA, "hello there")
    assert answered(people, ADA, 1, dev) == ["You said: hello there"]
    people.say(ADA, "and again")
    assert answered(people, ADA, 2, dev) == ["You said: hello there", "You said: and again"]


@pytest.mark.slow
def test_an_unknown_person_gets_a_pairing_code_and_is_answered_once_approved(
        parley: FakeParley, database_url: str, tmp_path: Path,
        output_processes: list[OutputProcess]) -> None:
    env = toren_env(database_url, tmp_path / "home")
    dev = start_dev(agent_dir(tmp_path, parley.url), env, tmp_path / "dev.stderr",
                    output_processes)
    parley.say("bob", "let me in")
    (offer,) = answered(parley, "bob", 1, dev)
    code = offer.split("toren channels pair approve ", 1)[1].split(")", 1)[0]
    approve = subprocess.run([str(TOREN), "channels", "pair", "approve", code], env=env,
                             capture_output=True, text=True, timeout=60)
    assert approve.returncode == 0, approve.stderr
    assert "may now talk to bot" in approve.stdout
    parley.say("bob", "hello?")
    # "let me in" never reached the agent: the first reply is to the message after pairing
    assert answered(parley, "bob", 2, dev) == [offer, "You said: hello?"]


@pytest.mark.slow
def test_a_429_and_a_502_are_retried_and_the_reply_is_sent_once(
        parley: FakeParley, database_url: str, tmp_path: Path,
        output_processes: list[OutputProcess]) -> None:
    parley.fail("/updates", 502)
    parley.fail("/messages", 429, retry_after=1)
    dev = start_dev(agent_dir(tmp_path, parley.url), toren_env(database_url, tmp_path / "home"),
                    tmp_path / "dev.stderr", output_processes)
    parley.say(ADA, "are you there")
    assert answered(parley, ADA, 1, dev) == ["You said: are you there"]
    assert parley.statuses("GET /updates")[0] == 502
    assert parley.statuses("POST /messages") == [429, 200]
    refused, sent = [at for at, call, _status in parley.calls if call == "POST /messages"]
    assert sent - refused >= 1.0  # Retry-After honoured
    parley.say(ADA, "still there?")
    assert answered(parley, ADA, 2, dev) == ["You said: are you there",
                                             "You said: still there?"]
    assert parley.statuses("POST /messages") == [429, 200, 200]


def test_an_approval_is_offered_as_buttons_and_decided_by_a_press(
        parley: FakeParley, database_url: str, tmp_path: Path,
        output_processes: list[OutputProcess]) -> None:
    directory = agent_dir(tmp_path, parley.url, tools=["greet"], approvals={"greet": {}})
    dev = start_dev(directory, toren_env(database_url, tmp_path / "home"),
                    tmp_path / "dev.stderr", output_processes)
    parley.say(ADA, "Ada")  # the offline model calls greet(name="Ada"), which needs approval
    assert wait_for(lambda: parley.messages(ADA), 30), dev.stderr
    (offer,) = parley.messages(ADA)
    assert offer["text"].startswith("The agent wants to run greet with")
    (approve, always, deny), = offer["buttons"]
    assert (approve["text"], always["text"], deny["text"]) == ("Approve", "Approve always", "Deny")
    parley.press(ADA, approve["data"])
    assert answered(parley, ADA, 3, dev)[1:] == [
        "Approved.", "Here is what I found for 'Ada':\n- greet: Hello, Ada!"]
    parley.press(ADA, deny["data"])  # decided already: said so, nothing else happens
    assert "already decided: approved by parley:ada" in answered(parley, ADA, 4, dev)[3]


@pytest.mark.slow
def test_toren_sigkilled_mid_turn_answers_once_after_a_restart(
        parley: FakeParley, database_url: str, tmp_path: Path,
        output_processes: list[OutputProcess]) -> None:
    directory = agent_dir(tmp_path, parley.url)
    # the process kills itself once the model has answered, before the answer is recorded
    env = toren_env(database_url, tmp_path / "home", TOREN_CRASH_AT="after_model_response",
                    TOREN_CRASH_ONCE=str(tmp_path / "crashed-once"))
    first = start_dev(directory, env, tmp_path / "dev-0.stderr", output_processes)
    parley.say(ADA, "survive this")
    try:
        assert first.proc.wait(timeout=60) == -signal.SIGKILL, first.stderr
    except subprocess.TimeoutExpired:
        pytest.fail(f"toren dev did not crash mid-turn: {first.stderr}")
    assert parley.texts(ADA) == []  # the model answered; nothing was sent
    second = start_dev(directory, env, tmp_path / "dev-1.stderr", output_processes)
    assert answered(parley, ADA, 1, second) == ["You said: survive this"]
    parley.say(ADA, "and now?")
    assert answered(parley, ADA, 2, second) == ["You said: survive this", "You said: and now?"]


def test_a_wrong_token_stops_toren_dev_naming_the_agent(
        parley: FakeParley, database_url: str, tmp_path: Path) -> None:
    env = toren_env(database_url, tmp_path / "home", PARLEY_TOKEN="not-the-token")
    dev = subprocess.run([str(TOREN), "dev", "--dir", str(agent_dir(tmp_path, parley.url)),
                          "--port", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert dev.returncode != 0
    assert "the parley channel of agent bot cannot start" in dev.stderr
    assert "401" in dev.stderr and "not-the-token" not in dev.stderr


def test_settings_are_checked_when_the_agent_loads(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "bot", channels={"parley": {
        "url": "parley.example", "token_env": "PARLEY_TOKEN"}})
    with pytest.raises(AgentDefinitionError) as caught:
        toren.Runtime([directory], settings=Settings(home=tmp_path,
                                                     load_plugins=("toren-hello",)))
    assert "channels.parley.url" in caught.value.message
    assert "'parley.example' does not match '^https?://'" in caught.value.message
