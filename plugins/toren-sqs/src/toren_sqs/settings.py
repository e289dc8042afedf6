"""The SQS driver's settings, read from the environment once, when the queue is made."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from toren.plugin import ConfigError

#: SQS queue names: letters, digits, hyphens and underscores, at most 80 characters.
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
#: SQS's longest long poll and largest DelaySeconds.
MAX_WAIT_S = 20
MAX_DELAY_S = 900


@dataclass(frozen=True)
class SqsSettings:
    """Where the queues are and how they are polled.

    Args:
        prefix: queue names are ``<prefix><agent>`` and ``<prefix><agent>-dlq``
            (``TOREN_SQS_PREFIX``, default ``toren-``).
        endpoint_url: an SQS-compatible endpoint instead of AWS's (``TOREN_SQS_ENDPOINT_URL``;
            moto or LocalStack in tests), else boto3's usual resolution.
        region: ``AWS_REGION`` or ``AWS_DEFAULT_REGION`` (default ``us-east-1``).
        wait_s: long-poll seconds of an idle worker's receive (``TOREN_SQS_WAIT_SECONDS``,
            1-20, default 20).
        create_queues: create missing queues (and their dead-letter queues) at startup
            (``TOREN_SQS_CREATE_QUEUES``, default on; turn off where Terraform owns them and
            the role may not create queues).
    """

    prefix: str = "toren-"
    endpoint_url: str | None = None
    region: str = "us-east-1"
    wait_s: int = MAX_WAIT_S
    create_queues: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SqsSettings:
        env = os.environ if env is None else env
        prefix = env.get("TOREN_SQS_PREFIX", "toren-")
        if not re.fullmatch(r"[A-Za-z0-9_-]{0,60}", prefix):
            raise ConfigError(f"TOREN_SQS_PREFIX={prefix!r} is not a valid SQS queue name "
                              "prefix: use at most 60 letters, digits, '-' or '_'")
        raw_wait = env.get("TOREN_SQS_WAIT_SECONDS", str(MAX_WAIT_S))
        try:
            wait_s = int(raw_wait)
        except ValueError:
            wait_s = -1
        if not 1 <= wait_s <= MAX_WAIT_S:
            raise ConfigError(f"TOREN_SQS_WAIT_SECONDS={raw_wait!r}: expected a whole number "
                              f"of seconds from 1 to {MAX_WAIT_S} (SQS's longest long poll)")
        create = env.get("TOREN_SQS_CREATE_QUEUES", "1").strip().lower()
        if create not in ("0", "1", "true", "false", "yes", "no"):
            raise ConfigError(f"TOREN_SQS_CREATE_QUEUES={create!r}: expected 1 or 0")
        return cls(prefix=prefix, endpoint_url=env.get("TOREN_SQS_ENDPOINT_URL") or None,
                   region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
                   wait_s=wait_s, create_queues=create in ("1", "true", "yes"))

    def queue_name(self, agent: str, *, dead_letters: bool = False) -> str:
        name = f"{self.prefix}{agent}{'-dlq' if dead_letters else ''}"
        if not _QUEUE_NAME.match(name):
            raise ConfigError(f"agent {agent!r} gives the SQS queue name {name!r}, which SQS "
                              "refuses (letters, digits, '-' and '_', at most 80 characters): "
                              "shorten TOREN_SQS_PREFIX or the agent's name")
        return name
