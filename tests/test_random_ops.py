"""Issue 26 part 1: counter-based random numbers.  Threefry-2x32 against its published
test vector and against jax.random (where JAX is installed; tests/test_interp.py holds
values recorded from JAX 0.10.2 so the derivation is checked without it too), the
compiled draws (normals included) against the interpreter's bit for bit at -O0 and -O2, the statistics of
the draws (a chi-square test of categorical against softmax), the key discipline's
errors, and reverseMode (draws are constants of their key)."""
import numpy as np
import pytest

from compiler import build
from compiler.analysis import analyze
from compiler.core.types import DType
from compiler.oracle import interp_random as R
from compiler.oracle.interp import run_function
from compiler.runtime import library as runtime

DRAWS = """
fn draws(key: Tensor[I64, [2]], step: Tensor[I64, []], logits: Tensor[F32, [64, 5]]) -> (Tensor[I64, [3, 2]], Tensor[I64, [2]], Tensor[I64, [5, 7]], Tensor[F32, [300, 40]], Tensor[F32, [9, 11]], Tensor[Bool, [17, 3]], Tensor[I64, [64, 1]], Tensor[F16, [50]], Tensor[BF16, [50]], Tensor[F8E4M3, [50]], Tensor[F16, [7]], Tensor[F64, [300, 7]]) {
  let ks = random_split(key, 3) in
  let k2 = random_fold_in(key, step) in
  let b = random_bits(key, shape=[5, 7]) in
  let u = random_uniform(k2, shape=[300, 40]) in
  let n = random_normal(key, shape=[9, 11]) in
  let m = bernoulli(k2, 0.25, shape=[17, 3]) in
  let c = categorical(key, logits, axis=-1) in
  let h = random_uniform(key, shape=[50], dtype=F16) in
  let bf = random_uniform(key, shape=[50], dtype=BF16) in
  let e = random_uniform(key, shape=[50], dtype=F8E4M3) in
  let hn = random_normal(key, shape=[7], dtype=F16) in
  let dn = random_normal(k2, shape=[300, 7], dtype=F64) in
  (ks, k2, b, u, n, m, c, h, bf, e, hn, dn)
}
"""


def _program(text: str):
    snap = analyze(text)
    assert not snap.diagnostics, [d.message for d in snap.diagnostics]
    return snap.program


def test_threefry_matches_the_random123_test_vector():
    y0, y1 = R.threefry2x32(0x13198A2E, 0x03707344, np.array([0x243F6A88], np.uint32),
                            np.array([0x85A308D3], np.uint32))
    assert (int(y0[0]), int(y1[0])) == (0xC4923A9C, 0x483DF7A0)


def test_jax_random_bit_for_bit():
    jax = pytest.importorskip("jax")
    key = jax.random.PRNGKey(7)
    k = np.asarray(jax.random.key_data(key)).astype(np.int64)
    np.testing.assert_array_equal(R.split(k, 5), np.asarray(jax.random.key_data(jax.random.split(key, 5))))
    np.testing.assert_array_equal(R.fold_in(k, np.int64(123)),
                                  np.asarray(jax.random.key_data(jax.random.fold_in(key, 123))))
    np.testing.assert_array_equal(R.bits(k, (4, 9)), np.asarray(jax.random.bits(key, (4, 9))))
    np.testing.assert_array_equal(R.uniform(k, (1000,)), np.asarray(jax.random.uniform(key, (1000,))))
    np.testing.assert_array_equal(R.uniform(k, (200,)) < np.float32(0.3),
                                  np.asarray(jax.random.bernoulli(key, 0.3, (200,))))
    np.testing.assert_allclose(R.normal(k, (1000,)), np.asarray(jax.random.normal(key, (1000,))), rtol=0, atol=1e-6)
    for dtype, jdt in ((DType.F16, "float16"), (DType.BF16, "bfloat16"), (DType.F8E4M3, "float8_e4m3fn"),
                       (DType.F8E5M2, "float8_e5m2")):
        want = np.asarray(jax.random.uniform(key, (500,), dtype=jdt)).astype(np.float32)
        np.testing.assert_array_equal(R.uniform_in(k, (500,), dtype), want, err_msg=dtype.value)


