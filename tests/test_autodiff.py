"""reverseMode (compiler/ad/transform.py): structure of the generated functions and the restrictions.

Numerical correctness of every VJP row is tests/test_gradcheck.py.  The
rejections are inline-expectation files in tests/ad_cases/, read by
tests/expectations.py like the checker's cases (`// E[code]: <whole message>`,
`// N: <whole note>`) and analysed by the front end `kinac check` and the language
server run; files without expectations must be accepted, and lowering the handles
of each file reports the same restrictions (with a note at the `handle`).
"""
from pathlib import Path

import expectations
import numpy as np
import pytest

from compiler.ad.transform import check_differentiable, lower_handles, transform_ad
from compiler.ad.vjp import VJPS, Builder
from compiler.analysis import analyze
from compiler.core.diagnostics import CODES
from compiler.core.types import TensorType, TupleType, f32, i64
from compiler.ir import nodes as ir
from compiler.ir.ops import OPS

CASES = Path(__file__).parent / "ad_cases"


def load(path: Path) -> ir.Program:
    """The checked program of a case file (which may break reverseMode's restrictions only)."""
    snap = analyze(path.read_text(), path.name)
    assert all(d.code.startswith("ad-") for d in snap.diagnostics), [d.message for d in snap.diagnostics]
    return snap.program


def ops_of(fn: ir.Function) -> list[str]:
    return [node.op for b in fn.lets for node in ir.walk(b.value) if isinstance(node, ir.OpApp)]


