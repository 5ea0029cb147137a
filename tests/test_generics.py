"""Size-generic functions (`fn linear[M, K, N](...)`): the symbolic check at the definition,
sizes at calls (inferred or written), instantiation, `--size` exports, and that an
instantiated program computes exactly what the hand-written monomorphic one does."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import analysis, build
from compiler.core.diagnostics import CODES
from compiler.core.sizes import Size, Undecidable, exact_div
from compiler.runtime import library as runtime

LINEAR = "fn linear[M, K, N](x: Tensor[F32, [M, K]], w: Tensor[F32, [K, N]]) -> Tensor[F32, [M, N]] { x @ w }\n"


def diags(src: str) -> list[tuple[str, str, str]]:
    """(code, message, the text at the span) of every diagnostic."""
    snap = analysis.analyze(src)
    return [(d.code, d.message, src[d.span.start:d.span.end]) for d in snap.diagnostics]


# ---- symbolic sizes ------------------------------------------------------------------
def test_sizes_have_one_canonical_form():
    B, T, D = Size.var("B"), Size.var("T"), Size.var("D")
    assert B * T == T * B and (B + 1) * T == T + B * T
    assert (T + 1) - T == 1 and isinstance((T + 1) - T, int)
    assert str(B * T + 1) == "B*T + 1" and str(2 * D - 1) == "2*D - 1" and str(-T) == "-T"
    assert len({B * T, T * B}) == 1          # hashable by canonical form


def test_orderings_hold_for_every_size_or_are_undecidable():
    T = Size.var("T")
    assert T - 1 < T and 0 <= T - 1 and T >= 1 and not (T < 1)
    with pytest.raises(Undecidable):
        _ = 2 < T
    assert exact_div(Size.var("H") * Size.var("DH"), Size.var("H")) == Size.var("DH")
    assert exact_div(2 * T + 4, 2) == T + 2 and exact_div(T + 1, 2) is None


# ---- the check at the definition -------------------------------------------------------
def test_a_body_error_is_reported_at_the_definition_with_no_call():
    src = "fn bad[M, N](x: Tensor[F32, [M, N]], y: Tensor[F32, [N, M]]) -> Tensor[F32, [M, N]] { x + y }"
    (code, message, at), = diags(src)
    assert code == "shape" and at == "y"
    assert "operand shapes differ" in message and "[M, N]" in message and "[N, M]" in message


def test_a_reshape_whose_volume_differs_symbolically_is_an_error():
    src = "fn r[N](x: Tensor[F32, [N, 3]]) -> Tensor[F32, [4 * N]] { x.reshape([4 * N]) }"
    (code, message, _), = diags(src)
    assert code == "shape" and "3*N elements" in message and "4*N" in message
    ok = "fn r[B, T, D](x: Tensor[F32, [B * T, D]]) -> Tensor[F32, [B, T, D]] { x.reshape([B, T, D]) }"
    assert diags(ok) == []


def test_a_bound_that_does_not_hold_for_every_size_is_an_error_not_a_later_surprise():
    src = "fn s[T](x: Tensor[F32, [T]]) -> Tensor[F32, [2]] { x.slice(axis=0, start=0, stop=2) }"
    (code, message, at), = diags(src)
    assert code == "size" and "cannot show" in message and at == "slice"
    empty = "fn e[N](x: Tensor[F32, [N - 1]]) -> Tensor[F32, [1]] { x.reduce_keep(op=sum, axis=0) }"
    assert [d[0] for d in diags(empty)] == ["size"]
    index = "fn g[N](v: Tensor[F32, [N, 4]]) -> Tensor[F32, [2, 4]] { gather(v, Tensor[I64, [2]] { 0, 5 }) }"
    assert [d[0] for d in diags(index)] == ["index"]


# ---- calls -------------------------------------------------------------------------------
def test_conflicting_sizes_name_the_size_and_both_arguments():
    src = LINEAR + "fn g(x: Tensor[F32, [8, 4]], w: Tensor[F32, [8, 16]]) -> Tensor[F32, [8, 16]] { linear(x, w) }"
    snap = analysis.analyze(src)
    (d,) = snap.diagnostics
    assert d.code == "size"
    assert d.message == "linear: size K is 4 from x (dimension 1) but 8 from w (dimension 0)"
    assert src[d.span.start:d.span.end] == "w"
    (note,) = d.notes
    assert note.span is not None and src[note.span.start:note.span.end] == "x"


def test_sizes_are_inferred_through_size_expressions_and_written_explicitly():
    src = LINEAR + """\
