"""The shape and type checker.

Most cases are inline expectations (mypy style) in tests/check_cases/*.kina, read by
tests/expectations.py: `// E[code]: <whole message>` and `// N: <whole note>` on the
line where the diagnostic or note starts; every other line must be clean.  They run
through compiler.analysis, the front end `kinac check`, `kinac build` and the
language server share (test_front_end.py pins that they agree).  The unit tests
below pin the public API: types of the StoryLM-0 lets, handle typing, the IR shape,
exact line:col, hover facts and scale.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import expectations
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.analysis import analyze
from compiler.check.function import ERROR, FunctionResult, Signature, TypeFact, check_function, signature_of
from compiler.core.diagnostics import CODES, Span
from compiler.core.types import DType, TensorType, TupleType, f32, i64
from compiler.ir import nodes as ir
from compiler.ir.ops import OPS
from compiler.snapshot import Snapshot
from compiler.syntax import nodes as syntax
from compiler.syntax.hints import FOREIGN
from compiler.syntax.parse import parse_module

ROOT = Path(__file__).resolve().parent.parent
CASES = sorted((ROOT / "tests" / "check_cases").glob("*.kina"))


def analyse(text: str):
    """The analysis `kinac check` runs: (Snapshot, its diagnostics, its SourceText)."""
    snap = analyze(text)
    return snap, snap.diagnostics, snap.source


# ---- inline expectations ----------------------------------------------------------
@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_case_file(path: Path):
    problems = expectations.check_file(path)
    assert not problems, "\n".join(problems)


def test_cases_cover_forty_distinct_mistakes():
    written = [e for p in CASES for e in expectations.expected(p.read_text())]
    distinct = {(e.kind, e.message) for e in written if e.kind != "N"}
    assert len(distinct) >= 40, len(distinct)
    codes = {kind[2:-1] for kind, _ in distinct}
    checker_codes = {"syntax", "unknown-name", "duplicate", "type-annotation", "shape", "dtype", "placement",
                     "attr", "arity", "return-type", "destructure", "literal", "main", "recursion", "ad-result"}
    assert checker_codes <= codes, checker_codes - codes
    assert any(e.kind == "N" for e in written)


# ---- exact positions --------------------------------------------------------------
THREE_MISTAKES = """\
fn first(a: Tensor[F32, [2, 3]], b: Tensor[F32, [3, 2]]) -> Tensor[F32, [2, 3]] {
  let c = a + b in
  c
}

