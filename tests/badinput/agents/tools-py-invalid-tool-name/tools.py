from toren import tool


@tool(name="web search")
def search(q: str) -> str:
    return q
