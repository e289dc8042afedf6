"""The kernel's commands by name: where each one lives and the line ``toren --help`` shows for
it, so the top-level help and a command's start import only the command they need
(``toren.cli.group.TorenGroup`` loads each at its first use; bench/cli_start.py measures it).

``summary`` is the first paragraph of the command's own help (its docstring, or its typer
app's ``help=``), reflowed to one line; tests/unit/test_cli_commands.py fails when the two
drift apart, and says which to change.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelCommand:
    """One of the kernel's commands: ``target`` is ``"module:attribute"``, a function (one
    command) or a ``typer.Typer`` (a group of commands)."""

    name: str
    target: str
    summary: str


KERNEL_COMMANDS: tuple[KernelCommand, ...] = (
    KernelCommand("version", "toren.cli.version:version", "Print Toren's version."),
    KernelCommand("plugins", "toren.cli.plugins:plugins", "List installed plugins and drivers."),
    KernelCommand("init", "toren.cli.init:init", "Create an agent directory (agent.yaml, "
                  "prompt.md, tools.py) that runs offline."),
    KernelCommand("dev", "toren.cli.dev:dev", "Serve every agent in the directories: HTTP API "
                  "plus in-process workers (of every lane: short and long agents alike, "
                  "whatever TOREN_LANE says)."),
    KernelCommand("serve", "toren.cli.serve:serve", "Serve the HTTP API for the agents in the "
                  "directories, without workers (unless --workers)."),
    KernelCommand("worker", "toren.cli.worker:worker", "Work queued runs of the agents in the "
                  "directories until SIGINT/SIGTERM."),
    KernelCommand("run", "toren.cli.run:run", "Start a run of AGENT with INPUT (and files, "
                  "with --file)."),
    KernelCommand("chat", "toren.cli.chat:chat", "Talk to AGENT in a durable session (resume "
                  "one with --session)."),
    KernelCommand("top", "toren.cli.top:top", "Watch the fleet live: workers and their "
                  "versions, each agent's queue (ready, in flight, oldest wait) and unfinished "
                  "runs, the runs in flight with their current step and elapsed time, and the "
                  "latest failures. Ctrl-C ends it."),
    KernelCommand("audit", "toren.cli.audit:audit", "The audit trail, newest first: every "
                  "state-changing call (runs started, cancelled, signalled, forked, upgraded, "
                  "archived, restored; approvals decided; questions answered; keys created and "
                  "revoked; files uploaded and deleted; schedules paused, resumed, triggered), "
                  "allowed, denied or failed, with who, when, from where and how it ended. "
                  "Through --url the key needs the audit:read scope."),
    KernelCommand("costs", "toren.cli.costs:costs", "What the agents' model calls cost per day "
                  "or week: a bar per period, the calls, tokens and cost per agent and model, "
                  "and each agent's budgets with today's use (through --url: the server's agents "
                  "and their limits)."),
    KernelCommand("jobs", "toren.cli.jobs:app", "Runs: list, show, receipt, cancel, answer, "
                  "signal, fork, diff, upgrade."),
    KernelCommand("eval", "toren.cli.evals:app", "Evals: run a dataset of cases against a "
                  "version of an agent (every case a durable run), then report and compare "
                  "pass rates, cost and latency (run, resume, report, compare, list)."),
    KernelCommand("db", "toren.cli.db:app", "Database maintenance."),
    KernelCommand("keys", "toren.cli.keys:app", "API keys: create, list, revoke."),
    KernelCommand("approvals", "toren.cli.approvals:app", "Tool calls waiting for a person: "
                  "list, show, approve, deny, edit, answer."),
    KernelCommand("schedules", "toren.cli.schedules:app", "Schedules (schedules: in "
                  "agent.yaml): list, show, pause, resume, trigger."),
    KernelCommand("files", "toren.cli.files:app", "Files for agents to read: add, list, show, "
                  "rm."),
    KernelCommand("memory", "toren.cli.memory:app", "What agents remember (memory: in "
                  "agent.yaml): list, show, edit, rm."),
    KernelCommand("channels", "toren.cli.channels:app", "Chat channels (Telegram, WhatsApp): "
                  "pairing of unknown people."),
    KernelCommand("agents", "toren.cli.versions:agents_app", "Agents: the versions kept in the "
                  "database, the tools each is offered (versions, tools)."),
)

#: The kernel's commands by name.
BY_NAME: dict[str, KernelCommand] = {command.name: command for command in KERNEL_COMMANDS}
