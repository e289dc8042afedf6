"""``toren costs``: what model calls cost per day or week, per agent and model, with the
agents' budgets (``GET /costs``; the console's Costs page draws the same report)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.operator import UrlOption, operate
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.cli.render import money
from toren.core.costs import costs_window

#: The widest bar of the chart, in characters.
_BAR = 40


def costs(
    period: Annotated[str, typer.Option(
        metavar="day|week", help="Cut the range into UTC days or ISO weeks.")] = "day",
    since: Annotated[str | None, typer.Option(
        metavar="DATE", help="The range's first day (ISO 8601; default: 30 days, or 12 weeks, "
                             "before --until).")] = None,
    until: Annotated[str | None, typer.Option(
        metavar="DATE", help="The range's last day, included (ISO 8601; default: "
                             "today).")] = None,
    agent: Annotated[str | None, typer.Option(metavar="NAME", help="Only this agent's.")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
    url: UrlOption = None,
) -> None:
    """What the agents' model calls cost per day or week: a bar per period, the calls, tokens
    and cost per agent and model, and each agent's budgets with today's use (through --url:
    the server's agents and their limits)."""
    costs_window(period, since, until)  # a malformed range fails here, before anything
    report: dict[str, Any] = operate(lambda op: op.costs(
        period=period, since=since, until=until, agent=agent), url=url)
    if as_json:
        print_json(report)
        return
    totals = report["totals"]
    console.print(f"{money(totals['cost_usd'])} for {totals['calls']:,} model calls "
                  f"({totals['input_tokens']:,} input and {totals['output_tokens']:,} output "
                  f"tokens), {report['since'][:10]} to {report['until'][:10]} (UTC, end "
                  "excluded)" + (f"; {totals['unknown_cost_calls']:,} calls had no known price"
                                 if totals["unknown_cost_calls"] else ""))
    top = max((bucket["cost_usd"] for bucket in report["buckets"]), default=0.0)
    chart = Table(box=None, show_header=False, pad_edge=False)
    for name in ("period", "cost", "bar"):
        chart.add_column(name, justify="right" if name == "cost" else "left", no_wrap=True)
    for bucket in report["buckets"]:
        width = round(_BAR * bucket["cost_usd"] / top) if top > 0 else 0
        label = ("week of " if report["period"] == "week" else "") + bucket["start"][:10]
        chart.add_row(label, money(bucket["cost_usd"]), "█" * width)
    print_table(chart)
    table = Table()
    for column in ("agent", "model", "calls", "input tokens", "output tokens", "cost"):
        table.add_column(column, justify="right" if column not in ("agent", "model")
                         else "left")
    for each in report["agents"]:
        for model in each["models"]:
            unknown = model["unknown_cost_calls"]
            table.add_row(safe(each["agent"]), safe(model["model"]), f"{model['calls']:,}",
                          f"{model['input_tokens']:,}", f"{model['output_tokens']:,}",
                          money(model["cost_usd"]) + (f" + {unknown:,} unpriced"
                                                      if unknown else ""))
    if table.rows:
        print_table(table)
    for budget in report["budgets"]:
        today = budget["today"]
        parts = []
        if budget["daily_budget_usd"] is not None and today:
            share = (today["spent_usd"] / budget["daily_budget_usd"]
                     if budget["daily_budget_usd"] else 1.0)
            parts.append(f"today {money(today['spent_usd'])} of "
                         f"{money(budget['daily_budget_usd'])} daily budget ({share:.0%})")
        elif today:
            parts.append(f"today {money(today['spent_usd'])}, no daily budget")
        if budget["run_budget_usd"] is not None:
            parts.append(f"at most {money(budget['run_budget_usd'])} per run")
        console.print(f"{safe(budget['agent'])}: " + ("; ".join(parts) or "no budget known"))
