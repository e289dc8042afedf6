"""``toren eval run|resume|report|compare|list``: datasets run against a version of an agent,
every case a durable run, graded, reported and compared (docs/guides/evals.md)."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from toren.cli.common import (
    DirsOption,
    on_database,
    run_interruptible,
    stop_runtime,
)
from toren.cli.operator import UrlOption
from toren.cli.output import JSON_OPTION_HELP, console, err_console, print_json, print_table, safe
from toren.core.actors import cli_actor
from toren.errors import ConfigError

if TYPE_CHECKING:
    from toren.core.evals import EvalRecord
    from toren.host.runtime import Runtime
    from toren.host.services.evals import Progress

app = typer.Typer(help="Evals: run a dataset of cases against a version of an agent (every "
                       "case a durable run), then report and compare pass rates, cost and "
                       "latency (run, resume, report, compare, list).", no_args_is_help=True)

#: The exit status when the pass rate is under ``--fail-under`` (errors exit 1).
EXIT_UNDER = 3

JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
FailUnder = Annotated[float | None, typer.Option(
    "--fail-under", min=0.0, max=1.0, metavar="RATE", envvar="TOREN_EVAL_FAIL_UNDER",
    help=f"Exit with status {EXIT_UNDER} when the pass rate is under RATE (0 to 1), for CI.")]
EvalArgument = Annotated[str, typer.Argument(metavar="EVAL_ID", help="The eval's id.")]


@app.command("run")
def run(
    dataset: Annotated[Path | None, typer.Argument(
        metavar="[DATASET]", help="A .yaml/.jsonl file of cases, or a directory of them "
                                  "(or --from-runs).")] = None,
    agent: Annotated[str, typer.Option("--agent", "-a", metavar="NAME",
                                       help="The agent to evaluate.")] = "",
    dirs: DirsOption = None,
    version: Annotated[str | None, typer.Option(
        metavar="HASH",
        help="Run a version kept in the database (its hash, or the start of it; see `toren "
             "agents versions NAME`) instead of the directory's definition.")] = None,
    model: Annotated[str | None, typer.Option(
        metavar="MODEL", help="Run the cases with this model instead of the agent's (a "
                              "definition of its own: another version hash).")] = None,
    repeat: Annotated[int, typer.Option(
        min=1, max=100, metavar="K", help="Run every case K times (flaky cases show).")] = 1,
    concurrency: Annotated[int, typer.Option(
        min=1, max=64, metavar="N", help="Case runs at a time.")] = 4,
    grader_model: Annotated[str | None, typer.Option(
        metavar="MODEL", envvar="TOREN_EVAL_GRADER_MODEL",
        help="The model that grades rubric: graders without a model: of their own.")] = None,
    evals: Annotated[Path | None, typer.Option(
        "--evals", metavar="FILE",
        help="The evals.py whose functions grade function: graders (default: evals.py next "
             "to the dataset, else in the agent's directory).")] = None,
    from_runs: Annotated[list[str] | None, typer.Option(
        "--from-runs", metavar="FILTERS",
        help="Make the dataset from recorded runs of the agent instead of a file: "
             "key=value filters (repeatable, or several in one value): status= (default "
             "completed), version=, schedule=, q= (words). Each run's input is a case, its "
             "output the expected answer.")] = None,
    since: Annotated[str | None, typer.Option(
        metavar="WHEN", help="With --from-runs: runs created since WHEN (7d, 12h, 30m, or an "
                             "ISO 8601 date or time).")] = None,
    until: Annotated[str | None, typer.Option(
        metavar="WHEN", help="With --from-runs: runs created before WHEN.")] = None,
    runs_limit: Annotated[int, typer.Option(
        "--runs-limit", min=1, max=10_000, metavar="N",
        help="With --from-runs: at most N runs, newest first.")] = 50,
    graders: Annotated[Path | None, typer.Option(
        "--graders", metavar="FILE",
        help="With --from-runs: a YAML list of graders for every case (default: exact, the "
             "recorded output).")] = None,
    fork_at: Annotated[int | None, typer.Option(
        "--fork-at", min=0, metavar="N",
        help="With --from-runs: replay each run as a fork at step N (its first N steps "
             "copied, free) on the evaluated version, instead of a fresh run of its input.")
    ] = None,
    fail_under: FailUnder = None,
    as_json: JsonOption = False,
) -> None:
    """Run every case of DATASET as a durable run of AGENT, grade it, and print the report.
    A stopped eval (Ctrl-C, a crash, SIGKILL) goes on with `toren eval resume EVAL_ID`:
    cases already run are never run or paid again."""
    from toren.agents.datasets import load_dataset, load_graders

    if not agent:
        raise ConfigError("--agent is required: the agent to evaluate")
    if version is not None and dirs and len(dirs) > 1:
        raise ConfigError("--version loads the agent from the database: give at most one --dir")
    if (dataset is None) == (from_runs is None):
        raise ConfigError("give a DATASET file or directory, or --from-runs FILTERS (one of "
                          "the two)")
    if from_runs is None and (since or until or graders or fork_at is not None):
        raise ConfigError("--since, --until, --graders and --fork-at go with --from-runs")
    runs: dict[str, Any] | None = None
    found = None
    if dataset is not None:
        found = load_dataset(dataset)  # a bad dataset fails before the database starts
    else:
        assert from_runs is not None
        label = " ".join([*from_runs, *(f"--{name} {value}" for name, value in
                                        (("since", since), ("until", until)) if value)])
        runs_filters(from_runs, agent, since, until)  # wrong words fail before the database
        runs = {"filters": _filter_words(from_runs), "since": since, "until": until,
                "limit": runs_limit, "graders": load_graders(graders) if graders else [],
                "fork_at": fork_at, "label": label}
    if evals is not None and not evals.is_file():
        raise ConfigError(f"--evals {evals}: no such file")
    with ExitStack() as stack:
        root = Path(tempfile.mkdtemp(prefix="toren-eval-"))
        stack.callback(shutil.rmtree, root, True)
        report = run_interruptible(_run(found, dataset, agent, dirs, version, model, root,
                                        repeat=repeat, concurrency=concurrency,
                                        grader_model=grader_model, evals=evals,
                                        as_json=as_json, runs=runs))
    _finish(report, fail_under, as_json)


def runs_filters(values: list[str], agent: str, since: str | None,
                 until: str | None) -> dict[str, str]:
    """``--from-runs`` values (``key=value`` words), ``--since`` and ``--until`` as the
    search's parameters (``recorded_runs_filters``, which ``POST /evals`` uses too);
    ``ConfigError`` saying which word is wrong."""
    from toren.host.services.evals import recorded_runs_filters

    return recorded_runs_filters(_filter_words(values), agent, since, until)


def _filter_words(values: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for value in values:
        for word in value.split():
            key, sep, text = word.partition("=")
            if not sep or not text:
                raise ConfigError(f"--from-runs {word!r}: give key=value filters such as "
                                  "status=completed version=1.0")
            found[key] = text
    return found


async def _run(found: Any, dataset_path: Path | None, agent: str, dirs: list[Path] | None,
               version: str | None, model: str | None, root: Path, *, repeat: int,
               concurrency: int, grader_model: str | None, evals: Path | None,
               as_json: bool, runs: dict[str, Any] | None = None) -> dict[str, Any]:
    if version is not None:
        directory = await _stored_version(agent, version, root)
        source = f"--version {version}"
    else:
        directory = _agent_directory(dirs, agent)
        source = f"--dir {directory}"
    if model is not None:
        from toren.agents.candidates import with_model

        directory = with_model(directory, model, root / "with-model")
        source += f" --model {model}"
    functions = evals or (_default_functions(dataset_path, directory, version is None)
                          if dataset_path is not None else None)
    runtime = _serving(directory, agent)
    await runtime.start(workers=True)
    try:
        fork_at = None
        if runs is not None:
            found = await runtime.evals.recorded_runs(
                agent, runs["filters"], since=runs["since"], until=runs["until"],
                limit=runs["limit"], graders=runs["graders"], label=runs["label"])
            fork_at = runs["fork_at"]
            source += " --from-runs" + (f" --fork-at {fork_at}" if fork_at is not None else "")
        async with runtime.audit.recording(cli_actor(), "eval.start", "cli",
                                           agent=agent) as note:
            record = await runtime.evals.create(
                found, agent, model=model, repeat=repeat, concurrency=concurrency,
                grader_model=grader_model, source=source,
                functions=str(functions.resolve()) if functions else None, fork_at=fork_at)
            note.target = record.id
        return await _work(runtime, record, as_json)
    finally:
        await stop_runtime(runtime, quiet=as_json)


@app.command("resume")
def resume(eval_id: EvalArgument, fail_under: FailUnder = None,
           as_json: JsonOption = False) -> None:
    """Go on with an eval that stopped: the cases without a grade are run (a case whose run
    exists continues that run) and graded, on the eval's version, loaded from the
    database."""
    with ExitStack() as stack:
        root = Path(tempfile.mkdtemp(prefix="toren-eval-"))
        stack.callback(shutil.rmtree, root, True)
        report = run_interruptible(_resume(eval_id, root, as_json))
    _finish(report, fail_under, as_json)


async def _resume(eval_id: str, root: Path, as_json: bool) -> dict[str, Any]:
    record = await _read(lambda runtime: runtime.evals.get(eval_id))
    directory = await _stored_version(record.agent, record.version, root)
    runtime = _serving(directory, record.agent)
    await runtime.start(workers=True)
    try:
        async with runtime.audit.recording(cli_actor(), "eval.resume", "cli",
                                           agent=record.agent, target=record.id):
            pass  # recorded when the eval goes on, not when it ends (it may take hours)
        return await _work(runtime, record, as_json)
    finally:
        await stop_runtime(runtime, quiet=as_json)


async def _work(runtime: Runtime, record: EvalRecord, as_json: bool) -> dict[str, Any]:
    if as_json:
        return await runtime.evals.work(record.id)
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
    from rich.progress import Progress as ProgressBar

    err_console.print(f"eval {record.id}: {safe(record.dataset.name)} "
                      f"({len(record.dataset.cases)} cases x {record.repeat}) against "
                      f"{safe(record.agent)} {record.version[:12]}"
                      + (f" ({safe(record.human_version)})" if record.human_version else "")
                      + (f" with {safe(record.model)}" if record.model else ""))
    err_console.print(f"  stopped? go on with: toren eval resume {record.id}")
    with ProgressBar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[passed]} passed, {task.fields[running]} running"),
                  console=err_console, transient=False) as bar:
        task = bar.add_task("cases", total=len(record.dataset.cases) * record.repeat,
                            passed=0, running=0)

        def tell(state: Progress) -> None:
            bar.update(task, completed=state.graded, passed=state.passed,
                       running=state.running)
            if state.last is not None and state.last.grade is not None:
                mark = ("[green]pass[/]" if state.last.grade.get("passed")
                        else "[red]FAIL[/]")
                bar.console.print(f"  {mark} {safe(state.last.case_id)}"
                                  + (f" #{state.last.repeat}" if record.repeat > 1 else ""))

        return await runtime.evals.work(record.id, progress=tell)


def _finish(report: dict[str, Any], fail_under: float | None, as_json: bool) -> None:
    if as_json:
        print_json(report)
    else:
        _print_report(report)
    rate = report["totals"]["pass_rate"]
    if fail_under is not None and rate < fail_under:
        if not as_json:
            err_console.print(f"[red]pass rate {rate:.1%} is under --fail-under "
                              f"{fail_under:.1%}[/]")
        raise typer.Exit(EXIT_UNDER)


@app.command("report")
def report(eval_id: EvalArgument, fail_under: FailUnder = None, url: UrlOption = None,
           as_json: JsonOption = False) -> None:
    """The eval's pass rate, by tag and by case (flaky cases across repeats), and its runs'
    cost and latency."""
    found = run_interruptible(
        _remote(url, lambda client: client.eval_report(eval_id)) if url else
        _read(lambda runtime: runtime.evals.report(eval_id)))
    _finish(found, fail_under, as_json)


@app.command("compare")
def compare(
    eval_a: Annotated[str, typer.Argument(metavar="A", help="The baseline eval's id.")],
    eval_b: Annotated[str, typer.Argument(metavar="B", help="The candidate eval's id.")],
    fail_on_broken: Annotated[bool, typer.Option(
        "--fail-on-broken", help=f"Exit with status {EXIT_UNDER} when a case that passed in "
                                 "A fails in B.")] = False,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """What changed from eval A to eval B: pass rates, cost, latency, and the cases fixed,
    broken and flaky."""
    found = run_interruptible(
        _remote(url, lambda client: client.compare_evals(eval_a, eval_b)) if url else
        _read(lambda runtime: runtime.evals.compare(eval_a, eval_b)))
    if as_json:
        print_json(found)
    else:
        _print_compare(found)
    if fail_on_broken and found["changes"]["broken"]:
        raise typer.Exit(EXIT_UNDER)


@app.command("list")
def list_evals(
    agent: Annotated[str | None, typer.Option("--agent", "-a", metavar="NAME",
                                              help="Only this agent's evals.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many.")] = 50,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Evals, newest first."""

    async def local(runtime: Runtime) -> list[dict[str, Any]]:
        return [record.to_json() for record in await runtime.evals.list(agent=agent,
                                                                        limit=limit)]

    async def remote(client: Any) -> list[dict[str, Any]]:
        return [dict(e) for e in (await client.list_evals(agent=agent, limit=limit))["evals"]]

    found = run_interruptible(_remote(url, remote) if url else _read(local))
    if as_json:
        print_json({"evals": found})
        return
    if not found:
        console.print("no evals")
        return
    table = Table("id", "agent", "dataset", "version", "model", "repeat", "status", "created")
    for record in found:
        table.add_row(record["id"], safe(record["agent"]), safe(record["dataset"]["name"]),
                      record["version"][:12] + (f" ({safe(record['human_version'])})"
                                                if record["human_version"] else ""),
                      safe(record["model"] or ""), str(record["repeat"]), record["status"],
                      str(record["created_at"])[:19].replace("T", " "))
    print_table(table)


