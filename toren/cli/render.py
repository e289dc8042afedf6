"""Human rendering of events, runs and receipts for the terminal."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from toren.cli.output import console, plain, safe, toren_command
from toren.core import events as ev
from toren.core.events import Event
from toren.seams.shapes import TextDelta


def output_text(output: Any) -> str:
    """A run's output as the terminal shows it: text as it is, a structured answer (a JSON
    value, from ``output:`` or a workflow) as indented JSON; without escape sequences."""
    if isinstance(output, str):
        return plain(output)
    return plain(json.dumps(output, indent=2, ensure_ascii=False, sort_keys=False))


def _short(text: str | None, limit: int = 100) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def money(value: float | None) -> str:
    """Dollars to four decimals, as every command and the console show money."""
    return "cost unknown" if value is None else f"${value:.4f}"


def _cache_cell(tokens: int, cost: float | None) -> str:
    """Cache tokens of one kind and what they cost: ``1200 · $0.0004``."""
    if not tokens:
        return ""
    return f"{tokens}" + ("" if cost is None else f" · ${cost:.4f}")


def _cache_rate(calls: list[dict[str, Any]], kind: str) -> str:
    """`` at $0.30/MTok`` when every priced call with tokens of ``kind`` had that price."""
    rates = {c["pricing"][f"{kind}_per_mtok"] for c in calls
             if c.get("pricing") and c[f"{kind}_tokens"] and not c.get("copied")}
    return f" at ${rates.pop():g}/MTok" if len(rates) == 1 else ""


def cache_rows(receipt: dict[str, Any]) -> list[tuple[str, str]]:
    """The receipt's prompt-cache lines (none for a run that read and wrote no cache): reads
    and writes with their prices, and what caching saved against the uncached price."""
    totals = receipt["totals"]
    read, written = totals.get("cache_read_tokens", 0), totals.get("cache_write_tokens", 0)
    if not read and not written:
        return []
    calls = [c for task in receipt["tasks"] for c in task["model_calls"]]
    saved = totals.get("cache_saved_usd", 0.0)
    uncached = totals.get("uncached_cost_usd", 0.0)
    priced = sum(1 for c in calls if c.get("cache_saved_usd") is not None and not c["copied"])
    rows = [("cache reads", f"{read} tokens{_cache_rate(calls, 'cache_read')}: "
                            f"${totals.get('cache_read_cost_usd', 0.0):.4f}"),
            ("cache writes", f"{written} tokens{_cache_rate(calls, 'cache_write')}: "
                             f"${totals.get('cache_write_cost_usd', 0.0):.4f}")]
    if priced:
        rows.append(("caching saved", f"${saved:.4f} (${uncached:.4f} without caching)"
                     if saved >= 0 else
                     f"-${-saved:.4f}: cache writes not read back yet (${uncached:.4f} "
                     "without caching)"))
    return rows


def event_line(event: Event) -> str | None:
    """One line for a live event, or ``None`` for events not worth a line."""
    d = event.data
    task = event.stream.removeprefix("task:")
    if event.type == ev.TASK_STARTED:
        who = f"subagent {safe(d['subagent'])}" if d.get("subagent") else "agent"
        return f"[bold]▶ task {safe(task)}[/] started ({who}, {safe(d['model'])})"
    if event.type == ev.MODEL_CALL_COMPLETED:
        usage = d["usage"]
        calls = ", ".join(c["name"] for c in d["tool_calls"])
        then = f" → calls {safe(calls)}" if calls else " → answers"
        repeated = " [yellow](repeated after a crash)[/]" if d.get("repeated") else ""
        read, written = usage.get("cache_read_tokens", 0), usage.get("cache_write_tokens", 0)
        cached = f" (cache {read} read, {written} written)" if read or written else ""
        images = f" ({d['image_tokens']} for images/PDFs)" if d.get("image_tokens") else ""
        return (f"  step {d['step']} · {safe(d['model'])} · {usage['input_tokens']}→"
                f"{usage['output_tokens']} tokens{images}{cached} · {money(d['cost_usd'])} · "
                f"{d['latency_ms']:.1f} ms{then}{repeated}")
    if event.type == ev.TOOL_CALL_COMPLETED:
        colour = "red" if d["is_error"] else "green"
        cut = " [yellow](truncated)[/]" if d.get("truncated") else ""
        return (f"    [{colour}]↳ {safe(d['name'])}[/] {safe(_short(d['output']))}{cut} "
                f"({d['duration_ms']:.1f} ms)")
    if event.type == ev.RETRY_SCHEDULED:
        return (f"  [yellow]⟳ retry {d['attempt']} in {d['delay_s']:.1f}s:[/] "
                f"{safe(d['error']['message'])}")
    if event.type == ev.APPROVAL_REQUESTED:
        toren = safe(toren_command())  # runnable as printed, toren on PATH or not
        return (f"  [yellow]⏸ waiting for approval of {safe(d['name'])} (id "
                f"{safe(d['approval_id'])}):[/] approve with `{toren} approvals approve "
                f"{safe(d['approval_id'])}` (--always: the same call again in this run), "
                f"deny with `{toren} approvals deny {safe(d['approval_id'])} --reason ...`, "
                "or edit (--args JSON) or answer (--answer TEXT) it")
    if event.type == ev.APPROVAL_DECIDED:
        colour = "green" if d["outcome"] in ("approved", "edited", "answered") else "red"
        why = f": {safe(d['reason'])}" if d.get("reason") else ""
        always = " always" if d.get("scope") == "run" else ""
        granted = f" (approved always with {safe(d['granted_by'])})" if d.get("granted_by") else ""
        return f"  [{colour}]✓ {d['outcome']}{always} by {safe(d['decided_by'])}{granted}{why}[/]"
    if event.type == ev.APPROVAL_ESCALATED:
        return (f"  [yellow]⏫ nobody decided in time: approval {safe(d['approval_id'])} now "
                f"waits for {safe(', '.join(d['approvers']))}[/]")
    if event.type == ev.POLICY_DECIDED and d["decision"] not in ("allow", "keep"):
        what = f"{safe(d['name'])} call" if d.get("name") else "response"
        if d["hook"] == "after_tool_call":
            what = f"{safe(d.get('name') or 'tool')} result"
        why = f": {safe(_short(d['reason']))}" if d.get("reason") else ""
        return (f"  [magenta]⚖ policy {safe(d.get('plugin') or '?')}: {d['decision']} "
                f"{what}{why}[/]")
    if event.type == ev.QUESTION_ASKED:
        choices = f" [{safe(' | '.join(d['choices']))}]" if d.get("choices") else ""
        return (f"  [yellow]? the agent asks (question {safe(d['question_id'])}):[/] "
                f"{safe(d['question'])}{choices}: answer with `toren jobs answer "
                f"{safe(event.run_id)} {safe(d['question_id'][:8])} TEXT`")
    if event.type == ev.QUESTION_ANSWERED:
        if d["outcome"] != "answered":
            return f"  [red]✕ the question {d['outcome']}: nobody answered it[/]"
        return (f"  [green]✓ answered by {safe(d['answered_by'])}:[/] "
                f"{safe(_short(d.get('answer') or ''))}")
    if event.type == ev.TOOL_WAIT_STARTED:
        until = f" until {safe(d['deadline'])}" if d.get("deadline") else ""
        return (f"  [yellow]⏸ a tool waits for the signal {safe(d['name'])!r}{until}:[/] send "
                f"it with `toren jobs signal {safe(event.run_id)} {safe(d['name'])} --data "
                "JSON`")
    if event.type == ev.TOOL_WAIT_ENDED:
        if d.get("timed_out"):
            return f"  [yellow]⌛ no signal {safe(d['name'])!r} came in time[/]"
        return (f"  [green]✓ signal {safe(d['name'])!r} #{d['signal']} came:[/] "
                f"{safe(_short(json.dumps(d.get('payload'))))}; the tool runs again")
    if event.type == ev.OUTPUT_REJECTED:
        return (f"  [yellow]↺ the answer of step {d['step']} does not match "
                f"{safe(d['schema_source'])} at {safe(d['where'])}:[/] "
                f"{safe(_short(d['problem']))} (repair turn {d['attempt']})")
    if event.type == ev.TASK_FINISHED:
        return f"[bold]■ task {safe(task)}[/] {d['status']} ({d['stop_reason']})"
    if event.type == ev.RUN_CANCELLED:
        return f"[yellow]✕ run cancelled:[/] {safe(d['reason'])}"
    if event.type == ev.RUN_DEAD_LETTERED:
        return f"[red]✕ {safe(d['reason'])}[/]"
    return None


#: Why a run waits in the queue (``GET /runs/{id}``'s ``queue.waiting``), in words.
QUEUE_WAITING = {
    "concurrency": "waiting for a slot: its concurrency key's runs are all executing",
    "queued": "ready, waiting for a worker",
    "delayed": "waiting for a retry or a wake-up that is not due yet",
}


def queue_text(queue: dict[str, Any] | None) -> str:
    """The run's priority, concurrency key and why it waits, on one line; empty when there
    is nothing to say (priority 0, no key, not waiting)."""
    if not queue:
        return ""
    parts = []
    if queue.get("priority"):
        parts.append(f"priority {queue['priority']}")
    if queue.get("concurrency_key") is not None:
        parts.append(f"concurrency key {queue['concurrency_key']!r}")
    waiting = queue.get("waiting")
    if waiting:
        parts.append(QUEUE_WAITING.get(waiting, f"waiting ({waiting})"))
    return " · ".join(parts)


def run_summary(receipt: dict[str, Any]) -> Table:
    """Status, stop reason and totals of a run as a two-column table."""
    run = receipt["run"]
    totals = receipt["totals"]
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("run", safe(run["id"]))
    table.add_row("agent", safe(run["agent"]))
    table.add_row("status", f"{run['status']} ({run['stop_reason'] or 'not stopped'})")
    table.add_row("why", safe(receipt["why"]))
    fork = receipt.get("fork")
    if fork:
        table.add_row("forked from", safe(
            f"{fork['source_run_id']} at {fork['unit']} {fork['at_step']} "
            f"({totals.get('copied_calls', 0)} model call(s) copied, at no cost)"))
    if run.get("agent_version"):
        human = run.get("agent_human_version")
        table.add_row("version", run["agent_version"][:12] + (f" ({safe(human)})" if human
                                                              else ""))
    queue = queue_text(receipt.get("queue"))
    if queue:
        table.add_row("queue", safe(queue))
    if run["error"] and run["status"] not in ev.TERMINAL_STATUSES:
        next_at = run["error"].get("next_attempt_at")
        table.add_row("latest error", safe(f"{run['error'].get('message')}"
                                             + (f" (next attempt {next_at})" if next_at else "")))
    table.add_row("steps", str(totals["model_calls"]))
    table.add_row("tool calls", str(totals["tool_calls"]))
    images = totals.get("image_tokens", 0)
    table.add_row("tokens", f"{totals['input_tokens']} in / {totals['output_tokens']} out"
                  + (f" ({images} of the input for images and PDF pages, estimated)"
                     if images else ""))
    unknown = totals["cost_unknown_calls"]
    table.add_row("cost", f"${totals['cost_usd']:.4f}"
                  + (f" + {unknown} call(s) of unknown cost" if unknown else ""))
    for label, value in cache_rows(receipt):
        table.add_row(label, value)
    if totals["repeated_calls"]:
        table.add_row("repeated calls", f"{totals['repeated_calls']} (in flight at a crash)")
    budget = receipt.get("budget")
    for scope, label in (("run", "budget"), ("daily", "daily budget")):
        spend = budget.get(scope) if budget else None
        if spend and spend["budget_usd"] is not None:
            table.add_row(label, f"${spend['spent_usd']:.4f} of ${spend['budget_usd']:g} "
                                 f"(${spend['remaining_usd']:.4f} left)")
    if budget and budget["held_usd"]:
        table.add_row("reserved", f"${budget['held_usd']:.4f} held by calls in flight")
    return table


def run_tree(receipt: dict[str, Any]) -> Tree:
    """The run as a tree: run -> waves -> tasks -> steps."""
    run = receipt["run"]
    tree = Tree(f"[bold]run {safe(run['id'])}[/] {run['status']}")
    waves: dict[int, Tree] = {}
    for task in receipt["tasks"]:
        who = task["subagent"] or "agent"
        parent = tree
        if task.get("wave"):
            if task["wave"] not in waves:
                size = sum(1 for t in receipt["tasks"] if t.get("wave") == task["wave"])
                waves[task["wave"]] = tree.add(f"[bold]wave {task['wave']}[/] ({size} task(s))")
            parent = waves[task["wave"]]
        branch = parent.add(f"task {safe(task['task_id'])} ({safe(who)}, "
                          f"{safe(task['model'] or '?')}) {task['status']}"
                          f"{' · ' + task['stop_reason'] if task['stop_reason'] else ''}"
                          f" · {money(task['totals']['cost_usd'])}")
        tools_by_step: dict[int, list[dict[str, Any]]] = {}
        for call in task["tool_calls"]:
            tools_by_step.setdefault(call["step"], []).append(call)
        for call in task["model_calls"]:
            label = "compaction" if call["purpose"] == "compaction" else f"step {call['step']}"
            step = branch.add(f"{label} · {call['input_tokens']}→"
                              f"{call['output_tokens']} tokens · {money(call['cost_usd'])} · "
                              f"{call['latency_ms']:.1f} ms"
                              + (" · replayed from log" if call["replayed"] else "")
                              + (" · repeated" if call["repeated"] else ""))
            for tool in tools_by_step.get(call["step"], []) if call["purpose"] == "step" else []:
                mark = "[red]error[/]" if tool["is_error"] else "ok"
                step.add(f"{safe(tool['name'])} {mark} ({tool['duration_ms']:.1f} ms)")
        for policy in task.get("policies", ()):
            if policy["decision"] in ("allow", "keep"):
                continue
            what = policy["name"] or "response"
            branch.add(f"[magenta]policy {safe(policy['plugin'] or '?')}[/] {policy['decision']} "
                       f"{safe(what)} at step {policy['step']}"
                       + (f": {safe(_short(policy['reason']))}" if policy["reason"] else ""))
        for retry in task["retries"]:
            branch.add(f"[yellow]retry {retry['attempt']}[/] at step {retry['step']}: "
                       f"{safe(retry['error']['message'])}")
    return tree


def children_tree(run_id: str, children: list[dict[str, Any]]) -> Tree:
    """The runs a run's tasks started: peer calls and background runs, with their cost."""
    tree = Tree(f"[bold]child runs of {safe(run_id)}[/]")
    for child in children:
        cost = child.get("cost_usd")
        tree.add(f"{safe(child['parent']['kind'])} {safe(child['agent'])} run "
                 f"{safe(child['id'])} {child['status']}"
                 + (f" · {money(cost)}" if cost is not None else "")
                 + f" · depth {child['depth']}")
    return tree


