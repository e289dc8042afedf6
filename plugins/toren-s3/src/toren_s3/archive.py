"""The ``s3`` archive backend: one object per archived run under ``s3://bucket/prefix``, written
and read with boto3 in a thread pool of its own (boto3 blocks; the event loop must not)."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlsplit

import boto3
import botocore.config
import botocore.exceptions

from toren.plugin import ArchiveMismatch, ArchiveUnavailable, ConfigError, Settings
from toren.plugin.drivers import ArchiveBackend

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"

T = TypeVar("T")

#: Threads (and HTTP connections) for S3 calls: an archive pass reads and writes one at a time,
#: concurrent reads of archived runs (the HTTP API) take more.
POOL_SIZE = 8
#: Bytes read from a response body per call.
READ_CHUNK = 1 << 20


class S3Archive(ArchiveBackend):
    """Archived runs as S3 objects ``<prefix>/<agent>/<YYYY>/<MM>/<run>.jsonl.gz``.

    Credentials and region come from boto3's usual chain (``AWS_*``, the task role);
    ``TOREN_S3_ENDPOINT_URL`` points it at an S3-compatible server (moto, MinIO). The bucket
    must exist: Toren never creates buckets (their policy and lifecycle rules are the
    operator's).
    """

    def __init__(self, url: str, settings: Settings) -> None:
        super().__init__(url, settings)
        parts = urlsplit(url)
        if not parts.netloc or parts.query or parts.fragment:
            raise ConfigError(f"TOREN_ARCHIVE={url!r}: an S3 archive is s3://bucket or "
                              "s3://bucket/prefix")
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        self._executor = ThreadPoolExecutor(POOL_SIZE, thread_name_prefix="toren-s3")
        self._client = boto3.client(
            "s3", endpoint_url=os.environ.get("TOREN_S3_ENDPOINT_URL") or None,
            region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            or "us-east-1",
            config=botocore.config.Config(retries={"mode": "standard", "max_attempts": 4},
                                          connect_timeout=5, read_timeout=60,
                                          max_pool_connections=POOL_SIZE))

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    async def _call(self, what: str, method: Callable[..., T], /, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(method, **kwargs))
        except botocore.exceptions.ClientError as exc:
            error = exc.response.get("Error", {})
            raise ArchiveUnavailable(f"S3 {exc.operation_name} of {what} failed: "
                                     f"{error.get('Code')}: {error.get('Message')}") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise ArchiveUnavailable(f"S3 is unreachable ({what}): {exc}") from exc

    async def put(self, key: str, data: bytes) -> str:
        full = self._key(key)
        where = f"s3://{self.bucket}/{full}"
        # PutObject is atomic: a reader sees the whole object or none
        await self._call(where, self._client.put_object, Bucket=self.bucket, Key=full,
                         Body=data, ContentType="application/x-ndjson",
                         ContentEncoding="gzip")
        return where

    async def get(self, location: str, *, max_bytes: int) -> bytes:
        parts = urlsplit(location)
        if parts.scheme != "s3" or not parts.netloc:
            raise ArchiveUnavailable(f"{location!r} is not an S3 location (TOREN_ARCHIVE is "
                                     f"{self.url})")
        found = await self._call(location, self._client.get_object, Bucket=parts.netloc,
                                 Key=parts.path.lstrip("/"))
        body = found["Body"]
        try:
            if int(found.get("ContentLength") or 0) > max_bytes:
                raise _too_large(location, max_bytes)
            # the object's length is the server's word: the read stops one byte past the cap
            # whatever it said
            data = await asyncio.get_running_loop().run_in_executor(
                self._executor, _read_capped, body, max_bytes)
        except botocore.exceptions.BotoCoreError as exc:
            raise ArchiveUnavailable(f"S3 GetObject of {location} failed while reading: "
                                     f"{exc}") from exc
        finally:
            body.close()
        if len(data) > max_bytes:
            raise _too_large(location, max_bytes)
        return data

    async def close(self) -> None:
        self._client.close()
        self._executor.shutdown(wait=False)


def _read_capped(body: Any, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of a response body, a chunk at a time."""
    data = bytearray()
    while len(data) <= max_bytes:
        chunk = body.read(min(READ_CHUNK, max_bytes + 1 - len(data)))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _too_large(location: str, max_bytes: int) -> ArchiveMismatch:
    return ArchiveMismatch(f"the archived run's object {location} holds more than {max_bytes} "
                           "bytes, more than was archived (or than TOREN_ARCHIVE_MAX_MB allows "
                           "for a run archived without a digest); nothing was read from it")
