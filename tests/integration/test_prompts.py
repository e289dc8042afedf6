"""Every system prompt a run's tasks ran with can be read back, after the agent changed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import psycopg

from toren.testing import write_agent_dir


async def test_the_receipt_has_the_text_of_every_prompt_kept_once_per_distinct_prompt(
        make_runtime, database_url: str, tmp_path: Path) -> None:
    first = "You are the first prompt.\n"
    directory = write_agent_dir(tmp_path, "auditor", prompt=first)
    runtime = await make_runtime(dirs=[directory])
    one = await runtime.start_run("auditor", "a")
    two = await runtime.start_run("auditor", "b")
    for run_id in (one, two):
        await runtime.wait_for_run(run_id, timeout_s=30)
    await runtime.stop()

    second = "You are the second prompt, after an edit.\n"
    (directory / "prompt.md").write_text(second)
    runtime = await make_runtime(dirs=[directory])
    three = await runtime.start_run("auditor", "c")
    await runtime.wait_for_run(three, timeout_s=30)

    old, new = (hashlib.sha256(text.encode()).hexdigest() for text in (first, second))
    receipt = await runtime.receipt(one)
    assert receipt["tasks"][0]["prompt_sha256"] == old
    assert receipt["prompts"] == {old: first}  # the prompt it ran with, not today's
    assert (await runtime.receipt(three))["prompts"] == {new: second}
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT sha256, text FROM agent_auditor.prompts "
                            "ORDER BY created_at").fetchall()
    assert rows == [(old, first), (new, second)]  # two runs of one prompt kept it once