def webhooks_tree(deliveries: list[dict[str, Any]]) -> Tree:
    """A run's completion webhook deliveries (``toren jobs show``), each with its attempts."""
    tree = Tree("[bold]webhooks[/]")
    for delivery in deliveries:
        state = delivery["state"]
        if state == "pending" and delivery["next_attempt_at"]:
            state = f"pending, next attempt {delivery['next_attempt_at']}"
        node = tree.add(f"{safe(delivery['event'])} -> {safe(delivery['url'])} · {state} · "
                        f"{delivery['attempts']} attempt(s) · event id {delivery['id']}")
        for attempt in delivery["history"]:
            outcome = (f"HTTP {attempt['status_code']}" if attempt["status_code"] is not None
                       else "no response")
            error = f" · {safe(attempt['error'])}" if attempt["error"] else ""
            node.add(f"#{attempt['attempt']} {attempt['started_at']} · {outcome} · "
                     f"{attempt['duration_ms']:.0f} ms{error}")
    return tree


def _saved(call: dict[str, Any]) -> str:
    saved = call.get("cache_saved_usd")
    if saved is None or not (call["cache_read_tokens"] or call["cache_write_tokens"]):
        return ""
    return f"${saved:.4f}" if saved >= 0 else f"-${-saved:.4f}"