# ---- inline-expectation cases --------------------------------------------------------------
@pytest.mark.parametrize("path", sorted(CASES.glob("*.kina")), ids=lambda p: p.stem)
def test_ad_case(path):
    problems = expectations.check_file(path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", sorted(CASES.glob("*.kina")), ids=lambda p: p.stem)
def test_lowering_handles_reports_what_the_front_end_reports(path):
    """lower_handles (what the build and the interpreter run) rejects exactly what the
    front end's reverseMode check reports, each with a note at its `handle`."""
    snap = analyze(path.read_text(), path.name)
    _, diags = lower_handles(snap.program)
    assert all(d.code in CODES for d in diags)
    handle_notes = [n for d in diags for n in d.notes if "is differentiated by this" in n.message]
    assert len(handle_notes) == len(diags)
    without = sorted((d.code, d.message, d.span, tuple(n for n in d.notes if n not in handle_notes)) for d in diags)
    assert without == sorted((d.code, d.message, d.span, d.notes) for d in snap.diagnostics)


def test_inlined_violation_has_a_note_at_the_call():
    text = (CASES / "inlined_helper.kina").read_text()
    (diag,) = check_differentiable(load(CASES / "inlined_helper.kina"), "f")
    (note,) = diag.notes
    assert text[note.span.start:note.span.end] == "norm(x)"


def test_method_chain_span_is_the_nested_child():
    path = CASES / "method_chain.kina"
    (diag,) = check_differentiable(load(path), "f")
    assert path.read_text()[diag.span.start:diag.span.end] == "x.reshape([2, 2, 4])"


def test_handle_diagnostics_carry_a_note_at_the_handle():
    path = CASES / "reduce_mean.kina"
    _, (diag,) = lower_handles(load(path))
    assert any("handle" in n.message and path.read_text()[n.span.start:].startswith("handle loss")
               for n in diag.notes)


_GENERIC_MEAN = """
fn means[B, D](x: Tensor[F32, [B * 3, D]]) -> Tensor[F32, [1, D]] {
  MEAN
}

fn step[B, D](x: Tensor[F32, [B * 3, D]]) -> Tensor[F32, [B * 3, D]] {
  let (m, g) = handle means[B, D](x) with reverseMode in
  g
}
"""


def test_the_mean_rejection_writes_the_sum_with_the_axis_size():
    """In a generic function the size of the mean's axis is a size expression: the
    diagnostic writes the rewrite with it, and that rewrite is differentiable."""
    snap = analyze(_GENERIC_MEAN.replace("MEAN", "let m = x.reduce_keep(op=mean, axis=0) in\n  m"), "m.kina")
    (diag,) = snap.diagnostics
    assert diag.code == "ad-unsupported"
    assert diag.message.endswith("write it as reduce_keep(op=sum, axis=0) times 1.0 / (3*B) (the size of axis 0)")
    fixed = "let s = x.reduce_keep(op=sum, axis=0) in\n  let m = s * (1.0 / (3*B)) in\n  m"
    assert analyze(_GENERIC_MEAN.replace("MEAN", fixed), "m.kina").diagnostics == []


# ---- the table -------------------------------------------------------------------------------
@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_has_a_vjp_row(op):
    row = VJPS[op]
    assert row.rule is not None or row.unsupported, f"VJPS[{op!r}] has neither a rule nor a reason"


@pytest.mark.parametrize("op", ["scatter_add", "scatter_along_axis", "relu_grad", "maximum_grad", "clamp_grad",
                                "gelu_grad"])
def test_backward_only_ops_are_rejected(op):
    b = Builder("f")
    g, x = ir.Var("g", f32(2, 3)), ir.Var("x", f32(2, 3))
    idx = ir.Var("idx", i64(2))
    if op == "scatter_add":
        y = b.expr(ir.scatter_add(g, idx, f32(5, 3)))
    elif op == "scatter_along_axis":
        idx = ir.Var("idx", i64(2, 3))
        y = b.expr(ir.scatter_along_axis(g, idx, 1, f32(2, 4)))
    elif op == "maximum_grad":
        y = b.emit("maximum_grad", [g, x, x])
    elif op == "clamp_grad":
        y = b.emit("clamp_grad", [g, x], min=0.0, max=1.0)
    elif op == "gelu_grad":
        y = b.emit("gelu_grad", [g, x], approximate="none")
    else:
        y = b.emit("relu_grad", [g, x])
    fn = b.function("f", [g, idx, x], y)
    rev, (diag,) = transform_ad(ir.Program({"f": fn}), "f")
    assert rev is None and diag.code == "ad-unsupported" and op in diag.message


def test_tuple_result_is_rejected():
    b = Builder("f")
    x = ir.Var("x", f32(2))
    e = b.emit("exp", [x])
    t = b.expr(ir.MakeTuple([x, e], TupleType((f32(2), f32(2)))))
    rev, (diag,) = transform_ad(ir.Program({"f": b.function("f", [x], t)}), "f")
    assert rev is None and diag.code == "ad-result" and "tuple" in diag.message


def test_unknown_function():
    rev, (diag,) = transform_ad(ir.Program({}), "nope")
    assert rev is None and diag.code == "unknown-name"


# ---- structure of the generated functions -------------------------------------------------
def gather_fn() -> ir.Program:
    b = Builder("f")
    emb, ids = ir.Var("emb", f32(8, 4)), ir.Var("ids", i64(1, 4))
    x = b.emit("gather", [emb, ids], name="x")
    return ir.Program({"embed": b.function("embed", [emb, ids], x)})


def test_gather_backward_is_scatter_add_not_scatter_along_axis():
    rev, diags = transform_ad(gather_fn(), "embed")
    assert not diags
    assert rev.name == "embed.rev"
    assert "scatter_add" in ops_of(rev) and "scatter_along_axis" not in ops_of(rev)
    (node,) = [b.value for b in rev.lets if isinstance(b.value, ir.OpApp) and b.value.op == "scatter_add"]
    assert node.attrs["dest_ty"] == f32(8, 4) and node.args[1].name == "ids"


def test_i64_parameter_is_absent_from_the_result():
    rev, _ = transform_ad(gather_fn(), "embed")
    assert rev.ret_type == TupleType((f32(1, 4, 4), f32(8, 4)))
    assert [p.name for p in rev.params] == ["emb", "ids"]
    assert [i.name for i in rev.result.items][0] == "x"


def test_no_floating_params_returns_the_primal():
    b = Builder("f")
    ids = ir.Var("ids", i64(2))
    x = b.expr(ir.Literal((1.0,), f32(2)), name="x")
    rev, diags = transform_ad(ir.Program({"f": b.function("f", [ids], x)}), "f")
    assert not diags and rev.ret_type == f32(2) and isinstance(rev.result, ir.Var)


def test_param_without_contribution_gets_zeros_and_lets_are_skipped():
    b = Builder("f")
    x, unused = ir.Var("x", f32(2, 3)), ir.Var("unused", f32(2, 3))
    b.emit("reduce_keep", [x], name="m", op="max", axis=1)      # never reaches the result
    y = b.emit("exp", [x], name="y")
    rev, diags = transform_ad(ir.Program({"f": b.function("f", [x, unused], y)}), "f")
    assert not diags
    g_unused = rev.result.items[2]
    (zero,) = [bd.value for bd in rev.lets if bd.names == [g_unused.name]]
    assert isinstance(zero, ir.Literal) and zero.values == () and zero.type == f32(2, 3)
    assert ops_of(rev).count("reduce_keep") == 1                  # only the forward one


def _nll(second_use: bool) -> ir.Program:
    """mean(-log_softmax(x)[t]) over 4 rows of 6 classes; second_use adds the row sums of
    logp to the loss (label smoothing's shape: logp's cotangent is then no pure one-hot)."""
    b = Builder("f")
    x, t = ir.Var("x", f32(4, 6)), ir.Var("t", i64(4, 1))
    logp = b.emit("log_softmax", [x], name="logp", axis=1)
    picked = b.emit("take_along_axis", [logp, t], name="picked", axis=1)
    loss = b.emit("reduce_keep", [picked], name="total", op="sum", axis=0)
    if second_use:
        rows = b.emit("reduce_keep", [logp], name="rows", op="sum", axis=1)
        loss = b.emit("add", [loss, b.emit("reduce_keep", [rows], name="all", op="sum", axis=0)], name="both")
    return ir.Program({"f": b.function("f", [x, t], loss)})


def test_log_softmax_backward_takes_a_one_hot_cotangents_row_sums_from_its_picks():
    """The row sums of take_along_axis's one-hot cotangent are its picks' cotangent: no
    reduce_keep over the scatter (an [N, V] pass); with a second use of logp they stay."""
    for second_use, sums in ((False, 0), (True, 1)):
        rev, diags = transform_ad(_nll(second_use), "f")
        assert not diags
        scatters = {bd.names[0] for bd in rev.lets if isinstance(bd.value, ir.OpApp) and bd.value.op == "scatter_along_axis"}
        summed = [bd for bd in rev.lets if isinstance(bd.value, ir.OpApp) and bd.value.op == "reduce_keep"
                  and bd.value.attrs["axis"] == 1 and isinstance(bd.value.args[0], ir.Var)
                  and (bd.value.args[0].name in scatters or second_use and bd.names[0].endswith("reduce_keep"))]
        assert len(scatters) == 1 and len(summed) == sums, (second_use, [bd.names for bd in summed])
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    t = np.array([[1], [5], [0], [3]], np.int64)
    from compiler.oracle import interp
    g = interp.run_function(ir.Program({"f.rev": transform_ad(_nll(False), "f")[0]}), "f.rev", [x, t])[1]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True) - np.eye(6, dtype=np.float32)[t[:, 0]]
    np.testing.assert_allclose(g, -want, rtol=1e-5, atol=1e-6)      # d(sum of log-probs)/dx


