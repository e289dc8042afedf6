"""``toren db archive`` and ``toren db restore``: retention by hand (docs/guides/retention.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.common import DirsOption
from toren.cli.operator import Operator, UrlOption, operate
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe


def archive(
    dirs: DirsOption = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="List the runs that would be archived; archive nothing.")] = False,
    max_runs: Annotated[int | None, typer.Option(
        "--max-runs", metavar="N", min=1, help="Archive at most this many runs.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
    url: UrlOption = None,
) -> None:
    """Archive finished runs older than their agent's retention: write each to TOREN_ARCHIVE
    and delete it from the hot tables in small batches (the elected worker does this every
    TOREN_ARCHIVE_INTERVAL seconds). With --url, the deployment's agents and archive."""
    report = operate(lambda op: op.archive(dry_run=dry_run, max_runs=max_runs), url=url,
                     dirs=dirs, serve_dirs=True)
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


def restore(
    run_id: Annotated[str, typer.Argument(
        metavar="RUN_ID", help="The archived run's id, or the start of it.")],
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
    url: UrlOption = None,
) -> None:
    """Put an archived run back into the hot tables, whole, from TOREN_ARCHIVE (the archive
    object stays). A run older than its retention is archived again by the next pass."""

    async def restore_one(operator: Operator) -> dict[str, Any]:
        return await operator.restore_run(await operator.resolve_archived_run_id(run_id))

    record = operate(restore_one, url=url)
    if as_json:
        print_json(record)
    else:
        console.print(f"run {safe(record['id'])} ({safe(record['agent'])}, {record['status']}) "
                      "is back in the hot tables")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