def receipt_tables(receipt: dict[str, Any]) -> list[Table]:
    """Every model call and tool call of a run."""
    calls = Table(title="Model calls")
    every_call = [call for task in receipt["tasks"] for call in task["model_calls"]]
    # the cache columns only when a call read or wrote a prompt cache: most runs never do
    cached = any(call["cache_read_tokens"] or call["cache_write_tokens"] for call in every_call)
    cache_columns = ("cache read", "cache write") if cached else ()
    # and the image column only when a call was shown an image or a PDF
    images = any(call.get("image_tokens") for call in every_call)
    image_columns = ("image tok",) if images else ()
    for column in ("task", "step", "model", "purpose", "in", *image_columns, "out",
                   *cache_columns, "cost",
                   *(("cache saved",) if cached else ()), "latency", "replayed", "repeated"):
        calls.add_column(column)
    tools = Table(title="Tool calls")
    for column in ("task", "step", "tool", "result", "ms", "idempotency key"):
        tools.add_column(column)
    for task in receipt["tasks"]:
        for call in task["model_calls"]:
            cache_cells = (_cache_cell(call["cache_read_tokens"], call.get("cache_read_cost_usd")),
                           _cache_cell(call["cache_write_tokens"],
                                       call.get("cache_write_cost_usd"))) if cached else ()
            calls.add_row(safe(task["task_id"]), str(call["step"]), safe(call["model"]),
                          call["purpose"],
                          str(call["input_tokens"]),
                          *((str(call.get("image_tokens") or ""),) if images else ()),
                          str(call["output_tokens"]),
                          *cache_cells, money(call["cost_usd"]),
                          *((_saved(call),) if cached else ()),
                          f"{call['latency_ms']:.1f} ms",
                          "copied (fork)" if call.get("copied") else
                          "yes" if call["replayed"] else "", "yes" if call["repeated"] else "")
        for tool in task["tool_calls"]:
            result = tool["error_kind"] or "error" if tool["is_error"] else "ok"
            tools.add_row(safe(task["task_id"]), str(tool["step"]), safe(tool["name"]), result,
                          f"{tool['duration_ms']:.1f}", safe(tool["idempotency_key"] or ""))
    subagents = Table(title="Cost by subagent")
    for column in ("subagent", "tasks", "model calls", "tokens in/out", "cost"):
        subagents.add_column(column)
    for name, totals in receipt.get("by_subagent", {}).items():
        unknown = totals["cost_unknown_calls"]
        subagents.add_row(safe(name), str(totals["tasks"]), str(totals["model_calls"]),
                          f"{totals['input_tokens']}/{totals['output_tokens']}",
                          f"${totals['cost_usd']:.4f}" + (f" + {unknown} unknown" if unknown
                                                          else ""))
    decided = [(task["task_id"], policy) for task in receipt["tasks"]
               for policy in task.get("policies", ())]
    if not decided:  # the agent lists no policies: no table
        return [calls, tools, subagents]
    policies = Table(title="Policy decisions")
    for column in ("task", "step", "hook", "call", "decision", "plugin", "reason", "replayed"):
        policies.add_column(column)
    for task_id, policy in decided:
        policies.add_row(safe(task_id), str(policy["step"]), policy["hook"],
                         safe(policy["name"] or ""), policy["decision"],
                         safe(policy["plugin"] or ""), safe(_short(policy["reason"])),
                         "yes" if policy["replayed"] else "")
    return [calls, tools, policies, subagents]


