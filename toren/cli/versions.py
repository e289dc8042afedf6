"""``toren agents versions NAME``, ``toren agents tools`` and ``toren jobs upgrade RUN``: runs
pinned to agent versions, and the tools agents are offered."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from toren.cli.approvals import cli_identity
from toren.cli.common import DirsOption, load_runtime, require_database, run_async
from toren.cli.operator import LocalOperator, Operator, RemoteOperator, UrlOption, make_operator
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe

if TYPE_CHECKING:
    from toren.host.runtime import Runtime

agents_app = typer.Typer(help="Agents: the versions kept in the database, the tools each is "
                              "offered (versions, tools).", no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
AgentArgument = Annotated[str, typer.Argument(metavar="NAME", help="The agent's name.")]
RunArgument = Annotated[str, typer.Argument(
    metavar="RUN_ID", help="The run's id, or the start of it (unique among the runs).")]


def _operator(url: str | None, dirs: list[Path] | None, *, need_dirs: bool) -> Operator:
    """The deployment at ``url``, else this database through a runtime serving the agents in
    ``dirs`` (the current directory by default when ``need_dirs``)."""
    if url:
        return make_operator(url)
    from toren.host.runtime import Runtime

    runtime = load_runtime(dirs) if dirs or need_dirs else Runtime(agents=[])
    require_database(runtime)  # versions and runs to upgrade are records already there
    return LocalOperator(runtime)


def _with(operator: Operator, action: Any) -> Any:
    async def go() -> Any:
        await operator.start()
        try:
            return await action(operator)
        finally:
            await operator.aclose()

    return run_async(go())


async def _versions(operator: Operator, agent: str) -> dict[str, Any]:
    if isinstance(operator, RemoteOperator):
        return dict(await operator.client.agent_versions(agent))
    assert isinstance(operator, LocalOperator)
    return await operator.runtime.agent_versions(agent)


async def _upgrade(operator: Operator, run_id: str) -> dict[str, Any]:
    found = await operator.resolve_run_id(run_id)
    if isinstance(operator, RemoteOperator):
        return dict(await operator.client.upgrade_run(found))
    assert isinstance(operator, LocalOperator)
    async with operator.audited("run.upgrade", run_id=found):
        return await operator.runtime.upgrade_run(found, requested_by=cli_identity())


@agents_app.command("versions")
def versions(agent: AgentArgument, dirs: DirsOption = None, as_json: JsonOption = False,
             url: UrlOption = None) -> None:
    """The versions of an agent's definition kept in the database: content hash, human
    version (version: in agent.yaml), first seen, and how many runs are on each. With --dir,
    the version that directory holds is marked current."""
    data = _with(_operator(url, dirs, need_dirs=False), lambda op: _versions(op, agent))
    if as_json:
        print_json(data)
        return
    # "current" (the version --dir holds) is a labelled column, and only when there is one
    marked = any(version.get("current") for version in data["versions"])
    table = Table()
    for column in ("version", "human version", "first seen", "runs", "active runs",
                   *(("current",) if marked else ())):
        table.add_column(column)
    for version in data["versions"]:
        table.add_row(version["hash"][:12], safe(version["human_version"] or ""),
                      str(version["first_seen"] or "")[:19].replace("T", " "),
                      str(version["runs"]), str(version["active_runs"]),
                      *(("yes" if version.get("current") else "",) if marked else ()))
    print_table(table)
    if not data["versions"]:
        console.print(f"no versions of {safe(agent)} are kept yet: one is kept when a process "
                      "serving the agent starts or creates a run")


def upgrade(run_id: RunArgument, dirs: DirsOption = None, as_json: JsonOption = False,
            url: UrlOption = None) -> None:
    """Move an unfinished run to the agent's definition in --dir (the current directory by
    default; with --url, the one the deployment serves). Recorded in the run's log as
    AgentVersionUpgraded; a task in flight switches before its next model call."""
    result = _with(_operator(url, dirs, need_dirs=True), lambda op: _upgrade(op, run_id))
    if as_json:
        print_json(result)
        return
    human = f" ({safe(result['human_version'])})" if result["human_version"] else ""
    if not result["upgraded"]:
        console.print(f"run {safe(result['run_id'])} is on version {result['version'][:12]}"
                      f"{human} already")
        return
    before = (result["from_version"] or "none")[:12]
    console.print(f"run {safe(result['run_id'])} upgraded from version {before} to "
                  f"{result['version'][:12]}{human}")



@agents_app.command("tools")
def tools(dirs: DirsOption = None, as_json: JsonOption = False) -> None:
    """Each agent's tools as its model is offered them: tools.py, tools:, peers, and what
    its MCP servers (mcpServers:) offer now; the servers are started to be asked, then
    stopped. A server that cannot start is an error naming the agent, the server and the end
    of its stderr."""
    runtime = load_runtime(dirs)
    data = run_async(_agent_tools(runtime))
    if as_json:
        print_json(data)
        return
    table = Table()
    for column in ("agent", "tool", "from", "idempotent", "description"):
        table.add_column(column)
    for agent in data["agents"]:
        for each in agent["tools"]:
            table.add_row(safe(agent["name"]), safe(each["name"]), safe(each["source"]),
                          "yes" if each["idempotent"] else "no",
                          safe(each["description"].splitlines()[0][:80]
                               if each["description"] else ""))
    print_table(table)


async def _agent_tools(runtime: Runtime) -> dict[str, Any]:
    from toren.seams.tool_sources import source_tools, start_entries, stop_entries

    listed = []
    for agent in runtime.agents.values():
        started = await start_entries(agent.tool_sources)
        try:
            found = await source_tools(started, source="mcpServers")
        finally:
            await stop_entries(started)
        every = {**found, **agent.tools}
        listed.append({"name": agent.name, "tools": [
            {"name": name, "source": tool.source or "tools.py", "idempotent": tool.idempotent,
             "description": tool.description} for name, tool in every.items()]})
    await runtime.plugins.close_tool_sources()
    return {"agents": listed}
