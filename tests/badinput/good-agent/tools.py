"""The good agent's one tool."""

from toren import tool


@tool(idempotent=True)
def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: Any text.
    """
    return len(text.split())
