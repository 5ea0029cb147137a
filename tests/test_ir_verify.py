"""ir.verify: the typing rules re-run on every node between stages.  Clean on everything
the front end and the AD pass produce; a diagnostic (never an assertion) at the node for
each kind of ill-typed IR; and `kinac build` stops at it, before any MLIR is emitted."""
import dataclasses
from pathlib import Path

import pytest

from compiler import analysis, build
from compiler.ad import transform as autodiff
from compiler.ad import vjp
from compiler.core.types import DType, TensorType, TupleType, f32, i64
from compiler.ir import nodes as ir
from compiler.ir.nodes import Binding, Function, Literal, MakeTuple, OpApp, Program, Var
from compiler.ir.verify import verify as verify_ir

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for p in [*ROOT.glob("examples/*.kina"), *ROOT.glob("tests/ad_cases/ok_*.kina"),
                             *ROOT.glob("tests/regressions/*.kina")]
                 if not p.name.startswith("invalid_") and p.read_text().strip())


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.stem)
def test_checked_and_lowered_programs_verify(path):
    snap = analysis.analyze(path.read_text(), str(path))
    assert not [d for d in snap.diagnostics if d.severity == "error"]
    assert verify_ir(snap.program, "check") == []
    lowered, diags = autodiff.lower_handles(snap.program)
    assert not diags
    assert verify_ir(lowered, "reverseMode") == []


X23 = f32(2, 3)


def _fn(lets, result, params=(("x", X23),)) -> Program:
    fn = Function("f", [ir.Param(n, t) for n, t in params], result.type,
                  [Binding([n], v, span=v.span) for n, v in lets], result)
    return Program({"f": fn})


def _one(program) -> str:
    (d,) = verify_ir(program, "a test pass")
    assert d.code == "ir-verify" and d.severity == "error"
    assert d.message.startswith("internal compiler error after a test pass: in `f`: ")
    return d.message


def test_a_rule_violation_is_a_diagnostic_at_the_node():
    # ScatterAdd with rank-0 indices: what the gather VJP built before issue 11's fix.
    upd = Var("u", f32(4))
    bad = OpApp("scatter_add", [upd, Var("i", i64())], {"dest_ty": f32(8, 4)}, f32(8, 4), ir.Span(10, 20))
    prog = _fn([("s", bad)], Var("s", f32(8, 4)), params=(("u", f32(4)), ("i", i64())))
    assert "indices" in _one(prog) and "rank >= 1" in _one(prog)
    assert verify_ir(prog)[0].span == ir.Span(10, 20)


def test_wrong_recorded_types_and_names():
    x = Var("x", f32(2, 3))
    wrong_type = OpApp("exp", [x], {}, f32(3, 2))
    assert "records" in _one(_fn([("y", wrong_type)], Var("y", f32(3, 2))))
    assert "bound to" in _one(_fn([], Var("x", f32(3, 3))))
    assert "not bound" in _one(_fn([], Var("nope", f32(2, 3))))
    assert "declared to return" in _one(dataclasses.replace(_fn([], x), functions={
        "f": dataclasses.replace(_fn([], x).functions["f"], ret_type=f32(1))}))


def test_calls_literals_tuples_and_destructuring():
    x = Var("x", f32(2, 3))
    call = ir.CallFn("g", [x], f32(2, 3))
    assert "no function `g`" in _one(_fn([("y", call)], Var("y", f32(2, 3))))
    lit = Literal((1.0, 2.0), f32(2, 3))
    assert "has 2 values" in _one(_fn([("c", lit)], Var("c", f32(2, 3))))
    idx = Literal((0.5,), i64(2))
    assert "non-integer" in _one(_fn([("c", idx)], Var("c", i64(2))))
    pair = MakeTuple([x, x], TupleType((f32(2, 3), f32(2, 3))))
    prog = _fn([], pair)
    prog.functions["f"].lets.append(Binding(["a", "b", "c"], pair, destructure=True))
    assert "destructures" in _one(prog)


def test_op_arity_and_float_operands():
    i = Var("i", i64(2))
    assert "operands" in _one(_fn([("y", OpApp("add", [i], {}, i64(2)))], Var("y", i64(2)), params=(("i", i64(2)),)))
    assert "floating" in _one(_fn([("y", OpApp("exp", [i], {}, i64(2)))], Var("y", i64(2)), params=(("i", i64(2)),)))


RANK0_GATHER = (ROOT / "tests" / "regressions" / "rank0_gather_ad.kina").read_text()


def test_the_build_stops_at_ill_typed_ad_output(tmp_path, monkeypatch):
    """The gather VJP as it was before the fix: kinac build reports the ill-typed
    ScatterAdd at the gather's line (a diagnostic, not raw MLIR errors)."""
    def old_gather(b, node, y, g, needs):
        values, idx = node.args
        return [b.expr(ir.scatter_add(g, idx, values.type), hint="scatter_add") if needs[0] else None, None]
    monkeypatch.setitem(vjp.VJPS, "gather", vjp.VJP(old_gather))
    res = build.build_source(RANK0_GATHER, "g.kina", tmp_path / "g.so")
    assert not res.ok and res.mlir is None
    (d,) = [d for d in res.diagnostics if d.code == "ir-verify"]
    assert "scatter_add" in d.message and "rank >= 1" in d.message and "`row.rev`" in d.message
    line, _ = res.source.line_col(d.span.start)
    assert RANK0_GATHER.splitlines()[line - 1].strip().startswith("let y = gather(e, i)")


def test_the_fixed_vjp_scatters_a_rank0_index_as_rank1(tmp_path):
    snap = analysis.analyze(RANK0_GATHER)
    lowered, _ = autodiff.lower_handles(snap.program)
    scatters = [e for b in lowered.functions["row.rev"].lets for e in ir.walk(b.value)
                if isinstance(e, OpApp) and e.op == "scatter_add"]
    assert [s.args[1].type for s in scatters] == [TensorType(DType.I64, (1,))]
