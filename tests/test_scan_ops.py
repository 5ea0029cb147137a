"""Issue 26's small gaps and scans: max/min reductions under reverseMode (ties split evenly,
as torch.amax / amin), pow with a tensor exponent, cumsum / cumprod / logsumexp: the
interpreter against hand-computed values and PyTorch's autograd, and the compiled library
at -O0 and -O2 against the interpreter on the edge cases (ties, infinities, zeros)."""
import numpy as np
import pytest

from compiler import build
from compiler.analysis import analyze
from compiler.oracle import torch_ref
from compiler.oracle.interp import run_function
from compiler.runtime import library as runtime

TIES = """
fn loss(x: Tensor[F32, [2, 4]]) -> Tensor[F32, [2, 1]] {
  let m = x.reduce_keep(op=max, axis=1) in
  let n = x.reduce_keep(op=min, axis=1) in
  let s = m + n in
  s
}
fn step(x: Tensor[F32, [2, 4]]) -> (Tensor[F32, [2, 1]], Tensor[F32, [2, 4]]) {
  handle loss(x) with reverseMode
}
"""
TIE_INPUT = np.array([[3.0, 1.0, 3.0, 1.0], [2.0, 2.0, 2.0, -5.0]], np.float32)
# row 0: max 3 twice (1/2 each), min 1 twice (1/2 each); row 1: max 2 three times (1/3 each), min -5
TIE_GRAD = np.array([[0.5, 0.5, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3, 1.0]])

SCANS = """
fn scans(x: Tensor[F32, [2, 4]], e: Tensor[F32, [2, 4]]) -> (Tensor[F32, [2, 4]], Tensor[F32, [2, 4]], Tensor[F32, [2, 1]], Tensor[F32, [2, 4]]) {
  let c = x.cumsum(axis=1) in
  let p = x.cumprod(axis=-1) in
  let l = x.logsumexp(axis=1) in
  let w = pow(x, e) in
  (c, p, l, w)
}
"""
SCAN_X = np.array([[1e30, 2.0, -1.0, 0.5], [-np.inf, -np.inf, -np.inf, -np.inf]], np.float32)
SCAN_E = np.array([[0.5, 3.0, 3.0, -2.0], [2.0, 1.0, 0.5, 2.0]], np.float32)
ZEROS_X = np.array([[2.0, 0.0, 3.0, 4.0], [-1.0, -2.0, 0.5, 0.0]], np.float32)


def _program(text: str):
    snap = analyze(text)
    assert not snap.diagnostics, [d.message for d in snap.diagnostics]
    return snap.program


def test_max_and_min_split_the_cotangent_among_ties():
    y, g = run_function(_program(TIES), "step", [TIE_INPUT])
    np.testing.assert_allclose(y, [[4.0], [-3.0]])
    np.testing.assert_allclose(g, TIE_GRAD, rtol=1e-6)


@pytest.mark.skipif(not torch_ref.available(), reason="torch not installed")
def test_max_and_min_ties_match_torch_autograd():
    program = _program(TIES)
    y, g = torch_ref.run_function(program, "step", [TIE_INPUT])
    np.testing.assert_allclose(g, TIE_GRAD, rtol=1e-12)


def test_scans_logsumexp_and_tensor_pow_in_the_interpreter():
    c, p, lse, w = run_function(_program(SCANS), "scans", [SCAN_X, SCAN_E])
    np.testing.assert_allclose(c[0], np.cumsum(SCAN_X[0].astype(np.float64)).astype(np.float32))
    assert np.all(np.isneginf(c[1]))
    assert lse[0, 0] == np.float32(1e30)                 # stable: no overflow to inf
    assert np.isneginf(lse[1, 0])                        # all -inf: -inf, not NaN
    np.testing.assert_allclose(w[0, 1:3], [8.0, -1.0])   # integral exponents of negative bases
    assert w[1, 2] == np.inf                             # (-inf)^0.5 is inf (IEEE pow, numpy)
    assert np.isnan(run_function(_program(SCANS), "scans", [-SCAN_E, SCAN_E])[3][0, 0])   # (-0.5)^0.5


@pytest.mark.parametrize("level", [0, 2])
def test_compiled_scans_match_the_interpreter_on_edge_cases(tmp_path, level):
    res = build.build_source(SCANS, "scans.kina", tmp_path / "s.so", opt_level=level)
    assert res.ok, [d.message for d in res.diagnostics]
    lib = runtime.load(res.so_path)
    for x in (SCAN_X, ZEROS_X):
        want = run_function(res.program, "scans", [x, SCAN_E])
        got = lib["scans"](x, SCAN_E)
        for gv, wv in zip(got, want):
            np.testing.assert_allclose(gv, wv, rtol=2e-6, equal_nan=True)


