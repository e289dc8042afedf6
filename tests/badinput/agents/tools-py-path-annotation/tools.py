from pathlib import Path


def read_file(path: Path) -> str:
    """Read a file."""
    return path.read_text()
