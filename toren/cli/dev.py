"""``toren dev``: the API and workers in one process, on the embedded Postgres by default."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
from typing import TYPE_CHECKING, Annotated

import typer

from toren.cli.common import DirsOption, load_runtime, refresh_secrets_on_sighup
from toren.cli.output import JSON_OPTION_HELP, console, err_console, print_json, safe
from toren.cli.worker import SupervisorOutput, first_of
from toren.errors import ConfigError
from toren.host import event_loop

if TYPE_CHECKING:
    from toren.host.runtime import Runtime
    from toren.host.supervisor import Supervisor
    from toren.server.auth import Command

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8420


def dev(
    dirs: DirsOption = None,
    host: Annotated[str, typer.Option(metavar="HOST", help="Interface to bind.",
                                      envvar="TOREN_HOST")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(metavar="PORT", help="Port to bind (0 picks a free one).",
                                      envvar="TOREN_PORT")] = DEFAULT_PORT,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Serve every agent in the directories: HTTP API plus in-process workers (of every
    lane: short and long agents alike, whatever TOREN_LANE says)."""
    runtime = load_runtime(dirs, lane="all")
    event_loop.run(serve(runtime, host=host, port=port, as_json=as_json, workers=True))


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for ``host:port`` (one per address the host name resolves to), bound
    before the database starts: a port in use is an error at once, and nothing else can take
    the port while the database starts. ``serve`` hands them to the HTTP server."""
    try:
        addresses = dict.fromkeys(
            (family, address) for family, _type, _proto, _name, address in socket.getaddrinfo(
                host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE))
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}; pass --host (or "
                          "TOREN_HOST) with an address of this machine") from None
    sockets: list[socket.socket] = []
    try:
        for family, address in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # one free port for every address
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            try:
                sock.bind(address)
            except OSError as exc:
                # like asyncio's create_server: an address family this machine does not
                # have (``localhost`` -> ::1 without IPv6) is skipped if another address binds
                if exc.errno != errno.EADDRNOTAVAIL or len(addresses) == 1:
                    raise
                sockets.pop().close()
                continue
            sock.listen()
        if not sockets:
            raise OSError(errno.EADDRNOTAVAIL, os.strerror(errno.EADDRNOTAVAIL))
    except OSError as exc:
        for sock in sockets:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is already in use; pass --port "
                              "(or TOREN_PORT) to pick another") from None
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sockets


async def serve(runtime: Runtime, *, host: str, port: int, as_json: bool,
                workers: bool, command: Command | None = None,
                sockets: list[socket.socket] | None = None,
                supervisor: Supervisor | None = None) -> None:
    """Start ``runtime`` and its HTTP API; run until SIGINT or SIGTERM, then stop cleanly.

    ``command`` picks the key policy (see ``toren.server.auth.keys_required``): ``"serve"``
    requires keys by default, ``"dev"`` not on loopback. Unset, it is ``"dev"`` with
    ``workers`` and ``"serve"`` without. ``sockets`` are already bound ones (see ``bind``);
    without them, ``host:port`` is bound first, before the database starts. ``supervisor``:
    worker processes beside the API (``toren serve --workers --processes N``), started once
    the API is up (the ready line waits for them and names them) and told to drain as soon as
    a signal comes, while the API stops beside them.
    """
    sockets = sockets if sockets is not None else bind(host, port)
    try:
        await _serve(runtime, host=host, as_json=as_json, workers=workers,
                     command=command or ("dev" if workers else "serve"), sockets=sockets,
                     supervisor=supervisor)
    finally:
        for sock in sockets:
            sock.close()


async def _serve(runtime: Runtime, *, host: str, as_json: bool, workers: bool,
                 command: Command, sockets: list[socket.socket],
                 supervisor: Supervisor | None) -> None:
    # the server (aiohttp) is imported here, not at module level: every toren command loads
    # this module, and only dev and serve need it
    from aiohttp import web

    from toren.server.app import create_app
    from toren.server.auth import keys_required, refuse_without_keys
    from toren.server.connections import ConnectionLimits, LimitedAppRunner

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    refresh_secrets_on_sighup(runtime, also=None if supervisor is None
                              else lambda: supervisor.forward(signal.SIGHUP))
    if not as_json:
        with err_console.status("Starting the database…"):
            await runtime.start(workers=workers)
    else:
        await runtime.start(workers=workers)
    try:
        await refuse_without_keys(runtime.keys, command, host)  # before anything is served
    except BaseException:
        await runtime.stop()
        raise
    app = create_app(runtime, require_keys=keys_required(command, host), bound_host=host,
                     allowed_hosts=runtime.settings.allowed_hosts)
    # stopping ends live event streams at once (on_shutdown); any other request in progress
    # gets the shutdown grace to finish before it is cancelled
    runner = LimitedAppRunner(app, ConnectionLimits.from_settings(runtime.settings),
                              access_log=None, shutdown_timeout=runtime.settings.shutdown_grace_s)
    try:
        await runtime.start_channels()
        await runner.setup()
        for sock in sockets:
            await web.SockSite(runner, sock).start()
        bound_port = sockets[0].getsockname()[1]
        url = f"http://{host if ':' not in host else f'[{host}]'}:{bound_port}"
        if supervisor is not None:
            await supervisor.start()
            await _until_ready_or_stopped(supervisor, stop)
        if not stop.is_set():
            _announce(runtime, url, as_json, supervisor)
        await stop.wait()
    finally:
        if supervisor is not None:
            supervisor.begin_stop()  # the worker processes drain while the API stops
        await runner.cleanup()
        await runtime.stop_channels()
        await runtime.stop()
        if supervisor is not None and not await supervisor.stop():
            err_console.print("[yellow]Some worker processes did not stop cleanly (see the "
                              "log above).[/]")
        if not as_json:
            err_console.print("Stopped.")


async def _until_ready_or_stopped(supervisor: Supervisor, stop: asyncio.Event) -> None:
    """Until every worker process is ready, or a signal came first."""
    await first_of(supervisor.wait_ready(), stop.wait())


def _announce(runtime: Runtime, url: str, as_json: bool,
              supervisor: Supervisor | None = None) -> None:
    info = runtime.describe() | {"url": url}
    if supervisor is not None:
        if isinstance(supervisor.announce, SupervisorOutput):
            supervisor.announce.announced = True  # restarts are printed from now on
        described = supervisor.describe()
        info |= described | {"workers": f"{described['processes']} worker processes "
                                        f"(supervisor {supervisor.id})"}
    if as_json:
        print_json({"event": "ready"} | info)
        return
    console.print(f"[bold]Toren[/] is serving at {safe(url)}")
    console.print(f"  database: {safe(info['database'])}")
    console.print(f"  workers:  {safe(info['workers'] or 'none (API only)')}")
    console.print("  agents:")
    for agent in info["agents"]:
        description = f" - {safe(agent['description'])}" if agent["description"] else ""
        console.print(f"    [bold]{safe(agent['name'])}[/] ({safe(agent['model'])})"
                      f"{description}")
    console.print("Press Ctrl-C to stop.")
