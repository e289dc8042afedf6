"""TaskRunner.text_sink: a model's text pieces become numbered deltas of bounded size."""

from __future__ import annotations

from types import SimpleNamespace

from toren.execution.task import TaskRunner
from toren.seams.shapes import TEXT_DELTA_MAX_CHARS, TextDelta


def test_pieces_are_numbered_in_order_and_long_ones_split() -> None:
    seen: list[TextDelta] = []
    runner = SimpleNamespace(run_id="r1", task_id="main",
                             ports=SimpleNamespace(text_delta=seen.append))
    publish = TaskRunner.text_sink(runner, 3)  # type: ignore[arg-type]
    long = "x" * (2 * TEXT_DELTA_MAX_CHARS + 5)
    for piece in ("Hello ", long, "", "world"):
        publish(piece)
    assert [(d.run_id, d.task_id, d.step, d.index) for d in seen] == [
        ("r1", "main", 3, i) for i in range(5)]  # an empty piece is no delta
    assert [len(d.text) for d in seen] == [6, TEXT_DELTA_MAX_CHARS, TEXT_DELTA_MAX_CHARS, 5, 5]
    assert "".join(d.text for d in seen) == "Hello " + long + "world"
