"""The s3 archive backend runs the archive contract (``toren.testing.contracts``) with real
boto3 against moto in server mode, under a bucket of its own per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import boto3
import pytest
import pytest_asyncio
from toren_s3 import S3Archive

from toren.config import Settings
from toren.testing.contracts import ArchiveContract


class TestS3Archive(ArchiveContract):
    @pytest_asyncio.fixture
    async def backend(self, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
                      ) -> AsyncIterator[S3Archive]:
        for name, value in {"TOREN_S3_ENDPOINT_URL": moto_endpoint,
                            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                            "AWS_REGION": "us-east-1"}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        bucket = f"toren-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket)
        archive = S3Archive(f"s3://{bucket}/runs/archive", Settings())
        yield archive
        await archive.close()
