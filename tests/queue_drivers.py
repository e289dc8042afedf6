"""The queue drivers the queue contract tests run on: ``postgres`` (the outbox is the queue)
and ``sqs`` (toren-sqs, real boto3 against moto in server mode, fed by the outbox relay).

tests/conftest.py registers the fixtures for every test under tests/: a test that asks for
``queue_driver`` runs once per driver; it passes ``queue_driver=queue_driver`` to
``make_runtime``, or ``queue_env`` (which implies ``queue_driver``) to a subprocess.
"""

from __future__ import annotations

import pytest

QUEUE_DRIVERS = ["postgres", "sqs"]


@pytest.fixture(params=QUEUE_DRIVERS)
def queue_driver(request: pytest.FixtureRequest) -> str:
    """Each queue driver in turn; for ``sqs``, the environment points it at moto with a queue
    prefix of this test's own (toren-sqs's ``sqs_env``)."""
    if request.param == "sqs":
        request.getfixturevalue("sqs_env")
    return str(request.param)


@pytest.fixture
def queue_env(queue_driver: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """What a ``toren`` subprocess needs to use ``queue_driver`` (``toren_env`` drops every
    ``TOREN_*`` variable of this process, so the SQS settings are passed explicitly)."""
    if queue_driver == "sqs":
        return {"TOREN_QUEUE": "sqs"} | request.getfixturevalue("sqs_env")
    return {"TOREN_QUEUE": "postgres"}
