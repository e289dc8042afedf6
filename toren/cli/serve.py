"""``toren serve``: the HTTP API only, for deployments that run ``toren worker`` separately."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Annotated

import typer

from toren.cli import dev, worker
from toren.cli.common import DirsOption, load_runtime, served_dirs
from toren.cli.output import JSON_OPTION_HELP
from toren.config import worker_processes
from toren.errors import ConfigError
from toren.host import event_loop
from toren.host.supervisor import Supervisor, child_command

if TYPE_CHECKING:
    from toren.host.runtime import Runtime

#: ``toren.cli.dev.serve``'s signature: start the runtime, listen, run until a signal.
ServeFunction = Callable[..., Awaitable[None]]


def serve(
    dirs: DirsOption = None,
    host: Annotated[str, typer.Option(metavar="HOST", help="Interface to bind.",
                                      envvar="TOREN_HOST")] = dev.DEFAULT_HOST,
    port: Annotated[int, typer.Option(metavar="PORT", help="Port to bind (0 picks a free one).",
                                      envvar="TOREN_PORT")] = dev.DEFAULT_PORT,
    workers: Annotated[bool, typer.Option(
        "--workers", help="Also work queued runs in this process (API and workers in one "
                          "process, as in a single container).")] = False,
    processes: Annotated[str | None, typer.Option(
        "--processes", metavar="N|auto",
        help=f"With --workers: {worker.PROCESSES_HELP}. With more than 1, this process "
             "serves the API and supervises N worker processes (it works no runs itself).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Serve the HTTP API for the agents in the directories, without workers (unless --workers).

    API keys are required: create one with `toren keys create NAME` first.
    """
    count = None if processes is None else worker_processes(processes, "--processes")
    if count is not None and not workers:
        raise ConfigError(f"--processes {processes} sets how many worker processes run: "
                          "add --workers (toren serve alone works no runs)")
    runtime = load_runtime(dirs)
    count = runtime.settings.processes if count is None else count
    if workers and count > 1:
        supervisor = Supervisor(
            child_command([str(d) for d in served_dirs(dirs)], lane=runtime.settings.lane),
            count, env=os.environ, grace_s=runtime.settings.shutdown_grace_s,
            announce=worker.SupervisorOutput(as_json))
        event_loop.run(serve_api(runtime, host=host, port=port, as_json=as_json,
                                 workers=False, supervisor=supervisor))
        return
    event_loop.run(serve_api(runtime, host=host, port=port, as_json=as_json, workers=workers))


async def serve_api(runtime: Runtime, *, host: str, port: int, as_json: bool,
                    workers: bool = False, env: Mapping[str, str] | None = None,
                    serve_http: ServeFunction = dev.serve,
                    supervisor: Supervisor | None = None) -> None:
    """Refuse to start without an active API key (when the policy requires one), then serve.

    ``host:port`` is bound first (a port in use fails before the database starts). The key
    check runs on its own short-lived connection, before the runtime starts and before
    anything is served. Then ``serve_http`` (``toren.cli.dev.serve``) starts the runtime without
    workers and serves the API behind the auth middleware (``workers=False`` selects the
    ``serve`` policy there).

    Args:
        runtime: the loaded, not yet started runtime.
        host: the interface to bind.
        port: the port to bind (0 picks a free one).
        as_json: print the ready line (and errors) as JSON.
        workers: also start in-process workers (``toren serve --workers``).
        env: the environment the policy reads (default ``os.environ``).
        serve_http: what serves the API once the check passed.
        supervisor: worker processes to run beside the API (``toren serve --workers
            --processes N``), started once the API is up and drained with it.
    """
    from toren.server.auth import keys_required, refuse_without_keys  # aiohttp: only here

    sockets = dev.bind(host, port)
    try:
        if keys_required("serve", host, env):
            await runtime.database.open()
            try:
                # a brand-new database has no keys table yet
                await runtime.database.migrate_control()
                await refuse_without_keys(runtime.keys, "serve", host, env)
            finally:
                await runtime.database.close()
        extra = {} if supervisor is None else {"supervisor": supervisor}
        await serve_http(runtime, host=host, port=port, as_json=as_json, workers=workers,
                         command="serve", sockets=sockets, **extra)
    finally:
        for sock in sockets:
            sock.close()