# -- helpers -------------------------------------------------------------------------------------


async def _remote(url: str, action: Any) -> Any:
    """``action(client)`` on the deployment at ``url`` (with ``TOREN_API_KEY``)."""
    from toren.cli.operator import api_url
    from toren.client import TorenClient

    async with TorenClient(api_url(url)) as client:
        return await action(client)


async def _read(action: Any) -> Any:
    """``action(runtime)`` on this machine's database, serving no agent."""
    return await on_database(action)


def _agent_directory(dirs: list[Path] | None, agent: str) -> Path:
    """The directory of ``agent`` among ``dirs`` (loaded and checked, as ``toren run`` does;
    the eval then serves that one directory only: no other agent's schedules fire)."""
    from toren.cli.common import load_runtime

    return load_runtime(dirs, agent).agents[agent].directory


def _serving(directory: Path, agent: str) -> Runtime:
    from toren.cli.common import load_runtime

    return load_runtime([directory], agent)


async def _stored_version(agent: str, version: str, root: Path) -> Path:
    """Version ``version`` (a hash, or the start of one) of ``agent``, written under
    ``root`` as an agent directory."""
    from toren.agents.versions import materialize

    stored = await _read(lambda runtime: runtime.evals.stored_version(agent, version))
    return materialize(stored, root / "versions", agent)