@pytest.mark.parametrize("level", [0, 2])
def test_compiled_draws_equal_the_interpreter_bit_for_bit(tmp_path, level):
    res = build.build_source(DRAWS, "draws.kina", tmp_path / "d.so", opt_level=level)
    assert res.ok, [d.message for d in res.diagnostics]
    lib = runtime.load(res.so_path)
    logits = np.random.default_rng(0).standard_normal((64, 5)).astype(np.float32)
    for key, step in (([0, 42], 3), ([2 ** 32 - 1, 123456789], 2 ** 40 + 5), ([-1, 5], -2)):
        args = [np.array(key, np.int64), np.array(step, np.int64), logits]
        want = run_function(res.program, "draws", args)
        got = lib["draws"](*args)
        for i, (g, w) in enumerate(zip(got, want)):   # normals too: their log1p is no libm call
            np.testing.assert_array_equal(g, w, err_msg=f"result {i}, key {key}")


def test_the_normals_log1p_is_within_two_ulp_of_numpys():
    # the normals' own log1p (no libm: the same bits at every level) on their arguments,
    # -x^2 for an f32 uniform x in (-1, 1), against NumPy's log1p in the same dtype
    x = np.concatenate([np.random.default_rng(0).uniform(-1, 1, 200_000), np.linspace(-0.9999999, 0.9999999, 20_001),
                        [0.0, 2.0 ** -24, 2.0 ** -12]]).astype(np.float32)
    for ft, ours in ((np.float64, R.log1p_f64), (np.float32, R.log1p)):
        y = -(x.astype(ft) * x.astype(ft))
        got, want = ours(y), np.log1p(y)
        assert got.dtype == ft
        ulp = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want).astype(ft)).astype(np.float64)
        assert np.all(got[want == 0] == 0) and ulp[want != 0].max() <= 2, (ft, ulp.max())


def test_draws_have_the_right_distributions():
    key = np.array([0, 2026], np.int64)
    u = R.uniform(key, (100_000,))
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.005
    n = R.normal(key, (100_000,))
    assert abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02
    b = run_function(_program("fn f(k: Tensor[I64, [2]]) -> Tensor[Bool, [20000]] {\n"
                              "  let m = bernoulli(k, 0.2, shape=[20000]) in\n  m\n}\n"), "f", [key])
    assert abs(b.mean() - 0.2) < 0.01


def test_categorical_frequencies_match_softmax_by_chi_square():
    """20,000 draws (one per row of a broadcast logits tensor, one key): Pearson's chi-square
    against softmax(logits) with 4 degrees of freedom stays below the 0.999 quantile (18.47)."""
    text = """
fn f(k: Tensor[I64, [2]], logits: Tensor[F32, [1, 5]]) -> Tensor[I64, [20000, 1]] {
  let l = logits.broadcast([20000, 5]) in
  let c = categorical(k, l, axis=1) in
  c
}
"""
    logits = np.array([[1.0, 0.5, -1.0, 2.0, 0.0]], np.float32)
    draws = run_function(_program(text), "f", [np.array([0, 99], np.int64), logits])
    counts = np.bincount(draws.ravel(), minlength=5)
    p = np.exp(logits[0] - logits.max()) / np.exp(logits[0] - logits.max()).sum()
    expected = 20000 * p
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 18.47, (counts, expected, chi2)


def test_draws_are_constants_under_reverse_mode():
    text = """
fn loss(x: Tensor[F32, [4]], k: Tensor[I64, [2]]) -> Tensor[F32, [4]] {
  let u = random_uniform(k, shape=[4]) in
  let y = x * u in
  y
}
fn step(x: Tensor[F32, [4]], k: Tensor[I64, [2]]) -> (Tensor[F32, [4]], Tensor[F32, [4]]) {
  handle loss(x, k) with reverseMode
}
"""
    key = np.array([1, 2], np.int64)
    _, g = run_function(_program(text), "step", [np.ones(4, np.float32), key])
    np.testing.assert_array_equal(g, R.uniform(key, (4,)))


@pytest.mark.parametrize("body,message", [
    ("random_uniform(x, shape=[3])", "random_uniform: operand 0 must be a key, Tensor[I64, [2]]"),
    ("bernoulli(k, 1.5, shape=[3])", "bernoulli: p=1.5 is not a probability"),
    ("random_bits(k, shape=[65536, 65537])", "has more than 2^32 elements"),
    ("random_split(k, 0)", "random_split: n=0 must be between 1 and 2^32"),
    ("random_fold_in(k, k)", "random_fold_in: operand 1 must be a Tensor[I64, []]"),
    ("random_uniform(k)", "random_uniform: missing attribute `shape`"),
])
def test_bad_random_calls_are_diagnosed(body, message):
    snap = analyze(f"fn f(x: Tensor[F32, [3]], k: Tensor[I64, [2]]) -> Tensor[F32, [3]] {{\n"
                   f"  let y = {body} in\n  x\n}}\n")
    assert any(message in d.message for d in snap.diagnostics), [d.message for d in snap.diagnostics]
