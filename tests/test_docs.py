"""The op tables of docs/language.md and docs/compiling.md are generated from the op
table (scripts/gen_op_docs.py, `make docs`) and checked like goldens: a changed op row,
attribute or lowering docstring fails here until the docs are regenerated."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gen_op_docs.py"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_op_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("doc", ["docs/language.md", "docs/compiling.md"])
def test_op_tables_are_up_to_date(doc):
    old, new = _gen().regenerate()[ROOT / doc]
    assert old == new, f"the op tables in {doc} are stale: run `make docs`"


def test_every_op_is_in_the_docs():
    gen = _gen()
    from compiler.backend.emit.ops import LOWERINGS
    from compiler.ir.ops import OPS
    tables = gen.surface_table() + gen.internal_table()
    assert all(f"| `{name}` |" in tables for name in OPS)
    lowered = gen.lowering_table()
    assert all(f"`{name}`" in lowered for name in LOWERINGS)


def test_a_changed_row_is_caught(monkeypatch, tmp_path):
    """The check sees a doc line of an op change (here: reduce_keep's), and names the file."""
    gen = _gen()
    import dataclasses

    from compiler.ir import ops
    (tmp_path / "docs").mkdir()
    for doc in ("language.md", "compiling.md"):
        (tmp_path / "docs" / doc).write_text((ROOT / "docs" / doc).read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setitem(ops.OPS, "reduce_keep", dataclasses.replace(ops.OPS["reduce_keep"], doc="changed"))
    stale = {p.name for p, (old, new) in gen.regenerate(tmp_path).items() if old != new}
    assert stale == {"language.md"}


def test_check_mode_exits_clean():
    r = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "up to date" in r.stdout, r.stderr


def test_internals_names_only_what_exists():
    """docs/internals.md (the module contracts and "Adding an op") names real files, and
    the tables it says a module holds (the stage rows "Adding an op" tells a newcomer to
    edit) are there."""
    import importlib
    import re
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`?((?:compiler|tests|editors|kina_lsp|scripts|docs)/[\w./-]+\.(?:py|md|json|lark))", text))
    assert paths and not sorted(p for p in paths if not (ROOT / p).exists())
    contracts = re.findall(r"^((?!tests/)[\w/]+)\.py\b", text, re.M)   # the contract entries
    assert contracts and not sorted(m for m in contracts if not (ROOT / "compiler" / f"{m}.py").exists())
    for module, names in {"ad/vjp": ["VJPS", "Builder", "ATTR_CHOICES"], "oracle/interp": ["NUMPY_OPS", "ATTR_CHOICES"],
                          "backend/emit/ops": ["LOWERINGS", "ATTR_CHOICES", "elementwise"], "ir/nodes": ["HANDLERS"],
                          "syntax/lex": ["KEYWORDS", "tokens", "word_at"],
                          "syntax/parse": ["parse_module", "parse_item", "parse_local"],
                          "syntax/items": ["split_items", "gaps", "Item"],
                          "syntax/builder": ["PARSER", "MAX_DEPTH", "SyntaxProblem"],
                          "syntax/errors": ["error_diagnostic", "failure_diagnostic"],
                          "syntax/recovery": ["recover", "MAX_ERRORS_PER_ITEM"],
                          "syntax/walk": ["children", "shift"],
                          "analysis": ["Analysis", "analyze"],
                          "snapshot": ["Snapshot", "ItemResult", "Item"],
                          "ir/ops": ["OPS", "_UNARY_DOCS", "_UNARY_MATH", "_BINARY_MATH"],
                          "oracle/torch_ref": ["TORCH_OPS", "ATTR_CHOICES"],
                          "oracle/progen/makers": ["MAKERS", "VIA_AD", "ATTR_CHOICES"],
                          "oracle/progen/render": ["SURFACE"]}.items():
        mod = importlib.import_module("compiler." + module.replace("/", "."))
        assert all(hasattr(mod, n) for n in names), (module, names)
        assert f"{module}.py" in text
