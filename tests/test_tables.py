"""Every op of the op table has a row in every per-stage table.

Adding an op means: a row in compiler/ir/ops.py (shape rule and docs),
compiler/oracle/interp.py (NumPy reference), compiler/ad/vjp.py (VJP) and
compiler/backend/emit/ops.py (MLIR lowering), compiler/oracle/torch_ref.py (PyTorch reference),
compiler/oracle/kinks.py (KINKS or SMOOTH_OPS: where finite differences may not step),
compiler/oracle/progen/makers.py (the program generator), plus a gradient-check case
(tests/test_gradcheck.py) and a compiled-vs-interpreter case
(tests/test_ops_compiled.py), which fail on their own when missing.  This test
names the stage whose row is missing, and checks that every choice of an enum
attribute (reduce_keep's op, gelu's approximate) has its row in each stage's
ATTR_CHOICES table (the interpreter, the emitter and torch_ref always, the VJPs
where a rule reads the attribute, the generator for every surface op), is compiled, and is either gradient-checked or
rejected under reverseMode with a reason.  (cast's dtype choices:
tests/test_dtypes.py and tests/test_language_compiled.py.)
"""
import dataclasses
import importlib

import pytest

from compiler.core.types import f32
from compiler.ir.ops import OPS

STAGE_TABLES = [
    ("compiler.oracle.interp", "NUMPY_OPS"),
    ("compiler.ad.vjp", "VJPS"),
    ("compiler.backend.emit.ops", "LOWERINGS"),
    ("compiler.oracle.torch_ref", "TORCH_OPS"),   # the differential tests' PyTorch reference
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



def test_every_op_is_smooth_or_has_a_kink_row():
    """The finite-difference checks (compiler/oracle/kinks.py) must know where every op is
    not smooth: a new op goes in KINKS (its distances to a kink, jump, pole or domain edge)
    or in SMOOTH_OPS, never in both."""
    from compiler.oracle import kinks
    rows, smooth = set(kinks.KINKS), set(kinks.SMOOTH_OPS)
    assert not rows & smooth, f"in both KINKS and SMOOTH_OPS: {', '.join(sorted(rows & smooth))}"
    missing = sorted(set(OPS) - rows - smooth)
    assert not missing, f"compiler/oracle/kinks.py does not classify: {', '.join(missing)}"
    assert not (rows | smooth) - set(OPS), f"unknown ops: {', '.join(sorted((rows | smooth) - set(OPS)))}"

# ---- attribute choices ------------------------------------------------------------------------
# Stages whose ATTR_CHOICES must cover every enum attribute (they compute values: the
# interpreter, the emitter and the differential tests' PyTorch reference), the VJP stage,
# which must cover the enum attributes of every op with a VJP rule, and the program
# generator, which must draw every choice of a surface op (internal ops are generated
# through the VJP of a surface op, so they inherit its choices).
VALUE_STAGES = ["compiler.oracle.interp", "compiler.backend.emit.ops", "compiler.oracle.torch_ref"]
CHOICE_STAGES = [*VALUE_STAGES, "compiler.ad.vjp", "compiler.oracle.progen.makers"]


def _needs_table(module: str, name: str, op) -> bool:
    from compiler.ad.vjp import VJPS
    if module == "compiler.ad.vjp":
        return name in VJPS and VJPS[name].rule is not None
    if module == "compiler.oracle.progen.makers":
        return not op.internal
    return True


def missing_choice_rows(ops) -> list[str]:
    """What is missing for the enum attributes of `ops` in the stages' ATTR_CHOICES, in words."""
    problems = []
    stages = {m: importlib.import_module(m).ATTR_CHOICES for m in CHOICE_STAGES}
    for name, op in ops.items():
        for a in op.attrs:
            if a.kind != "enum":
                continue
            for module, tables in stages.items():
                needed = _needs_table(module, name, op)
                table = tables.get((name, a.name))
                if table is None:
                    if needed:
                        problems.append(f"{module}.ATTR_CHOICES has no table for {name}'s `{a.name}`")
                    continue
                missing = [c for c in a.choices if c not in table]
                extra = sorted(set(table) - set(a.choices))
                if missing:
                    problems.append(f"{module}.ATTR_CHOICES[{(name, a.name)!r}] has no row for: {', '.join(missing)}")
                if extra:
                    problems.append(f"{module}.ATTR_CHOICES[{(name, a.name)!r}] has rows for unknown choices: "
                                    f"{', '.join(extra)}")
    for module, tables in stages.items():
        for (name, attr) in tables:
            spec = ops[name].attr(attr) if name in ops else None
            if spec is None or spec.kind != "enum":
                problems.append(f"{module}.ATTR_CHOICES has a table for {name}'s `{attr}`, not an enum attribute")
    return problems


def test_every_attribute_choice_has_its_stage_rows():
    problems = missing_choice_rows(OPS)
    assert not problems, "\n".join(problems)


def test_a_new_choice_without_its_rows_is_named():
    """Adding a choice (`prod`) to reduce_keep's op (as `min` once passed every coverage test
    and crashed `run` and `emit` with a KeyError) is reported, row by row."""
    op = OPS["reduce_keep"]
    spec = op.attr("op")
    widened = dataclasses.replace(spec, choices=spec.choices + ("prod",))
    ops = {**OPS, "reduce_keep": dataclasses.replace(op, attrs=tuple(widened if a is spec else a for a in op.attrs))}
    assert missing_choice_rows(ops) == [
        f"{m}.ATTR_CHOICES[('reduce_keep', 'op')] has no row for: prod"
        for m in ("compiler.oracle.interp", "compiler.backend.emit.ops", "compiler.oracle.torch_ref", "compiler.ad.vjp",
                  "compiler.oracle.progen.makers")]


def test_a_new_gelu_choice_without_its_rows_is_named():
    """gelu's `approximate` reaches the internal gelu_grad through the VJP: a new choice needs
    rows for both ops in the value stages, and one for gelu in the VJP and generator tables."""
    ops = dict(OPS)
    for name in ("gelu", "gelu_grad"):
        op = OPS[name]
        spec = op.attr("approximate")
        widened = dataclasses.replace(spec, choices=spec.choices + ("sigmoid",))
        ops[name] = dataclasses.replace(op, attrs=tuple(widened if a is spec else a for a in op.attrs))
    missing = set(missing_choice_rows(ops))
    want = {f"{m}.ATTR_CHOICES[({name!r}, 'approximate')] has no row for: sigmoid"
            for name in ("gelu", "gelu_grad") for m in VALUE_STAGES}
    want |= {f"{m}.ATTR_CHOICES[('gelu', 'approximate')] has no row for: sigmoid"
             for m in ("compiler.ad.vjp", "compiler.oracle.progen.makers")}
    assert missing == want


def test_value_flow_facts_are_op_fields():
    """ir/uses.py reads the op rows: layout ops, index bounds and positive domains."""
    from compiler.core.types import i64
    assert {n for n, op in OPS.items() if op.layout} == {"reshape", "transpose", "broadcast", "slice", "concat"}
    assert {n for n, op in OPS.items() if op.index_bound} == set(
        n for n, op in OPS.items() if op.index_operands)
    assert OPS["gather"].index_bound([f32(7, 2), i64(3)], {}) == 7
    assert OPS["log"].positive({}) and not OPS["pow"].positive({"p": 2.0}) and OPS["pow"].positive({"p": 0.5})


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
    from test_gradcheck import CASES_BY_OP, checked_program

    from compiler.ad.vjp import VJPS
    from compiler.ir.nodes import OpApp, Var
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
