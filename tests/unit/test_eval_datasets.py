"""Eval datasets read from files: the same cases hash the same in any layout, and every
mistake is an ``EvalDatasetError`` naming the file, the line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toren.agents.datasets import load_dataset
from toren.errors import EvalDatasetError

YAML = """\
name: geo
graders:
  - max_steps: 5
cases:
  - id: paris
    input: "Capital of France?"
    expected: Paris
    tags: [geo, easy]
  - input: {question: "Largest ocean?"}
    graders:
      - contains: [Pacific]
      - tools_called: web_search
    rubric: "Names the Pacific Ocean"
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_yaml_file_gives_cases_with_their_graders(tmp_path: Path) -> None:
    dataset = load_dataset(write(tmp_path / "geo.yaml", YAML))
    assert dataset.name == "geo"
    paris, ocean = dataset.cases
    assert paris.id == "paris" and paris.tags == ("geo", "easy")
    # expected: adds an exact grader after the dataset's own
    assert [g.to_json() for g in paris.graders] == [{"exact": "Paris"}, {"max_steps": 5}]
    assert ocean.id.startswith("c") and len(ocean.id) == 11  # named by its input
    assert [g.kind for g in ocean.graders] == ["max_steps", "contains", "tools_called",
                                               "rubric"]
    assert ocean.source == f"{tmp_path / 'geo.yaml'}:9"


def test_the_hash_is_the_content_not_the_layout(tmp_path: Path) -> None:
    yaml_file = write(tmp_path / "a.yaml", YAML)
    cases = load_dataset(yaml_file).cases
    folder = tmp_path / "folder"
    folder.mkdir()
    write(folder / "cases.jsonl", "\n".join(json.dumps(c.content()) for c in cases) + "\n\n")
    again = load_dataset(folder)
    assert again.hash == load_dataset(yaml_file).hash
    assert again.name == "folder"
    changed = write(tmp_path / "b.yaml", YAML.replace("Paris", "Lyon"))
    assert load_dataset(changed).hash != again.hash


@pytest.mark.parametrize(("text", "where", "words"), [
    ("cases:\n  - input: hi\n    expect: x\n", ":3", "cases[0].expect: unknown field 'expect'"),
    ("cases:\n  - id: a\n", ":2", "cases[0] has no input:"),
    ("cases:\n  - input: ''\n", ":2", "cases[0].input must be non-empty"),
    ("cases:\n  - input: hi\n    graders:\n      - regex: '(['\n", ":4",
     "cases[0].graders[0].regex is not a regular expression"),
    ("cases:\n  - input: hi\n    graders:\n      - max_steps: -1\n", ":4",
     "must be a whole number"),
    ("cases:\n  - input: hi\n    graders:\n      - contain: x\n", ":4",
     "must name one grader, one of exact"),
    ("cases:\n  - input: hi\n    graders:\n      - schema: {type: nope}\n", ":4",
     "is not a valid JSON Schema"),
    ("cases:\n  - input: hi\n    graders:\n      - function: 'not a name'\n", ":4",
     "is not a Python function name"),
    ("cases:\n  - input: hi\n    graders:\n      - status: done\n", ":4",
     "'done' is not a run outcome"),
    ("cases:\n  - input: a\n    id: x\n  - input: b\n    id: x\n", ":4",
     "case id 'x' is used twice (also at"),
    ("cases:\n  - input: a\n    id: 'bad id'\n", ":3", "is not a case id"),
    ("nmae: x\ncases: []\n", ":1", "unknown field 'nmae'"),
    ("cases: []\n", "", "the dataset has no cases"),
    ("cases:\n  - input: hi\n  - input: hi\n", "", "two cases with the same input need ids"),
    ("key: [unclosed\n", ":2", "invalid YAML"),
])
def test_a_bad_yaml_dataset_names_the_file_line_and_field(tmp_path: Path, text: str,
                                                          where: str, words: str) -> None:
    path = write(tmp_path / "bad.yaml", text)
    with pytest.raises(EvalDatasetError) as raised:
        load_dataset(path)
    assert raised.value.message.startswith(f"{path}{where}") or "used twice" in words \
        or "same input" in words
    assert words in raised.value.message


@pytest.mark.parametrize(("text", "words"), [
    ('{"input": "a"}\n{"input": "b",}\n', "bad.jsonl:2: not JSON"),
    ('{"input": "a"}\n\n[1, 2]\n', "bad.jsonl:3: a case must be a mapping"),
    ('{"input": NaN}\n', "bad.jsonl:1: not JSON: NaN is not a JSON value"),
])
def test_a_bad_jsonl_dataset_names_the_line(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(EvalDatasetError, match=words):
        load_dataset(write(tmp_path / "bad.jsonl", text))


def test_paths_that_are_not_datasets(tmp_path: Path) -> None:
    with pytest.raises(EvalDatasetError, match="no such file or directory"):
        load_dataset(tmp_path / "missing.yaml")
    with pytest.raises(EvalDatasetError, match=r"a \.yaml, \.yml or \.jsonl file"):
        load_dataset(write(tmp_path / "cases.csv", "input\nhi\n"))
    with pytest.raises(EvalDatasetError, match="holds no case files"):
        load_dataset(tmp_path)
    with pytest.raises(EvalDatasetError, match="not UTF-8"):
        load_dataset(write(tmp_path / "x.jsonl", "") if False else _binary(tmp_path))


def _binary(tmp_path: Path) -> Path:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b'{"input": "\xff"}\n')
    return path


def test_from_runs_filters_and_moments() -> None:
    from datetime import UTC, datetime, timedelta

    from toren.cli.evals import runs_filters
    from toren.errors import ConfigError

    found = runs_filters(["status=failed version=1.0", "q=tides"], "crew", "7d", "2026-12-01")
    assert {k: v for k, v in found.items() if k != "since"} == {
        "status": "failed", "version": "1.0", "q": "tides", "until": "2026-12-01"}
    since = datetime.fromisoformat(found["since"])
    assert abs(datetime.now(UTC) - timedelta(days=7) - since) < timedelta(seconds=5)
    assert runs_filters(["agent=crew"], "crew", None, None) == {}
    for words, message in (("status", "give key=value filters"),
                           ("colour=red", "unknown filter 'colour'"),
                           ("agent=other", "the runs must be of the agent evaluated")):
        with pytest.raises(ConfigError, match=message):
            runs_filters([words], "crew", None, None)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "--agent is required"),
    ({"agent": "crew"}, "give a DATASET file or directory, or --from-runs"),
    ({"agent": "crew", "dataset": Path("x.yaml"), "from_runs": ["status=completed"]},
     "give a DATASET file or directory, or --from-runs"),
    ({"agent": "crew", "dataset": Path("x.yaml"), "since": "7d"},
     "--since, --until, --graders and --fork-at go with --from-runs"),
    ({"agent": "crew", "dataset": Path("x.yaml"), "fork_at": 2},
     "--since, --until, --graders and --fork-at go with --from-runs"),
    ({"agent": "crew", "version": "1.0", "dirs": [Path("a"), Path("b")],
      "dataset": Path("x.yaml")}, "give at most one --dir"),
])
def test_toren_eval_run_refuses_options_that_do_not_go_together(
        kwargs: dict[str, object], message: str) -> None:
    from toren.cli.evals import run
    from toren.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        run(**kwargs)  # type: ignore[arg-type]
