"""mkdocs hooks for Toren's docs site (mkdocs.yml `hooks:`), two checks mkdocs does not make
and one thing it cannot do on its own:

- **Unclosed code fences.** A fence left open turns the rest of a page inside out (code becomes
  prose and prose code) without any warning from Markdown. A page fails the build when a fence
  is still open at its end, or when a line that can only open a fence (```` ```yaml ````) appears
  inside a block of the same fence: the block above it was not closed.
- **Links out of docs/.** The pages link to files of the repository beside them (plugin READMEs,
  `schemas/openapi.json`, `bench/RESULTS.md`, source files). mkdocs would call every such link
  broken; this hook checks that the file exists (a link to a file that does not is a warning,
  which fails a `--strict` build), copies it into the site under `repo/` and points the link at
  the copy. A link to a directory goes to its README.md.

Warnings fail `mkdocs build --strict`, which `.ci/run` runs.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mkdocs.structure.files import Files

log = logging.getLogger("mkdocs.hooks.toren")

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
#: an inline link or image target: ](target#anchor "title")
LINK = re.compile(r"(\]\()([^)\s#]*)(#[^)\s]*)?((?:\s+\"[^\"]*\")?\))")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
REPO_DIR = "repo"


def fence_problems(text: str) -> list[str]:
    """What is wrong with the code fences of a Markdown text: each an unclosed block."""
    problems: list[str] = []
    open_at: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match is None:
            continue
        fence, info = match.group(2), match.group(3).strip()
        if open_at is None:
            open_at = (number, fence)
        elif fence[0] == open_at[1][0] and len(fence) >= len(open_at[1]):
            if info:  # only an opening fence has an info string: the block was never closed
                problems.append(f"line {number} opens a code block ({fence}{info}) inside the "
                                f"one opened at line {open_at[0]}: close that block first")
                open_at = (number, fence)
            else:
                open_at = None
    if open_at is not None:
        problems.append(f"the code block opened at line {open_at[0]} is never closed")
    return problems


def _outside_links(text: str) -> list[str]:
    """Link targets of a page's prose (not its code blocks or code spans)."""
    found: list[str] = []
    in_block = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_block = not in_block
            continue
        if not in_block:
            found += [m.group(2) for m in LINK.finditer(INLINE_CODE.sub("", line))]
    return found


def _repo_path(page_src: str, target: str, docs_dir: Path, root: Path) -> Path | None:
    """The repository file a relative link of the page at ``page_src`` points to, if it is
    outside docs/ (None for a link inside docs/, an absolute URL or a bare anchor)."""
    if not target or re.match(r"^[a-zA-Z][\w+.-]*:", target) or target.startswith("/"):
        return None
    resolved = Path(os.path.normpath(docs_dir / Path(page_src).parent / target))
    if resolved.is_relative_to(docs_dir):
        return None
    return resolved


def on_files(files: Files, config: Any) -> Files:
    # mkdocs is imported here, not at the top, so that tests/unit/test_docs_site.py can use
    # fence_problems without the docs requirements installed
    from mkdocs.structure.files import File, InclusionLevel

    class RepoFile(File):
        """A file of the repository outside docs/, copied into the site as it is (never
        rendered, even a README.md)."""

        def is_documentation_page(self) -> bool:
            return False

    docs_dir = Path(config["docs_dir"]).resolve()
    root = docs_dir.parent
    wanted: set[Path] = set()
    for file in list(files):
        if not file.is_documentation_page():
            continue
        text = Path(file.abs_src_path).read_text(encoding="utf-8")
        for problem in fence_problems(text):
            log.warning(f"{file.src_uri}: {problem}")
        for target in _outside_links(text):
            path = _repo_path(file.src_uri, target, docs_dir, root)
            if path is None:
                continue
            if path.is_dir() and (path / "README.md").is_file():
                path = path / "README.md"
            if not path.is_file() or not path.is_relative_to(root):
                log.warning(f"{file.src_uri}: the link '{target}' points to "
                            f"{os.path.relpath(path, root)}, which is not a file of the "
                            "repository")
                continue
            wanted.add(path)
    for path in sorted(wanted):
        src_uri = f"{REPO_DIR}/{path.relative_to(root).as_posix()}"
        copy = RepoFile(src_uri, str(root), config["site_dir"], config["use_directory_urls"],
                         inclusion=InclusionLevel.NOT_IN_NAV)
        copy.abs_src_path = str(path)
        files.append(copy)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    root = docs_dir.parent

    def point_at_copy(match: re.Match[str]) -> str:
        path = _repo_path(page.file.src_uri, match.group(2), docs_dir, root)
        if path is None:
            return match.group(0)
        if path.is_dir() and (path / "README.md").is_file():
            path = path / "README.md"
        copy = f"{REPO_DIR}/{path.relative_to(root).as_posix()}" if path.is_relative_to(
            root) else None
        if copy is None or files.get_file_from_path(copy) is None:
            return match.group(0)  # reported by on_files
        target = os.path.relpath(copy, Path(page.file.src_uri).parent.as_posix() or ".")
        return match.group(1) + target + (match.group(3) or "") + match.group(4)

    out: list[str] = []
    in_block = False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            in_block = not in_block
        out.append(line if in_block or FENCE.match(line) else LINK.sub(point_at_copy, line))
    return "\n".join(out)
