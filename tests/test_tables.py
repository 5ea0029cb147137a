"""Every op of the op table has a row in every per-stage table.

Adding an op means: a row in compiler/ops.py (shape rule and docs),
compiler/interp.py (NumPy reference), compiler/vjp.py (VJP) and
compiler/emit_ops.py (MLIR lowering), compiler/torch_ref.py (PyTorch reference),
compiler/progen_ops.py (the program generator), plus a gradient-check case
(tests/test_gradcheck.py) and a compiled-vs-interpreter case
(tests/test_ops_compiled.py), which fail on their own when missing.  This test
names the stage whose row is missing, and checks that every choice of an enum
attribute (reduce_keep's op, gelu's approximate) is compiled and either
gradient-checked or rejected under reverseMode with a reason.  (cast's dtype
choices: tests/test_language_compiled.py casts between every pair.)
"""
import importlib

import pytest

from compiler.ops import OPS
from compiler.types import f32

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


# ---- attribute choices ------------------------------------------------------------------------
def _enum_choices():
    """(op, attribute, choice) for every enum attribute of every surface op."""
    return [(name, a.name, c) for name, op in OPS.items() if not op.internal
            for a in op.attrs if a.kind == "enum" for c in a.choices]


@pytest.mark.parametrize("op,attr,choice", _enum_choices())
def test_every_attribute_choice_is_compiled(op, attr, choice):
    """Each enum choice (reduce_keep op=mean, gelu approximate=tanh, ...) is one of the
    compiled-vs-interpreter rows of tests/test_ops_compiled.py, so the NumPy row and the
    lowering both handle it (the default may also be written by leaving it out)."""
    from test_ops_compiled import ROWS
    bodies = [body for row, (_, body, _, _) in ROWS.items() if row.split()[0] == op]
    spec = OPS[op].attr(attr)
    written = any(f"{attr}={choice}" in b for b in bodies)
    defaulted = spec.default == choice and any(f"{attr}=" not in b for b in bodies)
    assert written or defaulted, f"tests/test_ops_compiled.py has no row for {op}({attr}={choice})"


@pytest.mark.parametrize("op,attr,choice", _enum_choices())
def test_every_attribute_choice_has_a_vjp_or_a_reason(op, attr, choice):
    """Each enum choice of a differentiable op is gradient-checked (tests/test_gradcheck.py)
    or rejected under reverseMode with a message (VJPS[op].reject)."""
    from compiler.ir import OpApp, Var
    from compiler.vjp import VJPS
    from test_gradcheck import CASES_BY_OP, checked_program
    row = VJPS[op]
    if row.rule is None:
        assert row.unsupported
        return
    checked = False
    for case in CASES_BY_OP.get(op, []):
        fn = checked_program(case).functions["f"]
        nodes = [b.value for b in fn.lets if isinstance(b.value, OpApp) and b.value.op == op]
        checked = checked or any(n.attrs.get(attr) == choice for n in nodes)
    if checked:
        return
    x = Var("x", f32(2, 3))
    attrs = {a.name: (choice if a.name == attr else (0 if a.kind == "axis" else a.default)) for a in OPS[op].attrs}
    node = OpApp(op, [x], attrs, x.type)
    assert row.reject is not None and row.reject(node), \
        f"{op}({attr}={choice}) is neither gradient-checked nor rejected under reverseMode"
