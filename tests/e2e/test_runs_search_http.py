"""Finding runs over HTTP (issue 43 §1): words in the input or output, an agent version, a
creation date range, an order (by cost, model calls, steps, duration), pages of any order,
and each run's totals equal to what its receipt says; every answer checked against the
OpenAPI document, and what a hostile query string gets."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest

from tests.conftest import TorenCli, wait_until
from tests.e2e.test_http_api import TOOLS, call, conforms, finished
from toren.server.cursors import encode_page_cursor
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(180)
COST = 0.25  # of each scripted model call


@pytest.fixture
def url(database_url: str, start_toren, tmp_path: Path) -> str:
    """``toren dev`` serving ``crew`` (a tool: two model calls a run) and ``plain`` (one)."""
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    write_agent_dir(tmp_path / "crews", "plain", version="2.1.0")
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_SCRIPTED_COST_USD": str(COST)})
    return dev.next_json()["url"]


def runs(url: str, **query: str) -> list[dict[str, Any]]:
    status, page, _ = call(f"{url}/runs?{urlencode(query)}")
    assert status == 200, page
    conforms("RunList", page)
    return page["runs"]


def ids(url: str, **query: str) -> list[str]:
    return [run["id"] for run in runs(url, **query)]


def start(url: str, agent: str, text: str) -> str:
    run_id = call(f"{url}/runs", "POST", {"agent": agent, "input": text})[1]["id"]
    assert wait_until(lambda: finished(url, run_id), 60)
    return run_id


def test_runs_are_found_by_words_version_and_dates_and_sorted_by_totals(url: str) -> None:
    zebra_crew = start(url, "crew", "the zebra crossing")
    alpha = start(url, "plain", "alpha beta")
    zebra_plain = start(url, "plain", "Gamma ZEBRA\nstripes")
    fork = call(f"{url}/runs/{zebra_crew}/fork", "POST", {"at_step": 1})[1]["run"]["id"]
    assert wait_until(lambda: finished(url, fork), 60)

    # words, in the input or the output, whole and case-insensitive, all of them
    assert set(ids(url, q="zebra")) == {zebra_crew, zebra_plain, fork}
    assert ids(url, q="zebra stripes") == [zebra_plain]  # after a newline in the JSON text
    assert ids(url, q='"gamma zebra"') == [zebra_plain]
    assert set(ids(url, q="zebra -stripes")) == {zebra_crew, fork}
    assert set(ids(url, q="facts", agent="crew")) == {zebra_crew, fork}  # the tool's output
    assert ids(url, q="zeb") == []

    # each run's totals are its receipt's: a fork's copied call counts, at no cost
    listed = runs(url)
    assert {run["id"] for run in listed} == {zebra_crew, alpha, zebra_plain, fork}
    for run in listed:
        receipt = call(f"{url}/runs/{run['id']}/receipt")[1]
        assert run["totals"] == {
            "model_calls": receipt["totals"]["model_calls"],
            "steps": sum(task["steps"] for task in receipt["tasks"]),
            "cost_usd": receipt["totals"]["cost_usd"],
            "cost_unknown_calls": receipt["totals"]["cost_unknown_calls"]}, run["id"]
    totals = {run["id"]: run["totals"] for run in listed}
    assert totals[zebra_crew] == {"model_calls": 2, "steps": 2, "cost_usd": 2 * COST,
                                  "cost_unknown_calls": 0}
    assert totals[alpha]["model_calls"] == 1 and totals[alpha]["cost_usd"] == COST
    assert totals[fork]["model_calls"] == 2 and totals[fork]["cost_usd"] == COST

    # sorts: largest first with a leading -, ties newest first
    assert ids(url, sort="-cost")[0] == zebra_crew
    assert ids(url, sort="-model_calls")[:2] == [fork, zebra_crew]
    assert ids(url, sort="model_calls")[:2] == [zebra_plain, alpha]
    assert ids(url, sort="created") == [zebra_crew, alpha, zebra_plain, fork]
    durations = [datetime.fromisoformat(r["finished_at"]) - datetime.fromisoformat(
        r["created_at"]) for r in runs(url, sort="-duration")]
    assert durations == sorted(durations, reverse=True)
    # with a search: the words, then the order
    assert ids(url, q="zebra", sort="cost") == [fork, zebra_plain, zebra_crew]  # ties: newest

    # every order pages through every run once, a page at a time
    for sort in ("-cost", "steps", "-created", "duration"):
        seen: list[str] = []
        cursor = ""
        while True:
            status, page, _ = call(f"{url}/runs?sort={sort}&limit=1"
                                   + (f"&cursor={cursor}" if cursor else ""))
            assert status == 200, page
            seen += [run["id"] for run in page["runs"]]
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert sorted(seen) == sorted(totals), sort

    # versions: a hash prefix of 4 characters or more, or agent.yaml's version:
    crew_version = call(f"{url}/runs/{zebra_crew}")[1]["agent_version"]
    assert set(ids(url, version=crew_version[:8])) == {zebra_crew, fork}
    assert set(ids(url, version="2.1.0")) == {alpha, zebra_plain}
    assert ids(url, version=crew_version[:3]) == []  # too short to be a prefix

    # dates: since included, until not; a bare date is a whole UTC day
    today = datetime.now(UTC).date()
    assert len(ids(url, since=today.isoformat())) == 4
    assert len(ids(url, until=today.isoformat())) == 4  # until the end of today
    assert ids(url, since=(today + timedelta(days=1)).isoformat()) == []
    assert ids(url, until=(today - timedelta(days=1)).isoformat()) == []
    now = datetime.now(UTC).isoformat()
    assert ids(url, since=now) == [] and len(ids(url, until=now)) == 4
    assert ids(url, since=now, q="zebra", agent="crew") == []


@pytest.mark.parametrize(("query", "code"), [
    ("q=" + quote("a\x00b"), "invalid_query"),
    ("q=" + "x" * 501, "invalid_query"),
    ("version=%25%25%25", "invalid_version"),
    ("version=" + quote("<script>"), "invalid_version"),
    ("since=yesterday", "invalid_since"),
    ("until=2026-13-45", "invalid_until"),
    ("since=9999-12-31T00:00:00Z&until=2026-01-01", "invalid_range"),
    ("sort=bogus", "invalid_sort"),
    ("sort=--cost", "invalid_sort"),
    ("sort=-cost&cursor=" + encode_page_cursor(datetime.now(UTC),
                                               "00000000-0000-0000-0000-000000000000"),
     "invalid_cursor"),
    ("cursor=eyJydW5zX29mZnNldCI6LTF9", "invalid_cursor"),  # {"runs_offset":-1}
])
def test_a_bad_search_gets_a_clear_400(url: str, query: str, code: str) -> None:
    status, body, _ = call(f"{url}/runs?{query}")
    assert (status, body["error"]["code"]) == (400, code), body


def test_search_syntax_and_markup_in_words_are_only_words(url: str) -> None:
    marked = start(url, "plain", "<script>window.pwned=1</script> & | ! :* 'quoted")
    for words in ("<script>", "& | ! :*", "'", "window.pwned=1", "(((", "-", '"'):
        status, page, _ = call(f"{url}/runs?q={quote(words)}")
        assert status == 200, (words, page)
    assert ids(url, q="quoted") == [marked]
    assert ids(url, q="script") == []  # markup tags (and a script's body) are not words
    assert ids(url, q="9999-12-31", until="9999-12-31") == []


def test_jobs_list_finds_and_sorts_on_this_machine_and_over_http(
        url: str, database_url: str, toren_cli: TorenCli) -> None:
    cheap = start(url, "plain", "a cheap zebra")
    dear = start(url, "crew", "a dear zebra")
    start(url, "plain", "no match here")
    for where in ({"DATABASE_URL": database_url}, {"TOREN_URL": url}):
        listed = json.loads(toren_cli("jobs", "list", "--find", "zebra", "--sort", "-cost",
                                      "--since", "1d", "--json", env=where).stdout)["runs"]
        assert [run["id"] for run in listed] == [dear, cheap], where
        assert listed[0]["totals"]["cost_usd"] == 2 * COST
        text = toren_cli("jobs", "list", "--find", "zebra", "--sort", "cost", env=where).stdout
        assert text.index(cheap[:8]) < text.index(dear[:8]) and "$0.5000" in text
        refused = toren_cli("jobs", "list", "--sort", "price", env=where)
        assert refused.returncode != 0 and "sort must be one of" in refused.stderr
        none = toren_cli("jobs", "list", "--until", "30d", env=where)
        assert "No runs matching the filters" in none.stderr
