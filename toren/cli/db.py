"""``toren db``: database maintenance."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer

from toren.cli import archive
from toren.cli.common import DirsOption, load_runtime
from toren.cli.output import JSON_OPTION_HELP, console, err_console, print_json, safe

if TYPE_CHECKING:
    from toren.host.runtime import Runtime

app = typer.Typer(help="Database maintenance.", no_args_is_help=True)


@app.command("migrate")
def migrate(
    dirs: DirsOption = None,
    print_sql: Annotated[bool, typer.Option(
        "--print", help="Print the SQL of pending migrations; apply nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Apply pending migrations for the control schema and every agent's schema."""
    runtime = load_runtime(dirs)
    asyncio.run(_migrate(runtime, print_sql=print_sql, as_json=as_json))


async def _migrate(runtime: Runtime, *, print_sql: bool, as_json: bool) -> None:
    await runtime.database.open()
    try:
        if not as_json:
            err_console.print(f"Database: {safe(runtime.database.description)}")
        if print_sql:
            pending = await runtime.database.pending_migrations()
            if as_json:
                print_json({"pending": [_describe(m) | {"sql": m.sql} for m in pending]})
            elif not pending:
                err_console.print("Nothing to apply: the database is current.")
            else:
                console.print(runtime.database.render_migrations(pending),
                              markup=False, highlight=False, soft_wrap=True)
            return
        applied = await runtime.database.migrate()
        if as_json:
            print_json({"applied": [_describe(m) for m in applied],
                        "agents": list(runtime.agents)})
        elif not applied:
            console.print("Nothing to apply: the database is current.")
        else:
            for migration in applied:
                console.print(f"applied {migration.scope} {migration.version:04d}_{migration.name}")
    finally:
        await runtime.database.close()


def _describe(migration: object) -> dict[str, object]:
    return {key: getattr(migration, key) for key in ("scope", "version", "name")}


app.command("archive")(archive.archive)
app.command("restore")(archive.restore)