def test_cumprod_cotangent_at_a_zero_is_not_finite_as_documented():
    text = """
fn f(x: Tensor[F32, [3]]) -> Tensor[F32, [3]] {
  let p = x.cumprod(axis=0) in
  p
}
fn g(x: Tensor[F32, [3]]) -> (Tensor[F32, [3]], Tensor[F32, [3]]) {
  handle f(x) with reverseMode
}
"""
    _, g = run_function(_program(text), "g", [np.array([2.0, 3.0, 4.0], np.float32)])
    np.testing.assert_allclose(g, [1 + 3 + 12, 2 + 8, 6])
    _, g0 = run_function(_program(text), "g", [np.array([2.0, 0.0, 4.0], np.float32)])
    assert not np.isfinite(g0[1])


@pytest.mark.parametrize("body,message", [
    ("x.pow(x, x)", "pow takes 1 tensor operand, got 3"),
    ("x.cumsum(axis=2)", "cumsum: axis=2 is out of range"),
    ("x.logsumexp()", "logsumexp: missing attribute `axis`"),
    ("x.topk(4)", "topk: k=4 is larger than axis 1 of Tensor[F32, [2, 3], @host] (3 elements)"),
    ("x.topk(0)", "topk: k=0 must be at least 1"),
    ("x.sort(descending=yes)", "sort: attribute `descending` must be one of false, true, got `yes`"),
])
def test_bad_calls_are_diagnosed(body, message):
    snap = analyze(f"fn f(x: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {{\n  let y = {body} in\n  y\n}}\n")
    assert any(message in d.message for d in snap.diagnostics), [d.message for d in snap.diagnostics]


SORTS = """
fn sorts(x: Tensor[F32, [2, 6]]) -> (Tensor[F32, [2, 6]], Tensor[I64, [2, 6]], Tensor[I64, [2, 6]], Tensor[F32, [2, 3]], Tensor[I64, [2, 3]]) {
  let s = x.sort() in
  let i = x.argsort() in
  let d = x.argsort(descending=true) in
  let t = x.topk(3) in
  let j = x.argtopk(3) in
  (s, i, d, t, j)
}
"""
# ties (2.0 three times, -1 twice) and a NaN, which counts as largest
SORT_X = np.array([[2.0, -1.0, 2.0, 0.5, -1.0, 2.0], [np.nan, 3.0, -np.inf, 3.0, np.inf, 0.0]], np.float32)


def test_sorts_are_stable_with_nan_largest():
    s, i, d, t, j = run_function(_program(SORTS), "sorts", [SORT_X])
    np.testing.assert_array_equal(i, [[1, 4, 3, 0, 2, 5], [2, 5, 1, 3, 4, 0]])
    np.testing.assert_array_equal(d, [[0, 2, 5, 3, 1, 4], [0, 4, 1, 3, 5, 2]])
    np.testing.assert_array_equal(j, d[:, :3])
    np.testing.assert_array_equal(s[0], [-1, -1, 0.5, 2, 2, 2])
    np.testing.assert_array_equal(t[1], [np.nan, np.inf, 3.0])


@pytest.mark.skipif(not torch_ref.available(), reason="torch not installed")
def test_sorts_match_torch_stable_sort():
    program = _program(SORTS)
    x = SORT_X.copy()
    x[1, 0] = 1.0   # torch and NumPy agree on NaN only up to its position
    for want, got in zip(torch_ref.run_function(program, "sorts", [x]), run_function(program, "sorts", [x])):
        np.testing.assert_array_equal(want, got)


@pytest.mark.parametrize("level", [0, 2])
def test_compiled_sorts_match_the_interpreter_bit_for_bit(tmp_path, level):
    res = build.build_source(SORTS, "sorts.kina", tmp_path / "s.so", opt_level=level)
    assert res.ok, [d.message for d in res.diagnostics]
    lib = runtime.load(res.so_path)
    rng = np.random.default_rng(3)
    for x in (SORT_X, rng.integers(-2, 3, (2, 6)).astype(np.float32)):   # many ties
        for gv, wv in zip(lib["sorts"](x), run_function(res.program, "sorts", [x])):
            np.testing.assert_array_equal(gv, wv)


def test_sort_and_topk_cotangents_go_back_through_the_indices():
    text = """
fn f(x: Tensor[F32, [4]], w: Tensor[F32, [2]]) -> Tensor[F32, [1]] {
  let t = x.topk(2) in
  let p = t * w in
  let s = p.reduce_keep(op=sum, axis=0) in
  s
}
fn g(x: Tensor[F32, [4]], w: Tensor[F32, [2]]) -> (Tensor[F32, [1]], Tensor[F32, [4]], Tensor[F32, [2]]) {
  handle f(x, w) with reverseMode
}
"""
    _, gx, _ = run_function(_program(text), "g", [np.array([1.0, 5.0, 3.0, 5.0], np.float32),
                                                  np.array([10.0, 20.0], np.float32)])
    np.testing.assert_array_equal(gx, [0, 10, 0, 20])   # the first 5 is the largest (stable)


def test_sort_replaces_the_sqrt_suggestion():
    snap = analyze("fn f(x: Tensor[F32, [3]]) -> Tensor[F32, [3]] {\n  let y = x.sort() in\n  y\n}\n")
    assert not snap.diagnostics
