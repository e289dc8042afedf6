"""Eval datasets read from files: a YAML or JSONL file of cases, or a directory of them,
checked field by field; errors name the file, the line and the field (docs/guides/evals.md)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toren.agents.yamlfile import load_located
from toren.core.eval_cases import (
    CASE_FIELDS,
    CASE_FILE_SUFFIXES,
    CASE_ID,
    DATASET_FIELDS,
    GRADER_KINDS,
    MAX_CASES,
    MAX_FILE_BYTES,
    RUN_OUTCOMES,
    Case,
    Dataset,
    Grader,
)
from toren.errors import AgentDefinitionError, EvalDatasetError


def load_dataset(path: Path) -> Dataset:
    """The dataset at ``path``: a ``.yaml``/``.yml`` file (a list of cases, or a mapping with
    ``cases:`` and optional ``name``, ``description``, ``graders`` for every case), a
    ``.jsonl`` file (a case per line), or a directory of such files (read in name order,
    not recursively). Raises ``EvalDatasetError`` naming the file, the line and the field."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir()
                       if p.is_file() and p.suffix.lower() in CASE_FILE_SUFFIXES)
        if not files:
            raise EvalDatasetError("the directory holds no case files (*.yaml, *.yml, "
                                   "*.jsonl)", path=str(path))
        name, description = path.resolve().name, ""
    elif path.is_file():
        if path.suffix.lower() not in CASE_FILE_SUFFIXES:
            raise EvalDatasetError("a dataset is a .yaml, .yml or .jsonl file or a directory of "
                                   "them", path=str(path))
        files, name, description = [path], path.stem, ""
    else:
        raise EvalDatasetError("no such file or directory", path=str(path))
    cases: list[Case] = []
    for file in files:
        found_name, found_description, found = _read_file(file)
        if len(files) == 1:
            name = found_name or name
            description = found_description
        cases += found
    return _dataset(name, description, cases, str(path))


def dataset_from_json(data: Any, *, where: str = "the request body") -> Dataset:
    """A dataset sent as JSON (``POST /evals``): a mapping with ``cases`` and optional
    ``name``, ``description``, ``graders``, checked as a YAML file is; errors name ``where``
    and the field (``cases[2].input``)."""
    name, description, cases = _from_data(data, where, lambda _at: None)
    return _dataset(name or "dataset", description, cases, where)


def _dataset(name: str, description: str, cases: list[Case], path: str) -> Dataset:
    if not cases:
        raise EvalDatasetError("the dataset has no cases", path=path)
    if len(cases) > MAX_CASES:
        raise EvalDatasetError(f"the dataset has {len(cases):,} cases; at most {MAX_CASES:,} "
                               "are taken (split it)", path=path)
    seen: dict[str, str] = {}
    for case in cases:
        if case.id in seen:
            raise EvalDatasetError(
                f"case id {case.id!r} is used twice (also at {seen[case.id]}); give each case "
                "an id of its own (a case without an id is named by its input, so two cases "
                "with the same input need ids)", path=case.source)
        seen[case.id] = case.source
    return Dataset(name, tuple(cases), description=description)


def _read_file(path: Path) -> tuple[str, str, list[Case]]:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise EvalDatasetError(f"the file is {size:,} bytes; at most {MAX_FILE_BYTES:,} are "
                                   "read", path=str(path))
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EvalDatasetError(f"not UTF-8 text (byte {exc.start})", path=str(path)) from None
    except OSError as exc:
        raise EvalDatasetError(f"cannot be read: {exc.strerror or exc}", path=str(path)) from None
    if path.suffix.lower() == ".jsonl":
        return "", "", _read_jsonl(text, str(path))
    return _read_yaml(text, str(path))


def _read_jsonl(text: str, path: str) -> list[Case]:
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line, parse_constant=_no_constant)
        except ValueError as exc:
            raise EvalDatasetError(f"not JSON: {exc}", path=path, line=number) from None
        cases.append(_case(data, (), lambda _at, n=number: n, path, defaults=()))
    return cases


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _read_yaml(text: str, path: str) -> tuple[str, str, list[Case]]:
    try:
        located = load_located(text, path=path)
    except AgentDefinitionError as exc:
        raise EvalDatasetError(exc.message) from None

    def line(at: tuple[str | int, ...]) -> int | None:
        return located.line_of(at)

    key_line = located.line_of
    return _from_data(located.data, path, line, key_line)