def _default_functions(dataset: Path, directory: Path, use_directory: bool) -> Path | None:
    beside = (dataset if dataset.is_dir() else dataset.parent) / "evals.py"
    if beside.is_file():
        return beside
    in_agent = directory / "evals.py"
    return in_agent if use_directory and in_agent.is_file() else None


def _money(value: float) -> str:
    return f"${value:.4f}" if value < 100 else f"${value:,.2f}"


def _print_report(found: dict[str, Any]) -> None:
    record, totals = found["eval"], found["totals"]
    console.print(f"eval {record['id']}  {safe(record['agent'])} {record['version'][:12]}"
                  + (f" ({safe(record['human_version'])})" if record["human_version"] else "")
                  + (f" with {safe(record['model'])}" if record["model"] else "")
                  + f"  dataset {safe(record['dataset']['name'])} "
                    f"{record['dataset']['hash'][:12]}")
    table = Table("case", "passed", "runs", "cost", "failures")
    for case in found["cases"]:
        mark = ("[yellow]flaky[/]" if case["flaky"] else
                "[green]pass[/]" if case["graded"] and case["passed"] == case["graded"]
                else "[red]FAIL[/]" if case["graded"] else "—")
        table.add_row(safe(case["case_id"]), f"{mark} {case['passed']}/{case['graded']}",
                      str(case["runs"]), _money(case["cost_usd"]),
                      safe("; ".join(case["failures"])[:160]))
    print_table(table)
    cost, latency = found["cost_usd"], found["latency_s"]
    console.print(f"pass rate {totals['pass_rate']:.1%} ({totals['passed']}/"
                  f"{totals['graded']} case runs; {totals['flaky']} flaky)"
                  + ("" if totals["complete"] else
                     f"  [yellow]incomplete: {totals['graded']} of {totals['case_runs']} "
                     "graded[/]"))
    console.print(f"cost {_money(cost['total'])} (p50 {_money(cost['p50'])}, p90 "
                  f"{_money(cost['p90'])} per run); graders {_money(found['grader_cost_usd'])}")
    console.print(f"latency p50 {latency['p50']:.2f}s, p90 {latency['p90']:.2f}s, max "
                  f"{latency['max']:.2f}s")
    for tag, counts in found["tags"].items():
        console.print(f"  tag {safe(tag)}: {counts['pass_rate']:.1%} ({counts['passed']}/"
                      f"{counts['graded']})")


