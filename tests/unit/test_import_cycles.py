"""No module of the kernel imports, through any chain, a module that imports it back: a circle
hides which of two modules is the lower one. Type-only and function-local imports count (grimp,
import-linter's graph, reads every import statement)."""

from __future__ import annotations

import grimp


def module_cycles(package: str) -> list[list[str]]:
    """The strongly connected groups of more than one module in ``package``'s import graph."""
    graph = grimp.build_graph(package, cache_dir=None)
    edges = {module: {imported for imported in graph.find_modules_directly_imported_by(module)
                      if imported == package or imported.startswith(package + ".")}
             for module in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges.get(module, ()):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return groups


def test_the_kernel_has_no_import_circle() -> None:
    assert module_cycles("toren") == []


def test_the_check_finds_a_circle(tmp_path, monkeypatch) -> None:
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    from circled import b\n")
    (package / "b.py").write_text("def f():\n    from circled import a\n")
    (package / "c.py").write_text("from circled import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert module_cycles("circled") == [["circled.a", "circled.b"]]
