"""Tools of the planner crew: an offline library and a topic planner (no network needed)."""

from toren import tool

LIBRARY = {
    "postgres": "PostgreSQL is an open-source relational database first released in 1996.",
    "event sourcing": "Event sourcing stores every change as an immutable event; state is a "
    "fold over the log.",
    "durable execution": "Durable execution persists each step of a program so it resumes "
    "after a crash without redoing completed work.",
}


@tool(idempotent=True)
def suggest_topics(question: str) -> dict[str, list[str]]:
    """Suggest the topics to research for a question.

    Args:
        question: The question to plan research for.
    """
    words = question.lower()
    topics = [topic for topic in LIBRARY if any(part in words for part in topic.split())]
    return {"topics": topics or sorted(LIBRARY)}


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
