"""`inf`, `-inf` and `nan` (issue 26): compiled at -O0 and -O2 against the interpreter (and
PyTorch where installed), in every float dtype: masked logits then softmax, comparisons
with -inf, max-reductions, literal payloads, clamp bounds; and no NumPy RuntimeWarning in
`kinac run` / `kinac validate` output for a program full of infinities and overflows."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.oracle import interp, torch_ref
from compiler.runtime import library as runtime

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """\
fn masked(x: Tensor[F32, [2, 4]], m: Tensor[Bool, [2, 4]]) -> (Tensor[F32, [2, 4]], Tensor[Bool, [2, 4]], Tensor[F32, [2, 1]], Tensor[F32, [2, 4]]) {
  let logits = where(m, x, -inf) in
  let p = logits.softmax(axis=1) in
  let keep = gt(logits, -inf) in
  let top = logits.reduce_keep(op=max, axis=1) in
  let c = Tensor[F32, [2, 4]] { -inf, 1.0, nan, inf, -0.5, 2.0, inf, -inf } in
  (p, keep, top, c * 2.0 + x.clamp(min=-inf, max=1.0))
}

fn narrow(a: Tensor[F16, [4]], b: Tensor[BF16, [4]], c: Tensor[F8E5M2, [4]], d: Tensor[F8E4M3, [4]]) -> (Tensor[F16, [4]], Tensor[BF16, [4]], Tensor[F8E5M2, [4]], Tensor[F8E4M3, [4]]) {
  let a2 = a + Tensor[F16, [4]] { -inf, inf, nan, 65504.0 } in
  let b2 = where(lt(b, 0.0), b * inf, b.maximum(-inf)) in
  let c2 = c.clamp(min=-inf, max=inf) + Tensor[F8E5M2, [4]] { inf, 1.0, -inf, 2.0 } in
  let d2 = where(gt(d, 0.0), d, nan) in
  (a2, b2, c2, d2.minimum(Tensor[F8E4M3, [4]] { nan, 448.0, 1.0, 2.0 }))
}
"""

X = np.array([[0.5, -1.0, 2.0, 0.25], [3.0, -2.0, 1.5, -0.5]], np.float32)
M = np.array([[True, False, True, False], [False, False, True, True]])


def _inputs() -> dict[str, list[np.ndarray]]:
    import ml_dtypes
    v = np.array([1.5, -2.0, 0.25, 3.0], np.float32)
    return {"masked": [X, M],
            "narrow": [v.astype(np.float16), v.astype(ml_dtypes.bfloat16), v.astype(ml_dtypes.float8_e5m2),
                       v.astype(ml_dtypes.float8_e4m3fn)]}


def _same(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
    """Equal up to rtol, with infinities of the same sign and NaN where NaN."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=what)
    np.testing.assert_array_equal(np.isposinf(g), np.isposinf(w), err_msg=what)
    np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w), err_msg=what)
    finite = np.isfinite(w)
    np.testing.assert_allclose(g[finite], w[finite], rtol=rtol, err_msg=what)


@pytest.mark.parametrize("level", [0, 2])
def test_infinities_compiled_agree_with_the_interpreter(tmp_path, level):
    path = tmp_path / "inf.kina"
    path.write_text(PROGRAM)
    res = build.build_file(path, tmp_path / "inf.so", level)
    assert res.ok, "\n".join(res.source.render(d) for d in res.diagnostics)
    lib = runtime.load(res.so_path)
    for name, args in _inputs().items():
        got = lib[name](*args)
        want = interp.run_function(res.program, name, args)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype, (name, i)
            _same(g, w, 1e-6, f"{name} result {i} at -O{level}")
    p, keep, top, payload = lib.masked(X, M)
    z = np.where(M, np.exp(X - X.max(axis=1, keepdims=True, where=M, initial=-np.inf)), 0)
    np.testing.assert_allclose(p, z / z.sum(axis=1, keepdims=True), rtol=1e-6)   # masked: exactly 0
    np.testing.assert_array_equal(keep, M)
    np.testing.assert_array_equal(top, [[2.0], [1.5]])
    assert np.isneginf(payload[0, 0]) and np.isnan(payload[0, 2]) and np.isposinf(payload[1, 2])
    a2, b2, c2, d2 = lib.narrow(*_inputs()["narrow"])
    assert np.isneginf(a2[0]) and np.isposinf(a2[1]) and np.isnan(a2[2])
    assert np.isneginf(np.float32(b2[1])) and np.isnan(np.float32(d2[1]))        # -2 * inf; d <= 0 -> nan
    assert np.isposinf(np.float32(c2[0])) and np.isneginf(np.float32(c2[2]))


def test_infinities_agree_with_pytorch():
    if not torch_ref.available():
        pytest.skip("PyTorch is not installed")
    from compiler.analysis import analyze
    snap = analyze(PROGRAM)
    assert not snap.diagnostics
    for name, args in _inputs().items():
        want = interp.run_function(snap.program, name, args, dtype=np.float64)
        got = torch_ref.run_function(snap.program, name, args)
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, 1e-12, f"{name} result {i}")


# A program whose interpretation overflows in casts (F32 -> F16), divides 0 by 0 and
# subtracts infinities: IEEE semantics, which NumPy would also warn about.
NOISY = """\
fn noisy(x: Tensor[F32, [3]]) -> (Tensor[F16, [3]], Tensor[F32, [3]], Tensor[F32, [3]]) {
  let big = (x * 1e30).cast(dtype=F16) in
  let nans = (x * inf - inf) / (x * 0.0) in
  (big, nans, where(gt(x, -inf), x, -inf).softmax(axis=0))
}
"""


@pytest.mark.parametrize("command", ["run", "validate"])
def test_no_numpy_warning_reaches_kinac_output(tmp_path, command):
    path = tmp_path / "noisy.kina"
    path.write_text(NOISY)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "default"}
    extra = ["--entry", "noisy"] if command == "run" else []
    out = subprocess.run([sys.executable, "-m", "compiler.cli", command, *extra, str(path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Warning" not in out.stderr + out.stdout, out.stderr     # RuntimeWarning, and any other
    assert "inf" in out.stdout if command == "run" else "PASS noisy" in out.stdout
