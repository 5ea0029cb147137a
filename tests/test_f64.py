"""F64 through every stage: every op row of test_ops_compiled with F32 replaced by F64
(forward and backward, one module built once at $KINA_OPT_LEVEL: CI runs -O0 and -O2)
against the interpreter in float64 at F64's tolerance; and a small MLP (gelu, exp, log,
tanh, softmax) whose compiled result matches the float64 interpreter to ~1e-12 and whose
compiled gradient matches float64 finite differences."""
import numpy as np
import pytest
from test_ops_compiled import ROWS, _check, source

from compiler import build
from compiler.core.types import DType
from compiler.oracle import directional, interp, validate
from compiler.runtime import library as runtime

ROW_NAMES = sorted(ROWS)


def f64_source() -> str:
    """Every row's program in F64 (types, casts and draws), functions renamed f_<i> / g_<i>."""
    parts = []
    for i, row in enumerate(ROW_NAMES):
        text = source(row).replace("F32", "F64").replace("shape=[2, 3])", "shape=[2, 3], dtype=F64)")
        text = text.replace("fn f(", f"fn f_{i}(").replace("handle f(", f"handle f_{i}(")
        parts.append(text.replace("fn g(", f"fn g_{i}("))
    return "\n".join(parts)


MLP = """
fn mlp(x: Tensor[F64, [4, 6]], w1: Tensor[F64, [6, 8]], w2: Tensor[F64, [8, 5]]) -> Tensor[F64, []] {
  let z = x @ w1 in
  let h = z.gelu() in
  let t = h.tanh() in
  let s = h * 0.25 in
  let e = s.exp() in
  let u = t + e in
  let o = u @ w2 in
  let p = o.softmax(axis=1) in
  let q = p + 1e-3 in
  let l = q.log() in
  let m = l.reduce_keep(op=sum, axis=1) in
  let n = m.reduce_keep(op=sum, axis=0) in
  let out = n.reshape([]) in
  out
}

fn mlp_grad(x: Tensor[F64, [4, 6]], w1: Tensor[F64, [6, 8]], w2: Tensor[F64, [8, 5]])
    -> (Tensor[F64, []], Tensor[F64, [4, 6]], Tensor[F64, [6, 8]], Tensor[F64, [8, 5]]) {
  handle mlp(x, w1, w2) with reverseMode
}
"""


def _build(tmp_path_factory, stem: str, text: str):
    d = tmp_path_factory.mktemp(stem)
    (d / f"{stem}.kina").write_text(text)
    res = build.build_file(d / f"{stem}.kina", d / f"{stem}.so")   # at $KINA_OPT_LEVEL
    assert res.ok, "\n".join(res.source.render(g) for g in res.diagnostics)
    return res, runtime.load(res.so_path)


@pytest.fixture(scope="module")
def ops_lib(tmp_path_factory):
    return _build(tmp_path_factory, "ops_f64", f64_source())


@pytest.fixture(scope="module")
def mlp_lib(tmp_path_factory):
    return _build(tmp_path_factory, "mlp_f64", MLP)


def test_every_op_row_in_f64_matches_the_interpreter(ops_lib):
    res, lib = ops_lib
    failures = []
    for i, row in enumerate(ROW_NAMES):
        names = [f"f_{i}"] + ([f"g_{i}"] if ROWS[row][3] else [])
        for name in names:
            try:
                _check(lib, res.program, name, 0)
            except AssertionError as err:
                failures.append(f"{row} ({name}): {str(err).splitlines()[0]}")
    assert not failures, "\n".join(failures)


def test_f64_rows_compute_in_f64(ops_lib):
    """The F64 functions are f64 end to end: x + y exact where f32 would round."""
    res, lib = ops_lib
    i = ROW_NAMES.index("add")
    x = np.array([[1.0, 1e-12, 3.0], [1e300, -2.0, 0.1]])
    y = np.array([[2.0 ** -40, 1.0, 1e-9], [1e300, 1e-17, 0.2]])
    got = lib[f"f_{i}"](x, y)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, x + y)


def _mlp_args():
    rng = np.random.default_rng(5)
    return [rng.standard_normal(s) * 0.5 for s in ((4, 6), (6, 8), (8, 5))]


def test_mlp_matches_the_float64_interpreter(mlp_lib):
    res, lib = mlp_lib
    args = _mlp_args()
    want = interp.run_function(res.program, "mlp_grad", args)
    got = lib.mlp_grad(*args)
    for g, w in zip(got, want):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_mlp_gradient_matches_float64_finite_differences(mlp_lib):
    res, lib = mlp_lib
    args = _mlp_args()
    _, *grads = lib.mlp_grad(*args)
    h = 1e-5
    rng = np.random.default_rng(0)
    for k, (a, g) in enumerate(zip(args, grads)):
        for _ in range(4):   # a few coordinates per parameter: central differences in float64
            at = tuple(int(rng.integers(n)) for n in a.shape)
            plus, minus = [x.copy() for x in args], [x.copy() for x in args]
            plus[k][at] += h
            minus[k][at] -= h
            fd = (float(lib.mlp(*plus)) - float(lib.mlp(*minus))) / (2 * h)
            atol, rtol = DType.F64.fd_tolerance
            assert abs(g[at] - fd) <= atol + rtol * abs(fd), (k, at, g[at], fd)


def test_kinac_validate_passes_the_f64_mlp(tmp_path):
    """kinac validate's own checks of an F64 program (interpreter in float64, gradients by
    finite differences along random directions) at F64's tolerances: the reference is no
    more precise than the dtype."""
    path = tmp_path / "mlp.kina"
    path.write_text(MLP)
    report = validate.validate_file(path, seed=0)
    assert report.ok, validate.format_report(report)
    checks = [c for f in report.functions for c in f.checks]
    assert {c.reference for c in checks} >= {"interp (f64)", directional.REFERENCE}