fn next[B, T](w: Tensor[I64, [B, T + 1]]) -> Tensor[I64, [B, T]] { w.slice(axis=1, start=1, stop=T + 1) }
fn f(t: Tensor[I64, [2, 65]], x: Tensor[F32, [8, 4]]) -> (Tensor[I64, [2, 64]], Tensor[F32, [8, 3]]) {
  (next(t), linear[8, 4, 3](x, Tensor[F32, [4, 3]] { 1.0 }))
}
"""
    snap = analysis.analyze(src)
    assert snap.diagnostics == []
    assert {f for f in snap.program.functions} == {"f", "next$2_64", "linear$8_4_3"}
    shown = {fact.name for fact in snap.types if fact.kind == "call"}
    assert {"next[B=2, T=64]", "linear[M=8, K=4, N=3]"} <= shown


def test_a_generic_function_calls_and_handles_generic_functions():
    src = LINEAR + """\
fn loss[B, D](x: Tensor[F32, [B, D]], w: Tensor[F32, [D, D]]) -> Tensor[F32, [1, 1]] {
  let y = linear(x, w) in
  let s = y.reduce_keep(op=sum, axis=0) in
  let t = s.reduce_keep(op=sum, axis=1) in
  let m = t * (1.0 / (B * D)) in
  m
}
fn grad[B, D](x: Tensor[F32, [B, D]], w: Tensor[F32, [D, D]]) -> Tensor[F32, [D, D]] {
  let (_, _, g) = handle loss(x, w) with reverseMode in
  g
}
fn main() -> Tensor[F32, [3, 3]] { grad(Tensor[F32, [2, 3]] { 1.0 }, Tensor[F32, [3, 3]] { 0.5 }) }
"""
    snap = analysis.analyze(src)
    assert snap.diagnostics == []
    assert set(snap.program.functions) == {"main", "grad$2_3", "loss$2_3", "linear$2_3_3"}


ILL_FORMED = [
    ("fn f[N](x: Tensor[F32, [N / 2]]) -> Tensor[F32, [N]] { x }", "size"),
    ("fn f[N](x: Tensor[F32, [Q]]) -> Tensor[F32, [N]] { x }", "size"),
    ("fn f(x: Tensor[F32, [Q]]) -> Tensor[F32, [2]] { x }", "size"),
    ("fn f[N, N](x: Tensor[F32, [N]]) -> Tensor[F32, [N]] { x }", "duplicate"),
    ("fn f[x](x: Tensor[F32, [x]]) -> Tensor[F32, [x]] { x }", "duplicate"),
    ("fn f[N](x: Tensor[F32, [N - 2]]) -> Tensor[F32, [N - 2]] { x }", "size"),
    ("fn f[N](x: Tensor[F32, [N]]) -> Tensor[F32, [N]] { let N = x in x }", "duplicate"),
    ("fn f[N](x: Tensor[F32, [N]]) -> Tensor[F32, [N]] { let y = N in x }", "literal"),
    ("fn f[N](x: Tensor[F32, [N, 3]]) -> Tensor[F32, [N, 3]] { Tensor[F32, [N, 3]] { 1.0, 2.0 } }", "literal"),
    ("fn f[N](x: Tensor[F32, [N]]) -> Tensor[F32, [N]] { x.softmax(axis=N) }", "attr"),
    ("fn f[N](x: Tensor[F32, [N, N]]) -> Tensor[F32, [N, N]] { x.transpose(perm=[N, 0]) }", "attr"),
    ("fn main[N]() -> Tensor[F32, [N]] { Tensor[F32, [N]] {} }", "main"),
    ("fn f[N](x: Tensor[F32, [(N]]) -> Tensor[F32, [N]] { x }", "syntax"),
    ("fn g[N](x: Tensor[F32, [N]]) -> Tensor[F32, [N]] { x }\n"
     "fn f(x: Tensor[F32, [3]]) -> Tensor[F32, [3]] { g[0](x) }", "size"),
    ("fn g[N](x: Tensor[F32, [N]]) -> Tensor[F32, [N]] { x }\n"
     "fn f(x: Tensor[F32, [3]]) -> Tensor[F32, [3]] { g[2, 3](x) }", "size"),
    ("fn g[N](x: Tensor[F32, [N + 1]]) -> Tensor[F32, [N]] { x.slice(axis=0, start=0, stop=N) }\n"
     "fn f(x: Tensor[F32, [1]]) -> Tensor[F32, [0]] { g(x) }", "size"),
    ("fn g[N](x: Tensor[F32, [2 * N]]) -> Tensor[F32, [N]] { x.slice(axis=0, start=0, stop=N) }\n"
     "fn f(x: Tensor[F32, [3]]) -> Tensor[F32, [1]] { g(x) }", "size"),
    ("fn g[N, M](x: Tensor[F32, [N * M]]) -> Tensor[F32, [N]] { x.slice(axis=0, start=0, stop=N) }\n"
     "fn f(x: Tensor[F32, [6]]) -> Tensor[F32, [2]] { g(x) }", "size"),
    ("fn g[N](x: Tensor[F32, [N]]) -> Tensor[F32, [N]] { x }\n"
     "fn f(x: Tensor[F32, [3]]) -> Tensor[F32, [3]] { exp[3](x) }", "size"),
    ("fn h(x: Tensor[F32, [3]]) -> Tensor[F32, [3]] { x }\n"
     "fn f(x: Tensor[F32, [3]]) -> Tensor[F32, [3]] { h[3](x) }", "size"),
]


@pytest.mark.parametrize("src,code", ILL_FORMED)
def test_ill_formed_sizes_get_one_clear_diagnostic(src, code):
    found = diags(src)
    assert found and found[0][0] == code, found


_SIZE_ATOMS = st.sampled_from(["N", "M", "Q", "0", "1", "2", "-1", "(N)", "(N + 1)", "(", ")", "N N"])
_SIZE_EXPR = st.lists(st.tuples(_SIZE_ATOMS, st.sampled_from([" + ", " - ", " * ", " / ", ""])),
                      min_size=1, max_size=4).map(lambda xs: "".join(a + o for a, o in xs).rstrip(" +-*/"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_SIZE_EXPR, b=_SIZE_EXPR, call=_SIZE_EXPR)
def test_any_size_expression_gets_diagnostics_never_a_traceback(a, b, call):
    src = (f"fn g[N, M](x: Tensor[F32, [{a}, M]]) -> Tensor[F32, [{b}]] {{ x.reshape([{b}]) }}\n"
           f"fn f(x: Tensor[F32, [3, 4]]) -> Tensor[F32, [12]] {{ g[{call}, 4](x) + g(x) }}\n")
    snap = analysis.analyze(src)
    program, more = snap.program_for({"N": 3})
    assert all(d.code in CODES for d in snap.diagnostics + more)
    assert all(0 <= d.span.start <= d.span.end <= len(src) for d in snap.diagnostics + more)


# ---- builds -------------------------------------------------------------------------------
GENERIC = LINEAR + """\
fn mlp[B, D, H](x: Tensor[F32, [B, D]], w1: Tensor[F32, [D, H]], w2: Tensor[F32, [H, D]]) -> Tensor[F32, [1, 1]] {
  let a = linear(x, w1) in
  let h = a.relu() in
  let y = linear(h, w2) in
  let sq = y * y in
  let s0 = sq.reduce_keep(op=sum, axis=0) in
  let s1 = s0.reduce_keep(op=sum, axis=1) in
  let out = s1 * (1.0 / (B * D)) in
  out
}
fn step(x: Tensor[F32, [2, 3]], w1: Tensor[F32, [3, 5]], w2: Tensor[F32, [5, 3]]) -> (Tensor[F32, [1, 1]], Tensor[F32, [2, 3]], Tensor[F32, [3, 5]], Tensor[F32, [5, 3]]) {
  handle mlp(x, w1, w2) with reverseMode
}
"""
HAND_WRITTEN = """\
fn linear_a(x: Tensor[F32, [2, 3]], w: Tensor[F32, [3, 5]]) -> Tensor[F32, [2, 5]] { x @ w }
fn linear_b(x: Tensor[F32, [2, 5]], w: Tensor[F32, [5, 3]]) -> Tensor[F32, [2, 3]] { x @ w }
fn mlp(x: Tensor[F32, [2, 3]], w1: Tensor[F32, [3, 5]], w2: Tensor[F32, [5, 3]]) -> Tensor[F32, [1, 1]] {
  let a = linear_a(x, w1) in
  let h = a.relu() in
  let y = linear_b(h, w2) in
  let sq = y * y in
  let s0 = sq.reduce_keep(op=sum, axis=0) in
  let s1 = s0.reduce_keep(op=sum, axis=1) in
  let out = s1 * (1.0 / 6) in
  out
}
fn step(x: Tensor[F32, [2, 3]], w1: Tensor[F32, [3, 5]], w2: Tensor[F32, [5, 3]]) -> (Tensor[F32, [1, 1]], Tensor[F32, [2, 3]], Tensor[F32, [3, 5]], Tensor[F32, [5, 3]]) {
  handle mlp(x, w1, w2) with reverseMode
}
"""


def _lib(tmp_path, name, text, **kw):
    path = tmp_path / f"{name}.kina"
    path.write_text(text)
    res = build.build_file(path, tmp_path / f"{name}.so", **kw)
    assert res.ok, "\n".join(res.source.render(d) for d in res.diagnostics)
    return res, runtime.load(res.so_path)


def test_an_instantiated_handle_equals_the_hand_written_program_bit_for_bit(tmp_path):
    """At the suite's -O level (CI runs it at -O0 and -O2)."""
    _, generic = _lib(tmp_path, "generic", GENERIC)
    _, mono = _lib(tmp_path, "mono", HAND_WRITTEN)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (3, 5), (5, 3))]
    for got, want in zip(generic.step(*args), mono.step(*args)):
        assert np.array_equal(got, want)


