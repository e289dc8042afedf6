"""The writer's own tool: offline notes (only desk-writer has it; desk-crew sees the answer)."""

NOTES = {
    "tides": "Tides are caused mainly by the Moon's gravity; most coasts see two a day.",
    "postgres": "PostgreSQL is an open-source relational database first released in 1996.",
}


def notes(topic: str) -> str:
    """Read the writer's notes on a topic.

    Args:
        topic: what to look up, e.g. "tides".
    """
    for key, text in NOTES.items():
        if key in topic.lower():
            return text
    return f"No notes on {topic!r}; known topics: {', '.join(NOTES)}."
