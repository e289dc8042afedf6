"""Grading functions of research-crew's evals (docs/guides/evals.md): a case's
``function: NAME`` grader calls ``NAME`` here with the arguments it asks for by name
(``output``, ``expected``, ``input``, ``case``, ``trajectory``)."""


def cites_the_library(output: str, trajectory: dict) -> tuple[bool, str]:
    """The answer names the tool its facts came from, and that tool was called."""
    cited = "lookup_topic" in output
    called = "lookup_topic" in trajectory["tools"]
    return cited and called, "cites lookup_topic" if cited else "no citation"
