"""The s3 archive backend with real boto3 against moto in server mode (toren-sqs's
``moto_endpoint`` fixture): objects written whole under the prefix, read back, and errors that
say what is wrong."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import boto3
import pytest
from toren_s3 import S3Archive

from toren.config import Settings
from toren.errors import ArchiveMismatch, ArchiveUnavailable, ConfigError
from toren.seams.drivers import driver_class


@pytest.fixture
def bucket(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in {"TOREN_S3_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    name = f"toren-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
        Bucket=name)
    return name


@pytest.fixture
async def archive(bucket: str) -> AsyncIterator[S3Archive]:
    backend = S3Archive(f"s3://{bucket}/runs/archive", Settings())
    yield backend
    await backend.close()


def test_the_s3_scheme_loads_this_backend() -> None:
    assert driver_class("archive", "s3") is S3Archive


async def test_put_and_get_under_the_prefix(archive: S3Archive, bucket: str,
                                            moto_endpoint: str) -> None:
    data = bytes(range(256)) * 1000
    location = await archive.put("crew/2026/03/run.jsonl.gz", data)
    assert location == f"s3://{bucket}/runs/archive/crew/2026/03/run.jsonl.gz"
    assert await archive.get(location, max_bytes=len(data)) == data
    head = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").head_object(
        Bucket=bucket, Key="runs/archive/crew/2026/03/run.jsonl.gz")
    assert head["ContentLength"] == len(data)


async def test_missing_objects_and_buckets_are_typed_errors(archive: S3Archive,
                                                            bucket: str) -> None:
    with pytest.raises(ArchiveUnavailable, match="NoSuchKey"):
        await archive.get(f"s3://{bucket}/runs/archive/gone.jsonl.gz", max_bytes=10)
    with pytest.raises(ArchiveUnavailable, match="not an S3 location"):
        await archive.get("file:///etc/passwd", max_bytes=10)
    missing = S3Archive(f"s3://{bucket}-missing", Settings())
    try:
        with pytest.raises(ArchiveUnavailable, match="NoSuchBucket"):
            await missing.put("k", b"x")
    finally:
        await missing.close()


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "s3://bucket/p?x=1"])
def test_malformed_urls_say_what_one_looks_like(url: str) -> None:
    with pytest.raises(ConfigError, match="s3://bucket/prefix"):
        S3Archive(url, Settings())


async def test_an_object_longer_than_the_cap_is_refused_unread(archive: S3Archive) -> None:
    """The cap is the length the archive index recorded: a replaced, longer object (a gzip
    bomb's 3 MB, say) is refused by its ContentLength, and the read never goes past the cap."""
    data = b"x" * 5000
    location = await archive.put("crew/2026/03/long.jsonl.gz", data)
    assert await archive.get(location, max_bytes=5000) == data
    for cap in (4999, 1, 0):
        with pytest.raises(ArchiveMismatch, match=f"holds more than {cap} bytes"):
            await archive.get(location, max_bytes=cap)
