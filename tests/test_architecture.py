"""The layout is a contract: stage packages, no import cycles, each package used only
through its public entry points, the names the docs use importable.

The import graph is computed here from the sources themselves (ast), imports inside
function bodies included (a lazy import that closes a cycle is still a cycle); only
`if TYPE_CHECKING:` imports, which exist for annotations, are left out.  `make lint`
checks the same layering with import-linter (pyproject.toml [tool.importlinter]); the
last tests make sure that lint really fails on a back-import.
"""
from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from compiler.check.module_rules import strongly_connected_components

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("compiler", "kina_lsp")
MAX_TOP_LEVEL_MODULES = 8


# ---- the graph ---------------------------------------------------------------------------
def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the two packages; a C extension counts through its .pyi stub."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted([*(root / pkg).rglob("*.py"), *(root / pkg).rglob("*.pyi")]):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def raw_imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) of every import statement, at any depth, outside
    `if TYPE_CHECKING:` blocks; relative imports resolved."""
    is_pkg = path.name == "__init__.py"
    out: list[tuple[str, list[str], int]] = []
    stack: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                stack.extend(child.orelse)
                continue
            if isinstance(child, ast.Import):
                out += [(a.name, [], child.lineno) for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                module = child.module or ""
                if child.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[:len(base) - (child.level - 1)]
                    module = ".".join(base + ([module] if module else []))
                out.append((module, [a.name for a in child.names], child.lineno))
            stack.append(child)
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the project modules it imports (a `from p import m` of a submodule m
    counts as an import of p.m, not of the package p)."""
    mods = module_files(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for module, names, _ in raw_imports(name, path):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in mods] or [module]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (the checker's own Tarjan,
    the one that finds recursive Kina functions)."""
    sccs = strongly_connected_components({node: sorted(targets) for node, targets in sorted(graph.items())})
    return sorted(sorted(comp) for comp in sccs if len(comp) > 1)


def package_of(module: str) -> str:
    """The stage package a module belongs to (compiler.check.expr -> compiler.check); the
    top-level modules of compiler/ and kina_lsp's core are their own nodes."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_the_cycle_finder_finds_a_cycle_made_of_lazy_imports(tmp_path):
    pkg = tmp_path / "compiler"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from compiler import b\n")
    (pkg / "b.py").write_text("def f():\n    from compiler.a import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from compiler import a\n")
    (pkg / "d.py").write_text("from . import c\n")
    (tmp_path / "kina_lsp").mkdir()
    assert cycles(import_graph(tmp_path)) == [["compiler.a", "compiler.b"]]


def test_no_import_cycles_between_modules():
    assert cycles(import_graph()) == []


def test_no_import_cycles_between_packages():
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in import_graph().items():
        graph[package_of(module)] |= {package_of(t) for t in targets} - {package_of(module)}
    assert cycles(dict(graph)) == []


# ---- the layout ---------------------------------------------------------------------------
STAGES = sorted(p.parent.name for p in (ROOT / "compiler").glob("*/__init__.py"))


def test_compiler_top_level_holds_only_the_modules_that_join_stages():
    top = sorted(p.name for p in (ROOT / "compiler").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    assert set(STAGES) >= {"syntax", "check", "ir", "ad", "backend", "runtime", "oracle"}


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_says_what_it_takes_and_gives_and_names_its_entry_points(stage):
    package = importlib.import_module(f"compiler.{stage}")
    doc = package.__doc__ or ""
    assert len(doc.splitlines()) >= 5, f"compiler/{stage}/__init__.py needs a docstring"
    public = getattr(package, "__all__", None)
    assert public, f"compiler/{stage}/__init__.py declares no __all__ (its entry points)"
    missing = [n for n in public if n not in doc]
    assert not missing, f"compiler/{stage}: __all__ names {missing} that the docstring does not mention"
    for name in public:   # every public name exists: a function, a table or a submodule
        importlib.import_module(f"compiler.{stage}.{name}") if not hasattr(package, name) else None


def _public(package: str) -> list[str]:
    return list(importlib.import_module(package).__all__)


def test_other_packages_use_a_stage_only_through_its_entry_points():
    """`from compiler.P import X` needs X in compiler.P.__all__; `compiler.P.M...` needs the
    submodule M in it (modules inside P import each other freely)."""
    mods = module_files()
    bad = []
    for name, path in mods.items():
        home = package_of(name)
        for module, names, line in raw_imports(name, path):
            parts = module.split(".")
            if parts[0] != "compiler" or len(parts) < 2 or f"compiler.{parts[1]}" == home:
                continue
            target = f"compiler.{parts[1]}"
            if parts[1] not in STAGES:
                continue   # a top-level module (build, analysis, ...): its names are its API
            public = _public(target)
            if len(parts) > 2:
                ok = parts[2] in public
                what = f"{target}.{parts[2]}"
            else:
                wrong = [n for n in names if n not in public]
                ok = not wrong
                what = f"{target}: {', '.join(wrong)}"
            if not ok:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {what} is not in {target}.__all__")
    assert not bad, "\n".join(bad)


# ---- the names the docs use ---------------------------------------------------------------
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FROM_RE = re.compile(r"^\s*from (compiler(?:\.\w+)*|kina_lsp(?:\.\w+)*) import ([\w, ]+)", re.M)
_DOTTED_RE = re.compile(r"(?<![\w/.])((?:compiler|kina_lsp)(?:\.[A-Za-z_]\w*)+)")


def documented_names() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in _FROM_RE.finditer(text):
            found += [(doc.name, f"{m[1]}.{n.strip()}") for n in m[2].split(",") if n.strip()]
        found += [(doc.name, m[1].rstrip(".")) for m in _DOTTED_RE.finditer(text)]
    return sorted(set(found))


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_name_the_docs_use_imports():
    names = documented_names()
    assert ("storylm0.md", "compiler.build.build_file") in names   # the finder finds them
    missing = [f"{doc}: {name}" for doc, name in names if not _resolves(name)]
    assert not missing, "\n".join(missing)


# ---- make lint ------------------------------------------------------------------------------
def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is not installed (import-linter is a test dependency: make setup)")
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(cwd), "HOME": str(cwd)}
    return subprocess.run([exe, "--no-cache", "--config", str(cwd / "pyproject.toml")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A copy of the two packages and the contracts, for lint-imports to read."""
    d = tmp_path_factory.mktemp("layering")
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, d / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", d / "pyproject.toml")
    return d


def test_lint_imports_passes_on_the_tree(scratch):
    proc = _lint_imports(scratch)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("compiler/syntax/lex.py", "from compiler import build", "stages"),
    ("compiler/ir/nodes.py", "def _f():\n    from compiler.check import check_function", "stages"),
    ("compiler/backend/tools.py", "def _f():\n    from compiler.backend import toolchain", "no import cycles"),
    ("compiler/format/layout.py", "from compiler.backend import errors", "fmt reads only"),
    ("compiler/runtime/loader.py", "import kina_lsp.convert", "never imports the language server"),
    ("kina_lsp/features/hover.py", "def _f():\n    from kina_lsp import server", "never import the server"),
])
def test_lint_imports_fails_on_a_back_import(scratch, module, line, contract):
    path = scratch / module
    original = path.read_text()
    try:
        path.write_text(original + "\n\n" + line + "\n")
        proc = _lint_imports(scratch)
    finally:
        path.write_text(original)
    assert proc.returncode != 0, proc.stdout
    assert "BROKEN" in proc.stdout and contract in proc.stdout.split("Broken contracts")[-1], proc.stdout