def test_contributions_are_summed():
    b = Builder("f")
    x = ir.Var("x", f32(3))
    y = b.emit("mul", [x, x], name="y")
    rev, _ = transform_ad(ir.Program({"f": b.function("f", [x], y)}), "f")
    (g_x,) = rev.result.items[1:]
    (acc,) = [bd.value for bd in rev.lets if bd.names == [g_x.name]]
    assert acc.op == "add"


def test_backward_lets_are_single_ops_on_vars_with_fresh_names():
    program = load(CASES / "ok_storylm0_step.kina")
    rev, _ = transform_ad(program, "storylm0_fwd")
    names = [n for b in rev.lets for n in b.names]
    assert len(names) == len(set(names))
    user = {n for b in program.functions["storylm0_fwd"].lets for n in b.names}
    assert all("." in n for n in names if n not in user)
    for b in rev.lets:
        assert all(isinstance(c, ir.Var) for c in ir.children(b.value)), b.names


def test_matmul_backward_uses_transpose_last_two():
    b = Builder("f")
    q, k = ir.Var("q", f32(1, 2, 4, 2)), ir.Var("k", f32(1, 2, 2, 4))
    s = b.emit("matmul", [q, k], name="s")
    rev, _ = transform_ad(ir.Program({"f": b.function("f", [q, k], s)}), "f")
    perms = [bd.value.attrs["perm"] for bd in rev.lets
             if isinstance(bd.value, ir.OpApp) and bd.value.op == "transpose"]
    assert perms == [(0, 1, 3, 2), (0, 1, 3, 2)]
    assert ops_of(rev).count("matmul") == 3


STORYLM0_PARAMS = ["emb", "mask", "scale", "wq", "wk", "wv", "wo", "lm_head"]
STORYLM0_SHAPES = [(8, 4), (1, 1, 4, 4), (1, 1, 1, 1), (4, 4), (4, 4), (4, 4), (4, 4), (4, 8)]


