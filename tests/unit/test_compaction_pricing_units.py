"""Pure parts of compaction and pricing."""

from __future__ import annotations

from toren.agents import Compaction
from toren.core.compaction import SUMMARY_PREFIX, boundary, compacted, needs_compaction, threshold
from toren.core.pricing import Pricing
from toren.seams.model import Message, ToolCall, Usage

CALL = (ToolCall("c", "t", {}),)


def conversation(turns: int) -> list[Message]:
    messages = [Message("user", "task")]
    for i in range(turns):
        messages += [Message("assistant", "", CALL), Message("tool", f"r{i}", tool_call_id="c")]
    return messages


def test_the_kept_part_starts_with_an_assistant_message() -> None:
    messages = conversation(4)  # u a t a t a t a t
    cut = boundary(messages, keep_recent=3)
    assert cut is not None and messages[cut].role == "assistant"
    assert len(messages) - cut >= 3 or cut == 1
    assert boundary([Message("user", "only")], 2) is None
    assert boundary(conversation(1), 6) == 1


def test_compacted_conversation_is_summary_then_kept_turns() -> None:
    messages = conversation(3)
    result = compacted(messages, 3, "it went well")
    assert result[0] == Message("user", SUMMARY_PREFIX + "it went well")
    assert result[1:] == messages[3:]


def test_threshold_defaults_to_80_percent_of_the_window() -> None:
    assert threshold(Compaction(), 200_000) == 160_000
    assert threshold(Compaction(threshold_tokens=5000), 200_000) == 5000
    assert threshold(Compaction(), None) is None
    assert threshold(Compaction(enabled=False, threshold_tokens=5000), None) is None
    big = [*conversation(2), Message("tool", "x" * 40_000, tool_call_id="c")]
    assert needs_compaction(Compaction(threshold_tokens=5000), None, "", big)
    assert not needs_compaction(Compaction(threshold_tokens=50_000), None, "", big)


def test_pricing_per_million_tokens_with_cache_defaults() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000, cache_read_tokens=2_000_000,
                  cache_write_tokens=100_000)
    assert Pricing(3, 15, 0.3, 3.75).cost(usage) == 3 + 7.5 + 0.6 + 0.375
    assert Pricing(1, 2).cost(usage) == 1 + 1 + 2 + 0.1
    assert Pricing.from_yaml({"inputPerMTok": 1, "outputPerMTok": 2}) == Pricing(1.0, 2.0)
