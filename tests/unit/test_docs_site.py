"""The docs site's checks that need no mkdocs (the full check is `.ci/run`'s docs step,
`mkdocs build --strict`): no page has an unclosed code fence, every page is in mkdocs.yml's
nav, every relative link of a page points at a file that exists, and the redirects of moved
pages go from paths that no longer exist to pages that do."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))


def _hooks() -> Any:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" /
                                                  "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


class _Loader(yaml.SafeLoader):
    """mkdocs.yml as data: its ``!!python/...`` tags (the slugify function) read as None."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
CONFIG = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)


def _nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def test_an_unclosed_fence_is_found_either_way_it_shows() -> None:
    assert hooks.fence_problems("text\n```\ncode\n```\nmore\n") == []
    # a fence opened and never closed
    assert hooks.fence_problems("```\ncode\n") == [
        "the code block opened at line 1 is never closed"]
    # a missing close, where a later block opens: the opening fence reads as code
    (problem,) = hooks.fence_problems("```\ncode\n\n## Next\n\n```yaml\nkey: 1\n```\n")
    assert problem.startswith("line 6 opens a code block (```yaml) inside the one opened at "
                              "line 1")
    # an inner fence of another length, as a Markdown example shows one, is fine
    assert hooks.fence_problems("````markdown\n```yaml\nkey: 1\n```\n````\n") == []


@pytest.mark.parametrize("page", PAGES)
def test_no_page_has_an_unclosed_fence(page: str) -> None:
    assert hooks.fence_problems((DOCS / page).read_text()) == []


def test_every_page_is_in_the_nav_once() -> None:
    listed = _nav_pages(CONFIG["nav"])
    missing = sorted(set(PAGES) - set(listed))
    assert not missing, f"add these pages to nav: in mkdocs.yml: {missing}"
    assert sorted(set(listed) - set(PAGES)) == []
    assert len(listed) == len(set(listed)), "a page is listed twice in nav:"


LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?(?:\s+\"[^\"]*\")?\)")


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_points_at_a_file(page: str) -> None:
    broken = []
    in_block = False
    for number, line in enumerate((DOCS / page).read_text().splitlines(), 1):
        if hooks.FENCE.match(line):
            in_block = not in_block
            continue
        if in_block:
            continue
        for target in LINK.findall(hooks.INLINE_CODE.sub("", line)):
            if re.match(r"^[a-zA-Z][\w+.-]*:", target) or target.startswith("/"):
                continue
            if not (DOCS / Path(page).parent / target).exists():
                broken.append(f"line {number}: {target}")
    assert not broken, broken


def test_moved_pages_redirect_from_paths_that_are_gone_to_pages() -> None:
    (redirects,) = [plugin["redirects"] for plugin in CONFIG["plugins"]
                    if isinstance(plugin, dict) and "redirects" in plugin]
    for old, new in redirects["redirect_maps"].items():
        assert not (DOCS / old).exists(), old
        assert new in PAGES, new
        # and README names the new path, not the old one
        assert os.path.normpath(old) not in (ROOT / "README.md").read_text()


MERMAID = re.compile(r"^```mermaid\n(.*?)^```", re.MULTILINE | re.DOTALL)


def mermaid_statement_breaks(diagram: str) -> list[str]:
    """Lines of a mermaid sequence diagram whose text holds a ``;``: mermaid ends a statement
    there, so the rest is parsed as a new one and the whole diagram shows "Syntax error in
    text" on the site (the architecture page's did until session 18; checked in Chromium)."""
    if not diagram.lstrip().startswith("sequenceDiagram"):
        return []
    return [line.strip() for line in diagram.splitlines() if ";" in line]


def test_a_semicolon_in_a_sequence_message_is_found() -> None:
    assert mermaid_statement_breaks("sequenceDiagram\n  A->>B: tick; row updated\n") == [
        "A->>B: tick; row updated"]
    assert mermaid_statement_breaks("sequenceDiagram\n  A->>B: tick, row updated\n") == []


@pytest.mark.parametrize("page", [p for p in PAGES if "```mermaid" in (DOCS / p).read_text()])
def test_no_sequence_diagram_breaks_a_message_in_two(page: str) -> None:
    for diagram in MERMAID.findall((DOCS / page).read_text()):
        assert mermaid_statement_breaks(diagram) == [], page