def test_storylm0_step_result_tuple():
    rev, diags = transform_ad(load(CASES / "ok_storylm0_step.kina"), "storylm0_fwd")
    assert not diags
    assert rev.ret_type == TupleType((f32(1, 4, 8), *(f32(*s) for s in STORYLM0_SHAPES)))
    assert "scatter_add" in ops_of(rev)


def test_storylm0_mean_nll_result_tuple_and_inlining():
    program = load(CASES / "ok_storylm0_mean_nll.kina")
    rev, diags = transform_ad(program, "storylm0_nll")
    assert not diags
    assert rev.ret_type == TupleType((f32(1, 1), *(f32(*s) for s in STORYLM0_SHAPES), f32(1, 1)))
    assert not any(isinstance(b.value, ir.CallFn) for b in rev.lets)     # attn was inlined
    assert {"scatter_add", "scatter_along_axis", "softmax"} <= set(ops_of(rev))


def test_lower_handles_replaces_every_handle():
    program = load(CASES / "ok_storylm0_step.kina")
    lowered, diags = lower_handles(program)
    assert not diags and "storylm0_fwd.rev" in lowered.functions
    for fn in lowered.functions.values():
        for b in fn.lets:
            assert not any(isinstance(n, ir.Handle) for n in ir.walk(b.value))
    calls = [b.value for b in lowered.functions["step"].lets if isinstance(b.value, ir.CallFn)]
    assert [c.fn for c in calls] == ["storylm0_fwd.rev"]
    assert calls[0].type == program.functions["step"].lets[0].value.type
    # the input program is left untouched
    assert isinstance(program.functions["step"].lets[0].value, ir.Handle)


def test_generated_types_match_the_op_table():
    """Re-infer every backward node: the AD pass builds only well-typed IR."""
    rev, _ = transform_ad(load(CASES / "ok_storylm0_mean_nll.kina"), "storylm0_nll")
    for b in rev.lets:
        if isinstance(b.value, ir.OpApp):
            assert OPS[b.value.op].infer([a.type for a in b.value.args], b.value.attrs) == b.value.type


def test_storylm0_step_sgd_matches_reference_cotangent():
    """The step (SGD on emb) equals emb - lr * g_emb with g_emb from the generated function."""
    from compiler.oracle.interp import random_inputs, run_function
    program = load(CASES / "ok_storylm0_step.kina")
    args = random_inputs(program.functions["step"], seed=3, program=program)
    new_emb = run_function(program, "step", args)
    out = run_function(program, "storylm0_fwd", args[:-1])
    assert out.shape == (1, 4, 8)
    lowered, _ = lower_handles(program)
    lowered.functions["probe"] = lowered.functions["storylm0_fwd.rev"]
    grads = run_function(lowered, "probe", args[:-1])
    np.testing.assert_allclose(new_emb, args[1] - args[-1][0, 0] * grads[1], rtol=1e-5, atol=1e-6)
    assert isinstance(grads[1], np.ndarray) and grads[1].dtype == np.float32
    assert all(isinstance(t, TensorType) for t in lowered.functions["probe"].ret_type.items)


def test_backward_nodes_carry_the_span_of_the_forward_op_they_differentiate():
    """So the emitted MLIR's loc(...) (and any toolchain error) names a Kina line."""
    path = CASES / "ok_storylm0_step.kina"
    text = path.read_text()
    program = load(path)
    target = next(h.fn for f in program.functions.values() for b in f.lets
                  for h in ir.walk(b.value) if isinstance(h, ir.Handle))
    rev, diags = transform_ad(program, target)
    assert not diags
    forward_spans = {ir_node.span for b in program.functions[target].lets for ir_node in ir.walk(b.value)}
    backward = rev.lets[len(program.functions[target].lets):]
    assert any(isinstance(b.value, ir.OpApp) and b.value.op == "scatter_add" for b in backward)
    for b in backward:
        span = b.value.span
        assert span != ir.NO_SPAN and 0 <= span.start < span.end <= len(text), (b.names, span)
        if isinstance(b.value, ir.OpApp) and b.value.op == "scatter_add":
            assert span in forward_spans and text[span.start:span.end].startswith("gather(")


