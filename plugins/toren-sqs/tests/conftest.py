"""A real SQS API for the tests: moto in server mode, on a free local port, with real boto3."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from toren_sqs.testing import moto_sqs_server, sqs_test_env


@pytest.fixture(scope="session")
def sqs_endpoint() -> Iterator[str]:
    with moto_sqs_server() as endpoint:
        yield endpoint


@pytest.fixture
def sqs_env(sqs_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Settings pointing the driver at moto, with a queue prefix of this test's own."""
    env = sqs_test_env(sqs_endpoint)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return env
