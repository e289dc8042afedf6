"""Test helpers: a real SQS API on this machine (moto in server mode), for toren-sqs's tests
and Toren's own (``moto[server]`` must be installed; requirements/test.txt installs it).

Also a pytest plugin (entry point ``pytest11``), giving three fixtures:

- ``moto_endpoint``: a moto server for the test session (every AWS API moto has: SQS, S3,
  ...); its endpoint URL. toren-s3's tests use it too;
- ``sqs_endpoint``: the same server, for SQS tests;
- ``sqs_env``: the environment pointing the driver at it, set for one test, with a queue
  prefix of the test's own.
"""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Start moto's server on a free local port; yield its endpoint URL; stop it after. One
    server speaks every AWS API moto implements (SQS, S3, ...), each at the same URL."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


#: The name this helper had when SQS was its only user.
moto_sqs_server = moto_server


def sqs_test_env(endpoint: str) -> dict[str, str]:
    """Settings pointing the driver at ``endpoint`` with a queue prefix of its own (so tests
    sharing one server never share a queue), and fake credentials moto accepts."""
    return {"TOREN_SQS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
            "TOREN_SQS_PREFIX": f"t{uuid.uuid4().hex[:10]}-", "TOREN_SQS_WAIT_SECONDS": "1"}


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto server for the whole test session (any AWS API moto has)."""
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def sqs_endpoint(moto_endpoint: str) -> str:
    """The session's moto server, for SQS."""
    return moto_endpoint


@pytest.fixture
def sqs_env(sqs_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The driver's settings pointing at moto, with a queue prefix of this test's own."""
    env = sqs_test_env(sqs_endpoint)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return env