# ---- nested operands that receive no cotangent ----------------------------------------------
def test_inert_nested_operands_get_lets_of_their_own_and_the_walk_sees_only_vars():
    rev, diags = transform_ad(load(CASES / "ok_inert_operands.kina"), "f")
    assert diags == [] and rev is not None
    inert = {b.names[0]: b.value for b in rev.lets if b.names[0].startswith("inert.")}
    kinds = sorted(str(v.type.dtype) for v in inert.values())
    assert kinds == ["Bool", "Bool"] + ["F32"] * 5 + ["I64"]   # 2 conditions, 5 constants, 1 index
    for b in rev.lets:   # the differentiated lets and the backward ones: single ops on variables
        if not b.names[0].startswith("inert.") and isinstance(b.value, ir.OpApp):
            assert all(isinstance(a, ir.Var) for a in b.value.args), b


def test_inlined_helpers_are_reported_in_their_own_names():
    (diag,) = check_differentiable(load(CASES / "inlined_nested.kina"), "loss")
    assert "`mu.broadcast(..)`" in diag.message and "layer_norm.1" not in diag.message


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("case, wrt", [("ok_inert_operands", {"d/d x", "d/d y", "d/d table"}),
                                       ("ok_nested_call", {"d/d x", "d/d w"})])
def test_ok_cases_validate_against_finite_differences(tmp_path, level, case, wrt):
    """`kinac validate --exhaustive`: compiled vs interpreter, and every cotangent vs finite differences."""
    from compiler.oracle import validate
    path = tmp_path / f"{case}.kina"
    path.write_text((CASES / f"{case}.kina").read_text())
    report = validate.validate_file(path, opt_level=level, exhaustive=True)
    assert report.ok, validate.format_report(report)
    fd = {c.name for f in report.functions for c in f.checks if c.reference == "finite differences"}
    assert fd == wrt


_GENERIC_BIAS = """fn dense[N, O](x: Tensor[F32, [N, O]], b: Tensor[F32, [O]]) -> Tensor[F32, [N, O]] {
  let bb = b.broadcast([N, O]) in
  let y = x + bb in
  y
}
fn g(x: Tensor[F32, [6, 3]], b: Tensor[F32, [3]]) -> (Tensor[F32, [6, 3]], Tensor[F32, [6, 3]], Tensor[F32, [3]]) {
  handle dense(x, b) with reverseMode
}
"""


def test_the_rank_broadcast_rejection_writes_sizes_by_name():
    """A generic function's target shape is written as Kina writes it ([N, O]), never as the
    sizes' Python repr (it said [Size(N), Size(O)])."""
    (diag,) = analyze(_GENERIC_BIAS, "d.kina").diagnostics
    assert diag.code == "ad-unsupported" and "Size(" not in diag.message
    assert "shape [N, O] changes the rank" in diag.message and "t.broadcast([N, O])" in diag.message


# The minimal program of the two-file port's report: the rejection inside an inlined generic
# helper named the caller's variable at the instance's size (`b1.reshape([1, 64])`) in a
# message about the helper's line, and the note named the instance `dense$8_20_64`.
_INLINED_BIAS = """fn dense[N, I, O](x: Tensor[F32, [N, I]], w: Tensor[F32, [I, O]], b: Tensor[F32, [O]]) -> Tensor[F32, [N, O]] {
  let h = x @ w in
  let bb = b.broadcast([N, O]) in
  let y = h + bb in
  y
}
fn loss(x: Tensor[F32, [8, 20]], w1: Tensor[F32, [20, 64]], b1: Tensor[F32, [64]]) -> Tensor[F32, [1, 1]] {
  let h = dense(x, w1, b1) in
  let r = h.reduce_keep(op=sum, axis=1) in
  let s = r.reduce_keep(op=sum, axis=0) in
  s
}
fn step(x: Tensor[F32, [8, 20]], w1: Tensor[F32, [20, 64]], b1: Tensor[F32, [64]]) -> (Tensor[F32, [1, 1]], Tensor[F32, [8, 20]], Tensor[F32, [20, 64]], Tensor[F32, [64]]) {
  handle loss(x, w1, b1) with reverseMode
}
"""


def test_a_rejection_inside_an_inlined_helper_is_worded_in_the_helpers_names_and_sizes():
    (diag,) = analyze(_INLINED_BIAS, "d.kina").diagnostics
    assert diag.code == "ad-unsupported"
    assert "`let t = b.reshape([1, O]) in t.broadcast([N, O])`" in diag.message
    assert "b1" not in diag.message and "64" not in diag.message
    assert _INLINED_BIAS[diag.span.start:diag.span.end] == "b.broadcast([N, O])"
    call = next(n for n in diag.notes if "inlined from" in n.message)
    assert "`dense` in `loss`" in call.message and _INLINED_BIAS[call.span.start:call.span.end].startswith("dense(")
