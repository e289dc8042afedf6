"""``toren.logs``: the JSON and plain formats, the context ids, secrets masked."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from toren.errors import ConfigError
from toren.logs import MASK, log_format, make_handler, redact, secret_values
from toren.seams.log_context import log_context

KEY = "sk-ant-api03-abcdefghijklmnop"
TOREN_KEY = "toren_0123abcd_" + "Zq9" * 15


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, dict[str, io.StringIO]]]:
    env = {"ANTHROPIC_API_KEY": KEY, "DATABASE_URL": "postgresql://toren:pa55word-long@db/t",
           "TOREN_HOME": "/home/someone/.toren", "SHORT_TOKEN": "abc"}
    streams = {name: io.StringIO() for name in ("json", "plain", "rich")}
    logger = logging.getLogger("test.observability.logs")
    logger.setLevel(logging.DEBUG)
    handlers = [make_handler(name, stream=streams[name], env=env) for name in ("json", "plain")]
    from rich.console import Console

    rich_console = Console(file=streams["rich"], width=300, no_color=True)
    handlers.append(make_handler("rich", rich_console=rich_console, env=env))
    for handler in handlers:
        logger.addHandler(handler)
    yield logger, streams
    for handler in handlers:
        logger.removeHandler(handler)


def test_json_lines_carry_the_ids_of_the_work_in_hand(capture) -> None:
    logger, streams = capture
    logger.info("outside")
    with log_context(worker_id="w-1", agent="calc", run_id="r-1"), \
            log_context(task_id="main"):
        logger.warning("inside %s", "a task")
    with log_context(run_id="r-2", task_id=None):
        logger.error("another run")
    lines = [json.loads(line) for line in streams["json"].getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["outside", "inside a task", "another run"]
    assert "run_id" not in lines[0]
    assert lines[1] | {"time": None} == {"time": None, "level": "warning",
                                          "logger": "test.observability.logs",
                                          "message": "inside a task", "worker_id": "w-1",
                                          "agent": "calc", "run_id": "r-1", "task_id": "main"}
    assert lines[2]["run_id"] == "r-2" and "task_id" not in lines[2]
    plain = streams["plain"].getvalue().splitlines()
    assert plain[1].endswith("WARNING test.observability.logs [worker=w-1 agent=calc run=r-1 "
                             "task=main] inside a task")
    assert "[worker=w-1 agent=calc run=r-1 task=main]" in streams["rich"].getvalue()


def test_threads_started_with_the_context_keep_its_ids(capture) -> None:
    import contextvars

    logger, streams = capture
    with log_context(run_id="r-9"):
        context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(logger.warning, "from a tool thread"))
    thread.start()
    thread.join()
    line = json.loads(streams["json"].getvalue().splitlines()[-1])
    assert line["run_id"] == "r-9"


def test_secrets_are_masked_in_messages_arguments_and_tracebacks(capture) -> None:
    logger, streams = capture
    logger.warning("calling with %s", KEY)
    logger.warning(f"the database is postgresql://toren:pa55word-long@db/t and {TOREN_KEY}")
    try:
        raise RuntimeError(f"provider said: bad key {KEY}")
    except RuntimeError:
        logger.exception("call failed")
    logger.warning("a short token abc stays (too short to mask words safely)")
    for name, stream in streams.items():
        text = stream.getvalue()
        assert KEY not in text, name
        assert "pa55word-long" not in text, name
        assert TOREN_KEY not in text and "toren_0123abcd_" + MASK in text, name
        assert "bad key " + MASK in text, name
        assert "abc stays" in text
    lines = [json.loads(line) for line in streams["json"].getvalue().splitlines()]
    assert "RuntimeError: provider said: bad key ***" in lines[2]["exception"]


def test_secret_values_are_read_from_secret_names_and_url_passwords() -> None:
    found = secret_values({"OPENAI_API_KEY": "sk-proj-12345678",
                           "TELEGRAM_BOT_TOKEN": "123:abcdefgh",
                           "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
                           "DATABASE_URL": "postgres://u:longpassword@h/d",
                           "PATH": "/usr/bin:/bin",
                           "PG_CONN": "host=db user=u password=conninfo-secret dbname=d",
                           "TOREN_AUTH_MODE": "on",
                           "BROKEN_URL": "http://[::1"})
    assert set(found) == {"sk-proj-12345678", "123:abcdefgh", "wJalrXUtnFEMI/K7MDENG",
                          "longpassword", "conninfo-secret"}
    assert redact("x sk-proj-12345678 y", found) == "x *** y"


def test_the_format_setting_is_checked() -> None:
    assert log_format({}) == "rich"
    assert log_format({"TOREN_LOG_FORMAT": " JSON "}) == "json"
    with pytest.raises(ConfigError, match="TOREN_LOG_FORMAT='xml' is not one of rich, plain"):
        log_format({"TOREN_LOG_FORMAT": "xml"})