def _from_data(data: Any, path: str, line: Any, key_line: Any = None
               ) -> tuple[str, str, list[Case]]:
    if isinstance(data, list):
        return "", "", [_case(item, (i,), line, path, defaults=())
                        for i, item in enumerate(data)]
    if not isinstance(data, dict):
        raise EvalDatasetError("a dataset is a list of cases or a mapping with cases:",
                               path=path, line=line(()))
    for key in data:
        if key not in DATASET_FIELDS:
            raise EvalDatasetError(f"unknown field {key!r}; a dataset's fields are "
                                   f"{', '.join(DATASET_FIELDS)}", path=path,
                                   line=key_line((key,), key=True) if key_line else None)
    name = _text(data.get("name", ""), ("name",), line, path)
    description = _text(data.get("description", ""), ("description",), line, path)
    defaults = _graders(data.get("graders", []), ("graders",), line, path)
    raw_cases = data.get("cases")
    if not isinstance(raw_cases, list):
        raise EvalDatasetError("cases: must be a list of cases", path=path,
                               line=line(("cases",)))
    return name, description, [_case(item, ("cases", i), line, path, defaults=defaults)
                               for i, item in enumerate(raw_cases)]


def _text(value: Any, at: tuple[str | int, ...], line: Any, path: str) -> str:
    if not isinstance(value, str):
        raise EvalDatasetError(f"{_field(at)} must be text", path=path, line=line(at))
    return value


def _field(at: tuple[str | int, ...]) -> str:
    out = ""
    for part in at:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "the document"


def _case(data: Any, at: tuple[str | int, ...], line: Any, path: str, *,
          defaults: Sequence[Grader]) -> Case:
    where = line(at)
    if not isinstance(data, dict):
        raise EvalDatasetError(f"{_field(at) if at else 'a case'} must be a mapping with "
                               "input: (and optional id, expected, rubric, tags, graders)",
                               path=path, line=where)
    for key in data:
        if key not in CASE_FIELDS:
            raise EvalDatasetError(f"{_field((*at, key))}: unknown field {key!r}; a case's "
                                   f"fields are {', '.join(CASE_FIELDS)}", path=path,
                                   line=line((*at, key)) or where)
    if "input" not in data:
        raise EvalDatasetError(f"{_field(at) if at else 'the case'} has no input:", path=path,
                               line=where)
    value = data["input"]
    if not isinstance(value, str | dict) or value in ("", {}):
        raise EvalDatasetError(f"{_field((*at, 'input'))} must be non-empty text or a mapping "
                               "(a JSON object)", path=path, line=line((*at, "input")))
    _check_finite(value, (*at, "input"), line, path)
    _check_finite(data.get("expected"), (*at, "expected"), line, path)
    tags = data.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise EvalDatasetError(f"{_field((*at, 'tags'))} must be a list of words", path=path,
                               line=line((*at, "tags")))
    graders = list(defaults) + _graders(data.get("graders", []), (*at, "graders"), line, path)
    if "rubric" in data:
        rubric = _text(data["rubric"], (*at, "rubric"), line, path)
        graders.append(_grader({"rubric": rubric}, (*at, "rubric"), line, path))
    expected = data.get("expected")
    if expected is not None and not any(g.kind in ("exact", "function", "schema")
                                        for g in graders):
        graders.insert(0, Grader("exact", expected))
    case_id = data.get("id")
    if case_id is None:
        canonical = json.dumps(value, sort_keys=True, ensure_ascii=False)
        case_id = "c" + hashlib.sha256(canonical.encode()).hexdigest()[:10]
    elif not isinstance(case_id, str | int) or not CASE_ID.fullmatch(str(case_id)):
        raise EvalDatasetError(f"{_field((*at, 'id'))} {case_id!r} is not a case id: letters, "
                               "digits and _.:/- (at most 128, starting with a letter or digit)",
                               path=path, line=line((*at, "id")))
    return Case(str(case_id), value, expected, tuple(tags), tuple(graders),
                f"{path}:{where}" if where else path)


