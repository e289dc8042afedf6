"""Chat buttons in the audit trail (real Postgres): a press that decides an approval is recorded
once as the person on the channel (``<channel>:<user>``), source ``chat``; a press refused
(not an approver) is recorded with its error's code."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_approvals_complete import desk, parked, refunder
from toren.core.audit import AuditQuery
from toren.errors import NotAnApprover
from toren.testing import ScriptedModel


async def test_a_button_press_is_recorded_as_the_person_on_the_channel(
        make_runtime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    directory = desk(tmp_path, approvers=["telegram:42"])
    runtime = await make_runtime(dirs=[directory],
                                 models={"desk": ScriptedModel(script=refunder)})
    run_id = await runtime.start_run("desk", "refund 40")
    approval = await parked(runtime, run_id)
    with pytest.raises(NotAnApprover):
        await runtime.channel_context.decide_approval(approval.id, "approved",
                                                      decided_by="telegram:7",
                                                      digest=approval.digest)
    await runtime.channel_context.decide_approval(approval.id, "denied",
                                                  decided_by="telegram:42",
                                                  digest=approval.digest)
    found = (await runtime.audit.page(AuditQuery(action="approval"))).items
    assert [(r.entry.actor_kind, r.entry.actor_id, r.entry.source, r.entry.action,
             r.entry.outcome) for r in found] == [
        ("channel", "telegram:42", "chat", "approval.deny", "ok"),
        ("channel", "telegram:7", "chat", "approval.approve", NotAnApprover.code)]
    decided = found[0].entry
    assert (decided.target, decided.agent, decided.run_id) == (approval.id, "desk", run_id)
    assert decided.details == {"channel": "telegram", "digest": approval.digest,
                               "scope": "call"}
    assert [r.id for r in (await runtime.audit.page(
        AuditQuery(actor="telegram:42"))).items] == [found[0].id]
