"""Tools of the candidate research crew: the offline library alone."""

from toren import tool

LIBRARY = {
    "postgres": "PostgreSQL is an open-source relational database first released in 1996.",
    "event sourcing": "Event sourcing stores every change as an immutable event; state is a "
    "fold over the log.",
    "durable execution": "Durable execution persists each step of a program so it resumes "
    "after a crash without redoing completed work.",
}


@tool(idempotent=True)
def lookup_topic(topic: str) -> str:
    """Look a topic up in the offline library.

    Args:
        topic: What to look up, e.g. "event sourcing".
    """
    key = topic.strip().lower()
    for name, text in LIBRARY.items():
        if name in key or key in name:
            return text
    return f"Nothing on {topic!r}; the library covers: {', '.join(sorted(LIBRARY))}."