def test_size_binds_a_generic_export_and_the_manifest_records_it(tmp_path):
    src = GENERIC.split("fn step")[0]
    res, lib = _lib(tmp_path, "bound", src, sizes={"B": 4, "D": 3, "H": 7})
    manifest = json.loads(res.manifest_path.read_text())
    assert manifest["sizes"] == {"B": 4, "D": 3, "H": 7}
    assert [f["name"] for f in manifest["functions"]] == ["mlp"]
    assert manifest["functions"][0]["params"][0]["shape"] == [4, 3]
    assert "B=4, D=3, H=7" in res.header_path.read_text()
    x = np.ones((4, 3), np.float32)
    out = lib.mlp(x, np.ones((3, 7), np.float32), np.ones((7, 3), np.float32))
    assert np.allclose(out, 441.0)


def test_a_partly_bound_export_is_dynamic_in_its_other_sizes(tmp_path):
    """--size B=4 binds B of `mlp[B, D, H]`; D and H stay dynamic (issue 25): one library
    for every D and H at B = 4, its calls of the generic `linear` at the mixed sizes
    (4, D, H) included, and the number `1.0 / (B * D)` computed at each call."""
    from compiler import runtime
    from compiler.oracle import interp
    path = tmp_path / "u.kina"
    path.write_text(GENERIC.split("fn step")[0])
    res = build.build_file(path, tmp_path / "u.so", sizes={"B": 4}, cache=False)
    assert res.ok, res.diagnostics
    (entry,) = [f for f in res.manifest["functions"] if f["name"] == "mlp"]
    assert entry["sizes"] == ["D", "H"]
    assert [p["shape"] for p in entry["params"]] == [[4, "D"], ["D", "H"], ["H", "D"]]
    lib = runtime.load(tmp_path / "u.so")
    snap = analysis.analyze(path.read_text(), str(path))
    for d, h in ((3, 5), (1, 1), (6, 2)):
        program, diags = snap.program_for({"B": 4, "D": d, "H": h}, want_dynamic=False)
        assert not diags
        args = interp.random_inputs(program.functions["mlp"], 0, program)
        want = interp.run_function(program, "mlp", args)
        np.testing.assert_allclose(lib.mlp(*args), want, rtol=1e-5, atol=1e-6)


