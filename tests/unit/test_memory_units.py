"""The pure side of memory: which scope a remember writes in, the recall text and its budget,
the pinned block, subjects, and the offline embedder and its registration hook."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

import toren
from toren.core.memory import (
    MemoryConfig,
    MemoryRecord,
    check_subject,
    pinned_block,
    recall_text,
    scope_for,
    system_prompt,
)
from toren.default_plugins.hash_embedder import HashEmbedder, hash_vector
from toren.errors import PluginError
from toren.seams.embedders import Embedder
from toren.seams.plugins import PluginHost


def record(n: int, content: str, scope: str = "user") -> MemoryRecord:
    return MemoryRecord(id=f"id-{n}", agent="support", scope=scope, subject="ann",
                        content=content, updated_at=datetime(2026, 12, 5, tzinfo=UTC))


def test_remember_writes_user_when_there_is_someone_else_the_first_other_scope() -> None:
    config = MemoryConfig()
    assert scope_for(config, None, "ann") == "user"
    assert scope_for(config, None, None) == "agent"
    assert scope_for(config, "agent", "ann") == "agent"
    with pytest.raises(ValueError, match="needs a user: this run has no subject"):
        scope_for(config, "user", None)
    with pytest.raises(ValueError, match="'shared' is not one this agent may use"):
        scope_for(config, "shared", "ann")
    only_user = MemoryConfig(scopes=("user",))
    with pytest.raises(ValueError, match="allow only 'user'"):
        scope_for(only_user, None, None)


def test_recall_keeps_to_its_budget_and_says_what_it_left_out() -> None:
    found = [record(n, f"fact number {n} " + "x" * 40) for n in range(5)]
    text = recall_text(found, 200, "facts")
    assert text.startswith("2 memories (best first):")
    assert "[id-0]" in text and "[id-1]" in text and "[id-2]" not in text
    assert "(3 more did not fit in the recall budget; ask a narrower query.)" in text
    # one memory larger than the budget is cut, not dropped
    cut = recall_text([record(9, "y" * 500)], 120, None)
    assert "[id-9]" in cut and cut.count("y") < 120 and "…" in cut
    assert recall_text([], 100, "printers") == (
        "No memory matches 'printers'. Nothing was found; do not assume anything about it.")


def test_pinned_memories_follow_the_prompt_within_their_budget() -> None:
    block = pinned_block([record(1, "Account 4411"), record(2, "z" * 300)], 120)
    assert block.startswith("Pinned memories") and "[id-1]" in block
    assert "(1 more pinned memories did not fit; use recall.)" in block
    assert pinned_block([record(1, "x")], 0) == "" == pinned_block([], 100)
    assert system_prompt("You help.", block) == "You help.\n\n" + block
    assert system_prompt("You help.", "") == "You help."


@pytest.mark.parametrize(("subject", "problem"), [
    ("", "non-empty"), (7, "non-empty"), ("a" * 201, "at most 200"), ("a\tb", "control"),
    ("a\x00b", "control")])
def test_a_subject_is_short_printable_text(subject: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_subject(subject)


def test_the_offline_embedder_is_deterministic_and_near_for_shared_words() -> None:
    first = hash_vector("Owns two printers")
    assert first == hash_vector("Owns two printers") and len(first) == 1024
    assert math.isclose(sum(v * v for v in first), 1.0)
    assert hash_vector("...") == [0.0] * 1024  # no words: no direction

    def cosine(a: str, b: str) -> float:
        return sum(x * y for x, y in zip(hash_vector(a), hash_vector(b), strict=True))

    assert cosine("printing", "Owns two printers") > 0.2 > cosine("printing", "Lives in Lisbon")
    assert cosine("lisbon", "Lives in Lisbon") > 0.5


class Doubled(Embedder):
    name = "toren/hash"
    dimensions = 2

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


class Named(Doubled):
    name = "acme/tiny"


async def test_plugins_register_embedders_and_a_name_twice_is_an_error() -> None:
    host = PluginHost(load=[], entry_points=False)
    assert isinstance(host.embedders["toren/hash"], HashEmbedder)
    assert "toren/hash" in host.info["scripted"].embedders

    class Acme:
        @toren.hookimpl
        def register_embedders(self, register) -> None:
            register(Named())

    host.add_plugin(Acme(), "acme")
    assert await host.embedders["acme/tiny"].embed(["a", "b"]) == [[1.0, 0.0], [1.0, 0.0]]
    assert host.info["acme"].embedders == ["acme/tiny"]

    class Clash:
        @toren.hookimpl
        def register_embedders(self, register) -> None:
            register(Doubled())

    with pytest.raises(PluginError, match="embedder 'toren/hash' is registered by two "
                                          "plugins: scripted"):
        host.add_plugin(Clash(), "clash")
