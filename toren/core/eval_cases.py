"""Eval cases: a case (input, expected output, tags, graders), the graders that check it and a
dataset of cases with its content hash (docs/guides/evals.md). Plain values: an eval keeps
``Dataset.to_json()`` in the database; ``toren.agents.datasets`` reads them from files."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The most cases one dataset may hold (an eval keeps them all in one row).
MAX_CASES = 10_000
#: The largest dataset file read (bytes); YAML files are also bounded by the YAML reader.
MAX_FILE_BYTES = 20_000_000
#: Files of a dataset directory that hold cases.
CASE_FILE_SUFFIXES = (".yaml", ".yml", ".jsonl")
#: A case id: what ``toren eval report`` and ``compare`` name it by.
CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}")

#: Graders that read the run's output.
OUTPUT_GRADERS = ("exact", "contains", "regex", "schema", "function", "rubric")
#: Trajectory checks: what the run did, not what it answered.
TRAJECTORY_GRADERS = ("status", "tools_called", "tools_not_called", "max_steps",
                      "max_cost_usd", "max_latency_s")
GRADER_KINDS = OUTPUT_GRADERS + TRAJECTORY_GRADERS
#: The fields of a case, and of a dataset file's top-level mapping.
CASE_FIELDS = ("id", "input", "expected", "rubric", "tags", "graders")
DATASET_FIELDS = ("name", "description", "graders", "cases")
#: Run statuses a ``status:`` check may expect.
RUN_OUTCOMES = ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class Grader:
    """One check of a case run: ``kind`` (one of ``GRADER_KINDS``), its ``value`` (the text,
    pattern, schema, function name, rubric, tool names or ceiling) and, for a rubric, the
    ``model`` that grades (``None``: the eval's ``--grader-model``)."""

    kind: str
    value: Any
    model: str | None = None

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {self.kind: self.value}
        if self.model is not None:
            found["model"] = self.model
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Grader:
        kind = next(key for key in data if key != "model")
        return cls(kind, data[kind], data.get("model"))


@dataclass(frozen=True)
class Case:
    """One case: the run's ``input``, what it should answer (``expected``), its ``tags`` and
    every grader that decides whether it passed (the dataset's first, then its own)."""

    id: str
    input: Any
    expected: Any = None
    tags: tuple[str, ...] = ()
    graders: tuple[Grader, ...] = ()
    #: Where it was read from (``file:line``), for messages; not part of the hash.
    source: str = ""
    #: The recorded run it was made from (``--from-runs``): its input, its output as
    #: ``expected``; an eval with ``fork_at`` forks it. Part of the hash.
    from_run: str | None = None

    def to_json(self) -> dict[str, Any]:
        found = {"id": self.id, "input": self.input, "expected": self.expected,
                 "tags": list(self.tags), "graders": [g.to_json() for g in self.graders],
                 "source": self.source}
        if self.from_run is not None:
            found["from_run"] = self.from_run
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Case:
        return cls(data["id"], data["input"], data.get("expected"), tuple(data.get("tags", ())),
                   tuple(Grader.from_json(g) for g in data.get("graders", ())),
                   data.get("source", ""), data.get("from_run"))

    def content(self) -> dict[str, Any]:
        """What the dataset's hash covers of the case."""
        return {key: value for key, value in self.to_json().items() if key != "source"}


@dataclass(frozen=True)
class Dataset:
    """The cases of a dataset, its ``name`` and ``hash``: the SHA-256 of its cases' content
    (ids, inputs, expected outputs, tags, graders), in order. The same cases in another
    layout (YAML or JSONL, one file or a directory) hash the same."""

    name: str
    cases: tuple[Case, ...]
    hash: str = field(default="")
    description: str = ""

    def __post_init__(self) -> None:
        if not self.hash:
            object.__setattr__(self, "hash", dataset_hash(self.cases))

    @property
    def short(self) -> str:
        return self.hash[:12]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "hash": self.hash,
                "cases": [case.to_json() for case in self.cases]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Dataset:
        return cls(data["name"], tuple(Case.from_json(c) for c in data["cases"]),
                   data["hash"], data.get("description", ""))


def dataset_hash(cases: Sequence[Case]) -> str:
    """The SHA-256 (hex) of the cases' content, as canonical JSON."""
    text = json.dumps([case.content() for case in cases], sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


