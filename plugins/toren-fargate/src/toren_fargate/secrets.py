"""The ``aws-sm`` secret source: AWS Secrets Manager, for ``TOREN_SECRETS`` and
``VAR=aws-sm:<arn or name>[#key]`` (see ``toren.seams.secrets``)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

import boto3
import botocore.config
import botocore.exceptions

from toren.plugin import ConfigError
from toren.plugin.drivers import SecretSource

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"


class SecretsManagerSource(SecretSource):
    """Reads secrets with ``GetSecretValue`` (the role needs ``secretsmanager:GetSecretValue``
    on them, and ``kms:Decrypt`` on a customer-managed key). ``AWS_REGION``; an endpoint of
    its own with ``TOREN_SECRETSMANAGER_ENDPOINT_URL`` (moto in tests, a VPC endpoint). A
    secret given by ARN is read in the ARN's region."""

    def __init__(self) -> None:
        self.region = (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                       or "us-east-1")
        self.endpoint_url = os.environ.get("TOREN_SECRETSMANAGER_ENDPOINT_URL") or None
        self._clients: dict[str, object] = {}

    def _client(self, region: str) -> object:
        if region not in self._clients:
            self._clients[region] = boto3.client(
                "secretsmanager", region_name=region, endpoint_url=self.endpoint_url,
                config=botocore.config.Config(retries={"mode": "standard", "max_attempts": 4},
                                              connect_timeout=5, read_timeout=10))
        return self._clients[region]

    def fetch(self, secret_ids: list[str]) -> dict[str, str]:
        with _quiet_http_logs():
            return self._fetch(secret_ids)

    def _fetch(self, secret_ids: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for secret_id in secret_ids:
            parts = secret_id.split(":")
            region = parts[3] if secret_id.startswith("arn:") and len(parts) > 3 else self.region
            try:
                answer = self._client(region).get_secret_value(  # type: ignore[attr-defined]
                    SecretId=secret_id)
            except botocore.exceptions.ClientError as exc:
                error = exc.response.get("Error", {})
                raise ConfigError(f"Secrets Manager could not read {secret_id}: "
                                  f"{error.get('Code')}: {error.get('Message')} (the role needs "
                                  "secretsmanager:GetSecretValue on it)") from None
            except botocore.exceptions.BotoCoreError as exc:
                raise ConfigError(f"Secrets Manager is unreachable reading {secret_id}: "
                                  f"{exc}") from None
            if "SecretString" not in answer:
                raise ConfigError(f"the secret {secret_id} is binary; Toren reads text "
                                  "secrets (SecretString) only")
            found[secret_id] = str(answer["SecretString"])
        return found


@contextlib.contextmanager
def _quiet_http_logs() -> Iterator[None]:
    """botocore logs response bodies at DEBUG (TOREN_LOG_LEVEL=DEBUG): a secret's value
    would be in them. Hold its loggers (and urllib3's) at WARNING while secrets are read."""
    loggers = [logging.getLogger(name) for name in ("botocore", "boto3", "urllib3")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logging.WARNING, logger.getEffectiveLevel()))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