class LiveTextPrinter:
    """Prints the pieces of a model's text as they arrive (``TextDelta``s), each call's after
    ``prefix``; ``completed`` then ends the line, and says whether the call's text was shown
    (so the caller does not print it twice).

    Pieces are best-effort: some may arrive after the call's ``ModelCallCompleted`` (they
    travel apart from the log) or never. ``completed`` prints whatever the pieces had not
    shown yet from the recorded text, so the reader always sees the whole text once."""

    def __init__(self, prefix: str = "  ", style: str = "dim") -> None:
        self.prefix = prefix
        self.style = style
        self.open: tuple[str, int] | None = None
        #: what the pieces showed so far, by call
        self.shown: dict[tuple[str, int], str] = {}
        #: calls whose ModelCallCompleted was seen: later pieces of them are dropped
        self.done: set[tuple[str, int]] = set()

    def piece(self, delta: TextDelta) -> None:
        call = (delta.task_id, delta.step)
        if call in self.done:
            return
        self._start(call)
        self.shown[call] = self.shown.get(call, "") + delta.text
        self._print(delta.text)

    def _start(self, call: tuple[str, int]) -> None:
        if call != self.open:
            self.close_line()
            console.print(self.prefix, end="")
            self.open = call

    def _print(self, text: str) -> None:
        # a model's text may hold escape sequences: printed as text, never obeyed (a sequence
        # split across pieces is harmless too: its ESC is dropped with the control characters)
        console.print(Text(plain(text), style=self.style), end="", soft_wrap=True)

    def close_line(self) -> None:
        if self.open is not None:
            console.print()
            self.open = None

    def completed(self, event: Event) -> bool:
        """For any event: end a line of text in progress; for a ``ModelCallCompleted`` of the
        agent's own (no ``purpose``), show its recorded text: the rest of it after the pieces
        already shown, or all of it on a line of its own if the pieces showed none or did not
        match. Says whether the event was a call whose text this printer now has shown."""
        if event.type != ev.MODEL_CALL_COMPLETED:
            self.close_line()
            return False
        call = (event.stream.removeprefix("task:"), int(event.data["step"]))
        self.done.add(call)
        shown = self.shown.pop(call, "")
        text = str(event.data.get("text") or "")
        if event.data.get("purpose") is not None and not shown:
            self.close_line()
            return False
        if not text.startswith(shown):
            self.close_line()  # the pieces went astray: the recorded text, whole
            shown = ""
        if len(text) > len(shown):
            self._start(call)
            self._print(text[len(shown):])
        self.close_line()
        return True
