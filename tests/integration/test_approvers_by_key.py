"""Approvers name keys by id/prefix or role, never by name: over HTTP, a key with the same name
as the approver's cannot decide, the named key and a key of the named role can, and the record
shows the key's name and id."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.integration.test_approvals import both_at_once, desk, wait_status
from toren.server.app import create_app
from toren.testing import ScriptedModel, serve_on_free_port


async def test_only_the_named_key_or_role_decides_and_a_namesake_cannot(
        make_runtime, tmp_path: Path) -> None:
    keys = await make_runtime(agents=[], workers=False)
    lead, lead_token = await keys.keys.create("finance-lead", role="approver")
    await keys.keys.revoke(lead.id)  # its name is free again: an impostor takes it
    impostor, impostor_token = await keys.keys.create("finance-lead", role="operator")
    lead, lead_token = await keys.keys.create("finance-lead-2", role="approver")
    _, admin_token = await keys.keys.create("root", role="admin")
    directory = desk(tmp_path, approvals={"refund": {"approvers": [f"key:{lead.prefix}",
                                                                    "role:admin"]}})
    runtime = await make_runtime(dirs=[directory],
                                 models={"desk": ScriptedModel(script=both_at_once)})
    runs = [await runtime.start_run("desk", f"refund {n}") for n in range(2)]
    for run_id in runs:
        await wait_status(runtime, run_id, "awaiting_approval")
    approvals = {a.run_id: a for a in await runtime.list_approvals(status="pending")}
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))

    async def approve(run_id: str, token: str) -> tuple[int, dict]:
        approval = approvals[run_id]
        async with http.post(f"{url}/approvals/{approval.id}/approve",
                             json={"digest": approval.digest},
                             headers={"Authorization": f"Bearer {token}"}) as answer:
            return answer.status, await answer.json()

    try:
        async with aiohttp.ClientSession() as http:
            status, body = await approve(runs[0], impostor_token)
            assert (status, body["error"]["code"]) == (403, "not_an_approver")
            assert f"finance-lead (key {impostor.id}) may not decide" in body["error"]["message"]
            status, body = await approve(runs[0], lead_token)
            assert status == 200 and body["decided_by"] == f"finance-lead-2 (key {lead.id})"
            status, body = await approve(runs[1], admin_token)  # by role
            assert status == 200 and body["decided_by"].startswith("root (key ")
    finally:
        await runner.cleanup()
    for run_id in runs:
        await wait_status(runtime, run_id, "completed")
