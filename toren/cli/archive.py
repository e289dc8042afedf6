"""``toren db archive`` and ``toren db restore``: retention by hand (docs/guides/retention.md)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.common import DirsOption, load_runtime, run_async
from toren.cli.output import JSON_OPTION_HELP, console, err_console, print_json, print_table, safe
from toren.errors import RunNotFound
from toren.host.runtime import Runtime


def archive(
    dirs: DirsOption = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="List the runs that would be archived; archive nothing.")] = False,
    max_runs: Annotated[int | None, typer.Option(
        "--max-runs", metavar="N", min=1, help="Archive at most this many runs.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Archive finished runs older than their agent's retention: write each to TOREN_ARCHIVE
    and delete it from the hot tables in small batches (the elected worker does this every
    TOREN_ARCHIVE_INTERVAL seconds)."""
    runtime = load_runtime(dirs)
    report = run_async(_archive(runtime, dry_run=dry_run, max_runs=max_runs))
    if as_json:
        print_json(report)
        return
    if report.get("skipped"):
        console.print(f"Nothing done: {report['skipped']}; try again when it has finished.")
        return
    table = Table(title=("Would archive" if dry_run else "Archived")
                  + f" (archive: {safe(report['archive'] or 'not configured')})")
    for column in ("agent", "retention", "runs", "events", "bytes", "kept: referenced"):
        table.add_column(column)
    for agent, counts in report["agents"].items():
        table.add_row(safe(agent), _age(counts["retention_s"]), str(counts["archived"]),
                      "" if dry_run else str(counts["events"]),
                      "" if dry_run else str(counts["bytes"]),
                      str(counts["skipped_referenced"]))
    print_table(table)
    if dry_run:
        for run in report["runs"]:
            console.print(f"{safe(run['id'])}  {safe(run['agent'])}  {run['status']}  "
                          f"finished {run['finished_at'] or '?'}")


async def _archive(runtime: Runtime, *, dry_run: bool, max_runs: int | None) -> dict[str, Any]:
    await runtime.start(workers=False)
    try:
        err_console.print(f"Database: {safe(runtime.store.description)}")
        report = await runtime.archive_runs(dry_run=dry_run, max_runs=max_runs)
        report["hot_tables"] = await runtime.store.hot_table_sizes(list(runtime.agents))
        return report
    finally:
        await runtime.stop()


def restore(
    run_id: Annotated[str, typer.Argument(
        metavar="RUN_ID", help="The archived run's id, or the start of it.")],
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Put an archived run back into the hot tables, whole, from TOREN_ARCHIVE (the archive
    object stays). A run older than its retention is archived again by the next pass."""
    record = run_async(_restore(Runtime(agents=[]), run_id))
    if as_json:
        print_json(record)
    else:
        console.print(f"run {safe(record['id'])} ({safe(record['agent'])}, {record['status']}) "
                      "is back in the hot tables")


async def _restore(runtime: Runtime, id_or_prefix: str) -> dict[str, Any]:
    await runtime.start(workers=False)
    try:
        text = id_or_prefix.strip().lower()
        try:
            run_id = str(uuid.UUID(text))
        except ValueError:
            matches = [run.id for run in await runtime.list_archived_runs(limit=1000)
                       if run.id.startswith(text)] if text else []
            if len(matches) != 1:
                found = "several archived runs' ids start" if matches else (
                    "no archived run's id starts")
                raise RunNotFound(f"{found} with {id_or_prefix!r}; give the whole id (see "
                                  "`toren jobs list --archived`)") from None
            run_id = matches[0]
        return (await runtime.restore_run(run_id)).to_json()
    finally:
        await runtime.stop()


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
