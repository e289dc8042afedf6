from toren import tool


def lookup(key: str) -> str:
    return key


@tool(name="lookup")
def look_up_fast(key: str) -> str:
    return key
