def fine(x: str) -> str:
    return x


def configure(**options: str) -> str:
    return str(options)