def test_export_keeps_only_the_named_functions_and_their_callees(tmp_path):
    path = tmp_path / "e.kina"
    path.write_text(GENERIC.split("fn step")[0])
    res = build.build_file(path, tmp_path / "e.so", sizes={"B": 2, "D": 3, "H": 4},
                           transform=build.keep_exports(["mlp"]))
    assert res.ok and [f["name"] for f in res.manifest["functions"]] == ["mlp"]
    from tests.test_cli import kinac
    r = kinac("build", str(path), "-o", str(tmp_path / "f.so"), "--size", "B=2", "--size", "D=3",
              "--size", "H=4", "--export", "nope")
    assert r.returncode != 0 and "--export nope: no such exported function (the build exports: mlp)" in r.stderr


LOOKUP = """
fn look[M, W, E](ids: Tensor[I64, [M]], table: Tensor[F32, [W, E]]) -> Tensor[F32, [M, E]] {
  gather(table, ids)
}

fn top[N, V, D](ids: Tensor[I64, [N]], table: Tensor[F32, [V, D]]) -> Tensor[F32, [N, D]] {
  look[N, V, D](ids, table)
}
"""


@pytest.mark.parametrize("sizes,bound", [({"V": 8, "D": 4}, 8), ({}, "V")])
def test_an_index_bound_found_in_a_generic_callee_is_in_the_exports_own_sizes(tmp_path, sizes, bound):
    """`top`'s ids reach the gather of `look[M, W, E]` (bound W) through a call at (N, V, D):
    the manifest's bound is V in `top`'s sizes, 8 once --size binds V (it was the callee's
    W / V, which a partly bound export does not have: the library did not load)."""
    res, lib = _lib(tmp_path, f"look{len(sizes)}", LOOKUP, sizes=sizes, opt_level=0)
    (entry,) = [f for f in res.manifest["functions"] if f["name"] == "top"]
    assert entry["params"][0]["index_bound"] == bound
    table = np.arange(32, dtype=np.float32).reshape(8, 4)
    for ids in (np.array([7, 0, 3], np.int64), np.array([5], np.int64)):
        np.testing.assert_array_equal(lib.top(ids, table), table[ids])
    with pytest.raises(runtime.KinaIndexError, match=r"top: parameter `ids` holds index 8 at \[1\], outside \[0, 8\)"):
        lib.top(np.array([1, 8], np.int64), table)


@pytest.mark.parametrize("sizes", [{"K": 16, "N": 64}, {"M": 16, "K": 16}, {"K": 8, "N": 40}])
def test_a_partly_bound_matmul_builds_at_O2_whatever_the_tile_divides(tmp_path, sizes):
    """At -O2 a dynamic matmul's loops are peeled; a static M or N that the 8 x 32 tile
    divides has no partial tile to peel (mlir-opt: "failed to peel the last iteration")."""
    src = "fn mm[M, K, N](x: Tensor[F32, [M, K]], w: Tensor[F32, [K, N]]) -> Tensor[F32, [M, N]] { x @ w }\n"
    _, lib = _lib(tmp_path, "mm", src, sizes=sizes, opt_level=2)
    rng = np.random.default_rng(0)
    for free in (1, 13, 40):
        m, k, n = (sizes.get(s, free) for s in "MKN")
        x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
        np.testing.assert_allclose(lib.mm(x, w), x @ w, rtol=1e-5, atol=1e-5)
