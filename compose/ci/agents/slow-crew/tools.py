"""Slow offline tools: each takes a few seconds, like a real page fetch."""

import time

from toren import tool


@tool
def fetch_page(topic: str) -> str:
    """Fetch the page about a topic.

    Args:
        topic: What to fetch.
    """
    time.sleep(4)
    return f"The page about {topic}: it is durable."


@tool
def summarize(text: str) -> str:
    """Summarize a text.

    Args:
        text: The text.
    """
    time.sleep(2)
    return text[:40]
