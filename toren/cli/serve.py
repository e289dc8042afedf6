"""``toren serve``: the HTTP API only, for deployments that run ``toren worker`` separately."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated

import typer

from toren.cli import dev
from toren.cli.common import DirsOption, load_runtime
from toren.cli.output import JSON_OPTION_HELP
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
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Serve the HTTP API for the agents in the directories, without workers (unless --workers).

    API keys are required: create one with `toren keys create NAME` first.
    """
    runtime = load_runtime(dirs)
    asyncio.run(serve_api(runtime, host=host, port=port, as_json=as_json, workers=workers))


async def serve_api(runtime: Runtime, *, host: str, port: int, as_json: bool,
                    workers: bool = False, env: Mapping[str, str] | None = None,
                    serve_http: ServeFunction = dev.serve) -> None:
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
        await serve_http(runtime, host=host, port=port, as_json=as_json, workers=workers,
                         command="serve", sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()
