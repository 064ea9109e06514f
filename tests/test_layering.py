"""The import graph of memory/, agents/ and modex_web/: no circles, and memory never imports agents.

Every import counts, at module level and inside functions (a lazy import is still a circle a
newcomer has to untangle); only ``if TYPE_CHECKING:`` blocks are left out. ``from pkg import name``
depends on ``pkg`` unless every name is a submodule, then on those submodules only.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("memory", "agents", "modex_web")


def modules(root: Path = REPO) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            rel = path.relative_to(root)
            if "migrations" in rel.parts:
                continue
            name = ".".join(rel.with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _absolute(module: str | None, importer: str, is_package: bool, level: int) -> str:
    if not level:
        return module or ""
    parts = importer.split(".") if is_package else importer.split(".")[:-1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = _absolute(child.module, name, is_package, child.level)
                submodules = {f"{base}.{alias.name}" for alias in child.names} & known.keys()
                found.update(submodules)
                if len(submodules) < len(child.names):
                    found.add(base)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return {target for target in found if target in known and target != name}


def graph(root: Path = REPO) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_there_is_no_import_circle():
    found = circles(graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_memory_never_imports_agents_or_the_web_app():
    upward = {
        name: sorted(t for t in targets if t.split(".")[0] in {"agents", "modex_web"})
        for name, targets in graph().items()
        if name.split(".")[0] == "memory"
    }
    assert not {name: targets for name, targets in upward.items() if targets}


def test_the_checker_sees_a_circle_and_an_upward_import(tmp_path):
    for package, files in {
        "memory": {"__init__.py": "", "a.py": "def f():\n    from memory import b\n", "b.py": "import memory.a\n"},
        "agents": {"__init__.py": "", "x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agents import y\n", "y.py": "from . import x\n"},
        "modex_web": {"__init__.py": ""},
    }.items():
        (tmp_path / package).mkdir()
        for filename, text in files.items():
            (tmp_path / package / filename).write_text(text)
    (tmp_path / "memory" / "c.py").write_text("from agents.x import thing\n")
    edges = graph(tmp_path)
    assert circles(edges) == [["memory.a", "memory.b"]]  # the lazy import counts; TYPE_CHECKING does not
    assert edges["memory.c"] == {"agents.x"}
