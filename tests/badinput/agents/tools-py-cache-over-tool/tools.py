import functools

from toren import tool


@functools.cache
@tool(idempotent=True)
def lookup(key: str) -> str:
    return key
