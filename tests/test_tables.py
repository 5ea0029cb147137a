"""Every op of the op table has a row in every per-stage table.

Adding an op means: a row in compiler/ops.py (shape rule and docs),
compiler/interp.py (NumPy reference), compiler/vjp.py (VJP) and
compiler/emit_ops.py (MLIR lowering), compiler/torch_ref.py (PyTorch reference),
compiler/progen_ops.py (the program generator), plus a gradient-check case
(tests/test_gradcheck.py) and a compiled-vs-interpreter case
(tests/test_ops_compiled.py), which fail on their own when missing.  This test
names the stage whose row is missing.
"""
import importlib

import pytest

from compiler.ops import OPS

STAGE_TABLES = [
    ("compiler.interp", "NUMPY_OPS"),
    ("compiler.vjp", "VJPS"),
    ("compiler.emit_ops", "LOWERINGS"),
    ("compiler.torch_ref", "TORCH_OPS"),   # the differential tests' PyTorch reference
]
# The program generator has a row per surface op (and names the VJP emitting each
# internal op): tests/test_progen.py checks it, and that every op is generated.


@pytest.mark.parametrize("module,table", STAGE_TABLES)
def test_every_op_has_a_row(module, table):
    rows = getattr(importlib.import_module(module), table)
    missing = sorted(set(OPS) - set(rows))
    extra = sorted(set(rows) - set(OPS))
    assert not missing, f"{module}.{table} has no row for: {', '.join(missing)}"
    assert not extra, f"{module}.{table} has rows for unknown ops: {', '.join(extra)}"


def test_op_rows_are_documented():
    for name, op in OPS.items():
        assert op.rule and op.doc, f"ops.OPS[{name!r}] needs a typing rule and a doc line"
