"""Replies split for chat apps: at the limit, on the most sensible boundary, nothing lost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toren.core.chat_text import split_text


def test_short_text_is_one_part() -> None:
    assert split_text("  hello  ", 4096) == ["hello"]
    assert split_text("", 4096) == []


def test_a_5000_character_reply_is_cut_at_a_paragraph_break() -> None:
    paragraphs = [("word " * 199).strip() for _ in range(5)]  # 5 x 994 characters
    text = "\n\n".join(paragraphs)
    assert len(text) == 4978
    parts = split_text(text, 4096)
    assert [len(part) for part in parts] == [994 * 4 + 6, 994]
    assert "\n\n".join(parts) == text


def test_cuts_prefer_lines_then_sentences_then_spaces_then_the_limit() -> None:
    lines = split_text("a" * 30 + "\n" + "b" * 30, 40)
    assert lines == ["a" * 30, "b" * 30]
    sentences = split_text("One two three. Four five six seven", 30)
    assert sentences == ["One two three.", "Four five six seven"]
    words = split_text("alpha beta gamma delta epsilon", 24)
    assert words == ["alpha beta gamma", "delta epsilon"]
    unbroken = split_text("x" * 100, 30)
    assert all(len(part) <= 30 for part in unbroken) and "".join(unbroken) == "x" * 100


def test_a_code_block_cut_in_two_is_closed_and_reopened() -> None:
    code = "\n".join(f"print({index})" for index in range(40))
    parts = split_text(f"Here:\n```python\n{code}\n```\nDone.", 200)
    assert all(len(part) <= 200 for part in parts)
    assert all(part.count("```") % 2 == 0 for part in parts)
    assert parts[1].startswith("```python\n")


def test_a_tiny_limit_is_refused() -> None:
    with pytest.raises(ValueError):
        split_text("hello", 5)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab .\n"), max_size=3000),
       st.integers(min_value=20, max_value=500))
def test_no_part_exceeds_the_limit_and_no_word_is_lost(text: str, limit: int) -> None:
    parts = split_text(text, limit)
    assert all(0 < len(part) <= limit for part in parts)
    assert "".join(parts).replace(" ", "").replace("\n", "") == \
        text.replace(" ", "").replace("\n", "")


def test_storable_text_replaces_what_postgres_cannot_hold() -> None:
    from toren.core.chat_text import storable_text

    assert storable_text("plain é") == "plain é"
    assert storable_text("a\x00b\ud800c") == "a\ufffdb\ufffdc"
