"""Retention into S3 (real boto3, moto in server mode): archive finished runs, read every event
back identical from the bucket, and list them."""

from __future__ import annotations

import uuid
from pathlib import Path

import boto3
import psycopg
import pytest

from toren.testing import write_agent_dir


async def test_runs_archived_to_s3_read_back_identical(
        make_runtime, tmp_path: Path, database_url: str, moto_endpoint: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"TOREN_S3_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    bucket = f"toren-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "crew", retention="7d")],
                                 archive_url=f"s3://{bucket}/toren")
    ids = [await runtime.start_run("crew", f"topic {n}") for n in range(3)]
    for run_id in ids:
        await runtime.wait_for_run(run_id, timeout_s=60)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE agent_crew.runs SET finished_at = now() - interval '8 days'")
    before = {run_id: (await runtime.events(run_id), await runtime.receipt(run_id))
              for run_id in ids}

    report = await runtime.archive_runs()
    assert report["agents"]["crew"]["archived"] == 3
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert len(keys) == 3 and all(k.startswith("toren/crew/") for k in keys)
    for run_id, (events, receipt) in before.items():
        record = await runtime.get_run(run_id)
        assert record.extra["archive"]["location"].startswith(f"s3://{bucket}/toren/crew/")
        assert await runtime.events(run_id) == events
        assert await runtime.receipt(run_id) == receipt
    assert {r.id for r in await runtime.list_archived_runs(agent="crew")} == set(ids)