def _print_compare(found: dict[str, Any]) -> None:
    a, b = found["a"], found["b"]

    def name(record: dict[str, Any]) -> str:
        return (f"{record['id'][:8]} {record['version'][:12]}"
                + (f" ({safe(record['human_version'])})" if record["human_version"] else "")
                + (f" {safe(record['model'])}" if record["model"] else ""))

    console.print(f"A {name(a)}\nB {name(b)}")
    if not found["same_dataset"]:
        console.print("[yellow]the datasets differ: only the cases both have are compared[/]")
    rate = found["pass_rate"]
    console.print(f"pass rate {rate['a']:.1%} -> {rate['b']:.1%} ({rate['delta']:+.1%})")
    cost = found["cost_usd"]
    console.print(f"cost {_money(cost['a']['total'])} -> {_money(cost['b']['total'])}; "
                  f"latency p50 {found['latency_s']['a']['p50']:.2f}s -> "
                  f"{found['latency_s']['b']['p50']:.2f}s")
    changes = found["changes"]
    console.print(f"fixed {changes['fixed']}, broken {changes['broken']}, flaky "
                  f"{changes['flaky']}, unchanged {changes['same']}")
    table = Table("case", "change", "A", "B", "B's failures")
    for row in found["cases"]:
        if row["change"] == "same":
            continue
        style = {"fixed": "green", "broken": "red", "flaky": "yellow"}.get(row["change"], "")
        table.add_row(safe(row["case_id"]),
                      f"[{style}]{row['change']}[/]" if style else row["change"],
                      f"{row['a']['passed']}/{row['a']['graded']}",
                      f"{row['b']['passed']}/{row['b']['graded']}",
                      safe("; ".join(row["b"]["failures"])[:120]))
    if table.row_count:
        print_table(table)
    for side in ("a", "b"):
        only = found[f"only_in_{side}"]
        if only:
            console.print(f"only in {side.upper()}: {safe(', '.join(only))}")
