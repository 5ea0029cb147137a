"""Import cycles among the modules of kina_lsp (or another package): prints each strongly
connected component of the import graph, or "no import cycles".  Exit status 1 if any.

Every import counts, wherever it is (module level, in a function, in a class), except those
under `if TYPE_CHECKING:` (annotations only, never run).  Relative imports are resolved, and
`from . import x` / `from .pkg import x` count as an import of the submodule `x` when it is one
(else of the package).  Importing `a.b.c` also runs `a` and `a.b` (their __init__), so those
count as well.  Only edges between modules of the package are kept.

    python scripts/check_lsp_cycles.py [package directory, default kina_lsp] [-v]
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package at `root`."""
    mods: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
           (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, nested ones included, except those under `if TYPE_CHECKING:`
    (its `else:` branch does run, and counts)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)
    visit(tree)
    return found


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                targets.append(prefix)
                for alias in node.names:
                    sub = f"{prefix}.{alias.name}"
                    if sub in mods:
                        targets.append(sub)
            for target in targets:
                for name in _with_parents(target):
                    if name in mods and name != mod:
                        graph[mod].add(name)
    return graph


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, or of one that imports itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def connect(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    args = [a for a in argv if a != "-v"]
    root = Path(args[0] if args else Path(__file__).resolve().parent.parent / "kina_lsp").resolve()
    mods = module_names(root)
    graph = edges(mods)
    if verbose:
        for mod in sorted(graph):
            print(f"{mod} -> {', '.join(sorted(graph[mod])) or '-'}")
    cycles = components(graph)
    for comp in cycles:
        inner = [f"{a} -> {b}" for a in comp for b in sorted(graph[a]) if b in comp]
        print(f"cycle: {{{', '.join(comp)}}}: " + "; ".join(inner))
    print(f"{len(mods)} modules of {root.name}: " + (f"{len(cycles)} import cycle(s)" if cycles else "no import cycles"))
    return 1 if cycles else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