fn second(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {
  x.reshape([5])
}

fn third(ids: Tensor[I64, [4]], emb: Tensor[F32, [8, 2]]) -> Tensor[F32, [4, 2]] {
  gather(emb, emb)
}
"""


def test_three_independent_mistakes_at_exact_line_col():
    _, diags, src = analyse(THREE_MISTAKES)
    found = [(d.code, *src.line_col(d.span.start), *src.line_col(d.span.end)) for d in diags]
    assert found == [
        ("shape", 2, 15, 2, 16),     # the rhs operand `b`
        ("shape", 7, 13, 7, 16),     # the attribute `[5]`
        ("dtype", 11, 15, 11, 18),   # the indices operand `emb`
    ]


def test_diagnostic_renders_with_caret():
    _, diags, src = analyse(THREE_MISTAKES)
    text = src.render(diags[0])
    assert text.splitlines()[0].startswith("<input>:2:15: error[shape]: add: operand shapes differ")
    assert text.splitlines()[2] == "  " + " " * 14 + "^"


# ---- the StoryLM-0 example -------------------------------------------------------------
def storylm0():
    return analyse((ROOT / "tests" / "fixtures" / "storylm0_forward.kina").read_text())


def let_types(result: Snapshot, fn: str) -> dict[str, object]:
    f = result.program.functions[fn]
    return {n: t for b in f.lets for n, t in zip(b.names, b.types)}


def test_storylm0_forward_checks_clean_with_expected_types():
    result, diags, _ = storylm0()
    assert diags == []
    assert {"attn", "storylm0_forward"} <= set(result.program.functions)
    lets = let_types(result, "storylm0_forward")
    assert str(lets["x"]) == "Tensor[F32, [1, 4, 4], @host]"
    assert lets["q"] == f32(1, 2, 4, 2) and lets["k_t"] == f32(1, 2, 2, 4)
    assert lets["heads"] == f32(1, 2, 4, 2) and lets["merged"] == f32(1, 4, 4)
    fwd = result.program.functions["storylm0_forward"]
    assert fwd.result.type == f32(1, 4, 8) and fwd.ret_type == f32(1, 4, 8)
    assert let_types(result, "attn")["scores"] == f32(1, 2, 4, 4)


def test_method_chains_stay_trees_in_the_ir():
    result, _, _ = storylm0()
    q = next(b for b in result.program.functions["storylm0_forward"].lets if b.names == ["q"]).value
    assert isinstance(q, ir.OpApp) and q.op == "transpose" and q.attrs == {"perm": (0, 2, 1, 3)}
    reshape = q.args[0]
    assert reshape.op == "reshape" and reshape.attrs == {"shape": (1, 4, 2, 2)}
    matmul = reshape.args[0]
    assert matmul.op == "matmul" and isinstance(matmul.args[0], ir.Var)
    assert matmul.args[1].op == "reshape" and matmul.args[1].type == f32(1, 4, 4)
    heads = next(b for b in result.program.functions["storylm0_forward"].lets if b.names == ["heads"]).value
    assert isinstance(heads, ir.CallFn) and heads.fn == "attn" and len(heads.args) == 5


def test_every_ir_node_is_typed_and_spanned():
    result, _, src = storylm0()
    text = src.text
    for f in result.program.functions.values():
        for expr in [b.value for b in f.lets] + [f.result]:
            for node in ir.walk(expr):
                assert isinstance(node.type, (TensorType, TupleType))
                assert 0 <= node.span.start < node.span.end <= len(text)
    r = result.program.functions["storylm0_forward"].result
    assert text[r.span.start:r.span.end] == "residual @ lm_head.reshape([1, 4, 8])"


def test_hover_facts_cover_params_lets_calls_and_subexpressions():
    result, _, src = storylm0()
    facts = {(f.kind, f.name, src.text[f.span.start:f.span.end]): f.type for f in result.types}
    assert facts[("param", "token_ids", "token_ids")] == i64(1, 4)
    assert facts[("let", "x", "x")] == f32(1, 4, 4)
    assert facts[("call", "attn", "attn(q, k_t, v, mask, scale)")] == f32(1, 2, 4, 2)
    assert facts[("expr", "reshape", "wq.reshape([1, 4, 4])")] == f32(1, 4, 4)
    assert facts[("expr", "x", "x")] == f32(1, 4, 4)
    assert facts[("fn", "attn", "attn")] == f32(1, 2, 4, 2)


# ---- handle typing --------------------------------------------------------------------
HANDLE = """\
fn loss(ids: Tensor[I64, [4]], emb: Tensor[F32, [8, 2]], w: Tensor[F32, [2, 2]]) -> Tensor[F32, [4, 2]] {
  let x = gather(emb, ids) in
  let y = x @ w in
  y
}
fn ids_only(ids: Tensor[I64, [4]]) -> Tensor[F32, [4, 1]] {
  let one = Tensor[F32, [4, 1]] { 1.0 } in
  one
}
fn step(ids: Tensor[I64, [4]], emb: Tensor[F32, [8, 2]], w: Tensor[F32, [2, 2]]) -> Tensor[F32, [8, 2]] {
  let r = handle loss(ids, emb, w) with reverseMode in
  let k0 = handle ids_only(ids) with reverseMode in
  let (y, g_emb, g_w) = r in
  emb - g_emb
}
"""


def test_handle_gives_one_cotangent_per_floating_parameter():
    result, diags, _ = analyse(HANDLE)
    assert diags == []
    lets = let_types(result, "step")
    assert lets["r"] == TupleType((f32(4, 2), f32(8, 2), f32(2, 2)))  # I64 ids omitted: a 3-tuple
    assert lets["k0"] == f32(4, 1)                                      # k = 0 collapses to R
    assert lets["g_w"] == f32(2, 2)
    handle = result.program.functions["step"].lets[0].value
    assert isinstance(handle, ir.Handle) and handle.fn == "loss" and handle.handler == "reverseMode"
    assert [a.name for a in handle.args] == ["ids", "emb", "w"]


# ---- the per-function API (used by the incremental analysis) ----------------------------
def test_check_function_reports_calls_and_is_independent_of_order():
    module, _ = parse_module(HANDLE)
    sigs = {fn.name: signature_of(fn)[0] for fn in module.functions}
    assert sigs["loss"] == Signature("loss", [("ids", i64(4)), ("emb", f32(8, 2)), ("w", f32(2, 2))], f32(4, 2))
    res = check_function(module.functions[2], sigs)
    assert isinstance(res, FunctionResult) and res.diagnostics == []
    assert res.calls == {"loss", "ids_only"} and res.function.name == "step"
    assert all(isinstance(t, TypeFact) for t in res.types)


def test_broken_signature_suppresses_cascades_in_callers():
    text = """\
fn f(a: Tensor[F99, [2]]) -> Tensor[F32, [2]] {
  a
}
fn g(b: Tensor[F32, [2]]) -> Tensor[F32, [2]] {
  f(b) + b
}
"""
    result, diags, _ = analyse(text)
    assert [d.code for d in diags] == ["type-annotation"]
    assert "f" not in result.program.functions and "g" in result.program.functions
    sig, sig_diags = signature_of(parse_module(text)[0].functions[0])
    assert sig.params[0][1] is ERROR and len(sig_diags) == 1


def test_calls_of_unparsed_functions_are_silent_but_keep_the_caller_out_of_the_ir():
    text = """\
fn broken(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {
  x +
}
fn caller(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {
  broken(x).exp()
}
"""
    snap, diags, _ = analyse(text)
    assert [d.code for d in diags] == ["syntax"]
    assert "caller" not in snap.program.functions
    assert {f.name for f in snap.types if f.kind == "param"} == {"x"}


def test_notes_suggest_close_names():
    text = """\
fn f(logits: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {
  logit.sofmax(axis=1)
}
fn g(x: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 1]] {
  x.reduce_keep(op=mena, axis=1) + scatter_add(x, x)
}
"""
    _, diags, _ = analyse(text)
    notes = {d.message.split(":")[0]: [n.message for n in d.notes] for d in diags}
    assert notes["unknown name `logit`"] == ["did you mean `logits`?"]
    assert "did you mean `mean`?" in notes["reduce_keep"]
    scatter = next(d for d in diags if "scatter_add" in d.message)
    assert scatter.code == "unknown-name" and "IR-internal" in scatter.notes[0].message


@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_numpy_and_pytorch_names_get_the_kina_spelling(name):
    """`x.sum(..)`, `cat(..)`, `x.T`: the note names the Kina op, not a "did you mean" guess."""
    for body in (f"x.{name}(axis=1)", f"{name}(x, x)", f"x.{name}"):
        text = f"fn f(x: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {{\n  {body}\n}}\n"
        _, diags, _ = analyse(text)
        assert [d.code for d in diags] == ["unknown-name"], body
        notes = [n.message for n in diags[0].notes]
        assert notes == [f"`{name}` is not a Kina op; Kina spells it {FOREIGN[name]}"], (body, notes)


def test_foreign_names_are_not_kina_ops():
    assert not set(FOREIGN) & set(OPS)


def test_literals_lower_to_ir_literal_values():
    text = """\
fn main() -> Tensor[F32, [2, 2]] {
  let ids = Tensor[I64, [2]] { 1, 0 } in
  let p = Tensor[F32, [2, 2]] { 1.0, -2.0, 3, 4.5 } in
  p + Tensor[F32, [2, 2]] {}
}
"""
    result, diags, _ = analyse(text)
    assert diags == []
    main = result.program.functions["main"]
    assert main.lets[0].value == ir.Literal((1, 0), i64(2), main.lets[0].value.span)
    assert main.lets[1].value.values == (1.0, -2.0, 3.0, 4.5)
    assert main.result.args[1].values == () and main.result.args[1].type == f32(2, 2)


def test_hand_built_ast_without_the_parser():
    """The checker depends only on syntax/nodes.py: a hand-built AST checks too."""
    sp = Span(0, 1)
    ty = syntax.TensorTypeExpr("F32", (2, 3), None, sp)
    x = syntax.Name("x", Span(10, 11))
    body = syntax.MethodCall(x, "transpose", sp, (syntax.IntList((1, 0), Span(20, 26)),), (), Span(10, 27))
    fn = syntax.FnDef("t", sp, (syntax.Param("x", sp, ty, sp),), syntax.TensorTypeExpr("F32", (3, 2), "host", sp),
                      body, Span(0, 30))
    res = check_function(fn, {"t": signature_of(fn)[0]})
    assert res.diagnostics == [] and res.function.result.type == f32(3, 2)
    bad = syntax.MethodCall(x, "transpose", sp, (syntax.IntList((0, 0), Span(20, 26)),), (), Span(10, 27))
    fn = dataclasses.replace(fn, body=bad)
    [d] = check_function(fn, {"t": signature_of(fn)[0]}).diagnostics
    assert (d.code, d.span) == ("attr", Span(20, 26))


# ---- robustness: any op application gives a type or a diagnostic, never a traceback ---------
SP = Span(0, 1)
dims = st.lists(st.integers(0, 4), max_size=4).map(tuple)
tensor_types = st.builds(syntax.TensorTypeExpr, st.sampled_from(["F32", "I64", "F16"]), dims,
                         st.sampled_from([None, "host", "device"]), st.just(SP))
attr_values = st.one_of(st.integers(-2, 5), dims, st.lists(st.integers(-1, 4), max_size=4).map(tuple),
                        st.sampled_from(["sum", "mean", "max", "avg"]), st.floats(-2, 2))
attrs = st.lists(st.builds(syntax.Attr, st.sampled_from(["axis", "start", "stop", "perm", "shape", "op", "k"]),
                           st.just(SP), attr_values, st.just(SP), st.just(SP)), max_size=3).map(tuple)
surface = sorted(n for n, op in OPS.items() if not op.internal)


@settings(max_examples=300, deadline=None)
@given(op=st.sampled_from(surface), types=st.lists(tensor_types, min_size=0, max_size=3), attrs=attrs,
       positional=st.one_of(st.none(), dims), method=st.booleans())
def test_any_op_application_types_or_reports(op, types, attrs, positional, method):
    params = [syntax.Param(f"p{i}", SP, t, SP) for i, t in enumerate(types)]
    args = [syntax.Name(p.name, SP) for p in params]
    if positional is not None:
        args.append(syntax.IntList(positional, SP))
    if method and args and isinstance(args[0], syntax.Name):
        body = syntax.MethodCall(args[0], op, SP, tuple(args[1:]), attrs, SP)
    else:
        body = syntax.Call(op, SP, tuple(args), attrs, SP)
    ret = syntax.TensorTypeExpr("F32", (1,), None, SP)
    fn = syntax.FnDef("f", SP, tuple(params), ret, body, SP)
    res = check_function(fn, {"f": signature_of(fn)[0]})
    assert all(d.code in CODES for d in res.diagnostics)
    if res.function is None:
        assert res.diagnostics
    else:
        assert isinstance(res.function.result, ir.OpApp) and res.function.result.type == f32(1)


# ---- scale (timing lives in benchmarks/bench_frontend.py, not in tests) ----------------------
def test_a_thousand_line_file_checks_clean():
    fn = """\
fn layer{i}(x: Tensor[F32, [1, 4, 4]], w: Tensor[F32, [4, 4]]) -> Tensor[F32, [1, 4, 4]] {{
  let a = x @ w.reshape([1, 4, 4]) in
  let b = a.softmax(axis=2) * x in
  let c = b.transpose([0, 2, 1]).reshape([1, 4, 4]) in
  let d = c + layer_ok(c) in
  let e = concat(d, d, axis=1).slice(axis=1, start=0, stop=4) in
  let f = gather(w, Tensor[I64, [1, 4]] {{ 1, 2, 3, 0 }}) in
  e - f.exp()
}}
"""
    head = "fn layer_ok(x: Tensor[F32, [1, 4, 4]]) -> Tensor[F32, [1, 4, 4]] {\n  x\n}\n"
    text = head + "".join(fn.format(i=i) for i in range(111))
    assert text.count("\n") >= 1000
    snap, diags, _ = analyse(text)
    assert diags == [] and len(snap.program.functions) == 112


# ---- the language reference ----------------------------------------------------------------
def test_language_reference_mentions_every_op_and_code():
    doc = (ROOT / "docs" / "language.md").read_text()
    missing_ops = [name for name in OPS if f"`{name}`" not in doc]
    missing_codes = [code for code in CODES if f"`{code}`" not in doc]
    assert not missing_ops, f"docs/language.md does not document ops: {missing_ops}"
    assert not missing_codes, f"docs/language.md does not document codes: {missing_codes}"


def test_language_reference_examples_check_clean():
    doc = (ROOT / "docs" / "language.md").read_text()
    blocks = re.findall(r"```kina\n(.*?)```", doc, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        result, diags, src = analyse(block)
        assert diags == [], "\n".join(src.render(d) for d in diags)
        assert result.program.functions


def test_pytorch_table_names_every_foreign_name():
    """docs/language.md §9 lists every NumPy/PyTorch name the checker has a note for."""
    doc = (ROOT / "docs" / "language.md").read_text()
    table = doc.split("## 9. From PyTorch to Kina", 1)[1].split("\n## ", 1)[0]
    missing = [n for n in FOREIGN if not re.search(rf"(?<!\w){re.escape(n)}(?!\w)", table)]
    assert not missing, f"docs/language.md §9 does not mention: {missing}"


def test_emitted_codes_are_registered():
    for path in CASES:
        _, diags, _ = analyse(path.read_text())
        assert all(d.code in CODES for d in diags)


# ---- constant expressions of bare numbers (compiler/check/fold.py) -----------------------
def test_every_folded_op_is_a_surface_op_and_agrees_with_the_interpreter():
    """The folding table computes what the op computes (the interpreter's NumPy row, in
    float64), for every op it folds."""
    import numpy as np

    from compiler.check import fold as folding
    from compiler.ir.ops import SURFACE_OPS
    from compiler.oracle.interp import NUMPY_OPS
    from compiler.syntax import nodes as syntax
    assert set(folding._UNARY) | set(folding._BINARY) <= set(SURFACE_OPS)
    span = Span(0, 0)
    for op in folding._UNARY:
        for v in (0.3, 1.7, -0.4, 0.0):
            if op in ("log", "sqrt", "rsqrt") and v <= 0:
                continue
            got = folding.fold(syntax.MethodCall(syntax.Number(v, span), op, span, (), (), span))
            want = NUMPY_OPS[op]([np.array([v])], {}, TensorType(DType.F32, (1,)))[0]
            assert got is not None and np.isclose(got.value, want, rtol=1e-15, atol=0), (op, v)
    for op in folding._BINARY:
        got = folding.fold(syntax.Call(op, span, (syntax.Number(0.3, span), syntax.Number(-1.25, span)), (), span))
        want = NUMPY_OPS[op]([np.array([0.3]), np.array([-1.25])], {}, TensorType(DType.F32, (1,)))[0]
        assert got is not None and got.value == want, op


def test_folding_keeps_integers_exact_and_sees_shadowing():
    from compiler.check.fold import fold
    (fn,) = parse_module("fn f() -> Tensor[F32, [1]] {\n  (3 * 4 - 20).abs() + log(2.0)\n}\n")[0].functions
    assert fold(fn.body.lhs).value == 8 and isinstance(fold(fn.body.lhs).value, int)
    assert fold(fn.body) is not None and fold(fn.body, shadowed={"log"}) is None