def _check_finite(value: Any, at: tuple[str | int, ...], line: Any, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise EvalDatasetError(f"{_field(at)} holds {value}, which JSON cannot", path=path,
                               line=line(at))
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, (*at, key), line, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_finite(item, (*at, index), line, path)


def _graders(data: Any, at: tuple[str | int, ...], line: Any, path: str) -> list[Grader]:
    if not isinstance(data, list):
        raise EvalDatasetError(f"{_field(at) if at else 'the file'} must be a list of graders "
                               "such as - contains: Paris", path=path, line=line(at))
    return [_grader(item, (*at, i), line, path) for i, item in enumerate(data)]


def _grader(data: Any, at: tuple[str | int, ...], line: Any, path: str) -> Grader:
    where = line(at)
    kinds = [key for key in data if key in GRADER_KINDS] if isinstance(data, dict) else []
    if not isinstance(data, dict) or len(kinds) != 1:
        raise EvalDatasetError(f"{_field(at)} must name one grader, one of "
                               f"{', '.join(GRADER_KINDS)} (such as - contains: Paris)",
                               path=path, line=where)
    kind = kinds[0]
    extra = [key for key in data if key != kind and not (kind == "rubric" and key == "model")]
    if extra:
        raise EvalDatasetError(f"{_field(at)}: unknown field {extra[0]!r} beside {kind}:"
                               + (" (only a rubric takes model:)" if extra[0] == "model"
                                  else ""), path=path, line=where)
    value = data[kind]
    here = line((*at, kind)) or where

    def bad(what: str) -> EvalDatasetError:
        return EvalDatasetError(f"{_field((*at, kind))} {what}", path=path, line=here)

    if kind in ("contains", "tools_called", "tools_not_called"):
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(v, str) and v for v in items):
            raise bad("must be non-empty text or a list of it")
        value = items
    elif kind in ("regex", "function", "rubric", "status"):
        if not isinstance(value, str) or not value.strip():
            raise bad("must be non-empty text")
        if kind == "regex":
            try:
                re.compile(value)
            except re.error as exc:
                raise bad(f"is not a regular expression: {exc}") from None
        if kind == "function" and not value.isidentifier():
            raise bad(f"{value!r} is not a Python function name (a def in evals.py)")
        if kind == "status" and value not in RUN_OUTCOMES:
            raise bad(f"{value!r} is not a run outcome; one of {', '.join(RUN_OUTCOMES)}")
    elif kind == "schema":
        if not isinstance(value, dict):
            raise bad("must be a JSON Schema (a mapping)")
        import jsonschema  # ~0.15 s: only for datasets that use it

        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            raise bad(f"is not a valid JSON Schema: {exc.message}") from None
    elif kind == "max_steps":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise bad("must be a whole number, 0 or more")
    elif kind in ("max_cost_usd", "max_latency_s"):
        if (not isinstance(value, int | float) or isinstance(value, bool) or value < 0
                or not math.isfinite(value)):
            raise bad("must be a number, 0 or more")
    elif kind == "exact":
        _check_finite(value, (*at, kind), line, path)
    model = data.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise EvalDatasetError(f"{_field((*at, 'model'))} must be a model id such as "
                               "anthropic/claude-sonnet-4-5", path=path, line=where)
    return Grader(kind, value, model)


def load_graders(path: Path) -> list[Grader]:
    """The graders in a YAML file (a list, as a dataset's ``graders:``), for the cases
    ``--from-runs`` makes; ``EvalDatasetError`` naming the file, line and field."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EvalDatasetError(f"not UTF-8 text (byte {exc.start})", path=str(path)) from None
    except OSError as exc:
        raise EvalDatasetError(f"cannot be read: {exc.strerror or exc}", path=str(path)) from None
    try:
        located = load_located(text, path=str(path))
    except AgentDefinitionError as exc:
        raise EvalDatasetError(exc.message) from None
    return _graders(located.data, (), located.line_of, str(path))


def graders_from_json(data: Any, *, where: str = "the request body") -> list[Grader]:
    """Graders sent as JSON (``from_runs.graders`` of ``POST /evals``), checked as a
    dataset's; ``EvalDatasetError`` naming ``where`` and the field."""
    return _graders(data, ("graders",), lambda _at: None, where)
