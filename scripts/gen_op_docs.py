"""The op tables of the docs, generated from the op table (compiler/ir/ops.py OPS) and the
lowering table (compiler/backend/emit/ops.py LOWERINGS, each row's docstring).

Each table sits between `<!-- generated: NAME -->` and `<!-- end generated: NAME -->`
in its document; everything else in the documents is hand-written.  `make docs` (this
script) rewrites the tables; `--check` exits 1 naming the stale ones, and
tests/test_docs.py runs that check, so a changed op row cannot leave the docs behind.

Run: .venv/bin/python scripts/gen_op_docs.py [--check]
"""
from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.backend.emit.ops import LOWERINGS  # noqa: E402
from compiler.ir.ops import OPS, AttrSpec, OpDef  # noqa: E402

_KIND = {"int": "int", "ints": "int list", "axis": "axis (int; negative counts from the end)",
         "axes": "axis list", "float": "number", "dtype": "a dtype name", "type": "a tensor type"}


def _cell(text: str) -> str:
    """Markdown table cell text: `|` escaped, one line."""
    return " ".join(text.split()).replace("|", "\\|")


def _attr(a: AttrSpec) -> str:
    kind = " or ".join(f"`{c}`" for c in a.choices) if a.kind == "enum" else _KIND[a.kind]
    extras = []
    if not a.required:
        extras.append("may be left out" if a.default is None else f"default `{a.default}`")
    if a.positional:
        extras.append("may be positional")
    return f"`{a.name}`: {kind}" + (f" ({', '.join(extras)})" if extras else "")


def _dtypes(op: OpDef) -> str:
    if op.operands == 0:
        return "— (no operand)"
    if not op.float_only:
        return "any"
    if op.index_operands:
        return "floating; " + ", ".join(f"operand {i + 1} I64 indices" for i in op.index_operands)
    return "floating"


def surface_table() -> str:
    rows = ["| op | surface form | attributes | operand dtypes | typing rule | meaning |",
            "|---|---|---|---|---|---|"]
    for name, op in OPS.items():
        if op.internal:
            continue
        forms = " or ".join(f"`{_cell(f)}`" for f in op.forms())
        attrs = "; ".join(_attr(a) for a in op.attrs) or "—"
        rows.append(f"| `{name}` | {forms} | {_cell(attrs)} | {_dtypes(op)} | {_cell(op.rule)} | {_cell(op.doc)} |")
    return "\n".join(rows)


def internal_table() -> str:
    rows = ["| op | typing rule | meaning |", "|---|---|---|"]
    rows += [f"| `{name}` | {_cell(op.rule)} | {_cell(op.doc)} |" for name, op in OPS.items() if op.internal]
    return "\n".join(rows)


def _lowering_doc(fn: Callable) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n")[0]


def lowering_table() -> str:
    """One row per lowering docstring: the ops it lowers, and what it emits."""
    groups: dict[str, list[str]] = {}
    for name, fn in LOWERINGS.items():
        groups.setdefault(_lowering_doc(fn), []).append(name)
    rows = ["| op | lowering |", "|---|---|"]
    for doc, names in groups.items():
        rows.append(f"| {', '.join(f'`{n}`' for n in names)} | {_cell(doc)} |")
    return "\n".join(rows)


TABLES: dict[str, tuple[str, Callable[[], str]]] = {
    "surface-ops": ("docs/language.md", surface_table),
    "internal-ops": ("docs/language.md", internal_table),
    "lowerings": ("docs/compiling.md", lowering_table),
}


def render(text: str, name: str, table: str) -> str:
    """`text` with the table NAME replaced; ValueError when its markers are missing."""
    pattern = re.compile(rf"(<!-- generated: {name} -->\n).*?(\n<!-- end generated: {name} -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"no `<!-- generated: {name} -->` ... `<!-- end generated: {name} -->` markers")
    return pattern.sub(lambda m: m.group(1) + table + m.group(2), text, count=1)


def regenerate(root: Path = ROOT) -> dict[Path, tuple[str, str]]:
    """path -> (current text, generated text) of every document with a table."""
    out: dict[Path, tuple[str, str]] = {}
    for name, (doc, make) in TABLES.items():
        path = root / doc
        old = out[path][0] if path in out else path.read_text(encoding="utf-8")
        new = out[path][1] if path in out else old
        out[path] = (old, render(new, name, make()))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a table is out of date; change nothing")
    args = p.parse_args(argv)
    stale = []
    for path, (old, new) in regenerate().items():
        if old == new:
            continue
        stale.append(path.relative_to(ROOT))
        if not args.check:
            path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"stale op tables in {', '.join(map(str, stale))}: run `make docs`", file=sys.stderr)
        return 1
    print(("rewrote " + ", ".join(map(str, stale))) if stale else "op tables up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
