import toren_no_such_package


def f(x: str) -> str:
    return x
