def f(x: str) -> str:
    return x

raise KeyboardInterrupt
