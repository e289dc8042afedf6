"""The reader process: ``python -m toren_files.worker REQUEST`` reads one document from stdin.

It limits itself first (address space, CPU time, no core dumps, no files written), then
parses, and writes one JSON object to stdout: the window of text asked for, or the error.
The server starts it for each ``read_document`` call (``toren_files.reader``) and kills it on a
timeout or a cancel, so whatever a hostile document does happens here, not in the server.
"""

from __future__ import annotations

import json
import resource
import sys
import warnings
from typing import Any


def limit_self(memory_bytes: int, cpu_s: int) -> None:
    """Apply the limits to this process (before it reads the document)."""
    for kind, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CORE, 0),
                        (resource.RLIMIT_FSIZE, 0)):
        _lower(kind, value, value)
    # past the soft limit the kernel sends SIGXCPU (which ends the process); the hard limit,
    # a second later, is SIGKILL
    _lower(resource.RLIMIT_CPU, cpu_s, cpu_s + 1)


def _lower(kind: int, soft: int, hard: int) -> None:
    _, current_hard = resource.getrlimit(kind)
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(kind, (soft, hard))


def answer(request: dict[str, Any], data: bytes) -> dict[str, Any]:
    """The reader's answer to ``request`` about the document ``data``."""
    from toren_files.extract import Unreadable, extract, read_window

    name = request["name"]
    try:
        extracted = extract(data, request["kind"], name, pages=request.get("pages"),
                            sheet=request.get("sheet"), cell_range=request.get("cell_range"),
                            max_uncompressed=request["max_uncompressed"])
        return read_window(extracted, request["cursor"], request["budget"], name)
    except Unreadable as exc:
        return {"error": str(exc)}
    except MemoryError:
        return {"limit": "memory"}
    except RecursionError:
        return {"error": f"{name} is nested too deeply to read (a damaged or hostile file)"}
    except Exception as exc:  # a parser's own kind of failure: still the file's fault
        return {"error": f"{name} cannot be read ({type(exc).__name__}: {exc})"}


def main() -> None:
    request = json.loads(sys.argv[1])
    limit_self(request["memory_bytes"], request["cpu_s"])
    warnings.simplefilter("ignore")  # openpyxl and pypdf warn about what they skip: not errors
    try:
        result = answer(request, sys.stdin.buffer.read())
    except MemoryError:
        result = {"limit": "memory"}
    sys.stdout.buffer.write(json.dumps(result, ensure_ascii=False).encode("utf-8"))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
