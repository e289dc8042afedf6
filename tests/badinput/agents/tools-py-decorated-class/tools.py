from toren import tool


@tool
class Search:
    def __call__(self, q: str) -> str:
        return q
