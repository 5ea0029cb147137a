"""Kina's own f32 exp and log (compiler/backend/math_lowering.py: exp at every level, log
where log_softmax takes a row's log) and -O2's vectorised inner reductions
(loop_tags.tag_inner_reductions + the transform script): the rewrites, the accuracy of the
compiled exp and log over sweeps of f32 inputs and their special values, the same bits at
-O0 and -O2, and the programs that motivated them (a causal softmax, log_softmax rows)
against -O0 and NumPy."""
from __future__ import annotations

import numpy as np
import pytest
from emit_support import emitted

from compiler import build
from compiler.backend import engine, fusion, loop_tags, math_lowering
from compiler.backend.bindings import walk_ops
from compiler.backend.emit import ops as emit_ops
from compiler.runtime import library as runtime

pytestmark = pytest.mark.both_levels   # builds at -O0 and -O2 itself
N = 1 << 20
EXP = (f"fn ex(x: Tensor[F32, [{N}]]) -> Tensor[F32, [{N}]] {{\n  x.exp()\n}}\n"
       f"fn lg(x: Tensor[F32, [{N}]]) -> Tensor[F32, [{N}]] {{\n  x.log()\n}}\n")
CAUSAL = """
fn attn(s: Tensor[F32, [2, 4, 32, 32]], mask: Tensor[F32, [1, 1, 32, 32]]) -> Tensor[F32, [2, 4, 32, 32]] {
  let m = s + mask.broadcast([2, 4, 32, 32]) in
  m.softmax(axis=3)
}
fn lsm(x: Tensor[F32, [8, 48]]) -> Tensor[F32, [8, 48]] {
  x.log_softmax(axis=1)
}
fn rows(x: Tensor[F32, [3, 5, 64]]) -> (Tensor[F32, [3, 5, 1]], Tensor[F32, [3, 5, 1]], Tensor[F32, [3, 5, 1]]) {
  (x.reduce_keep(op=sum, axis=2), x.reduce_keep(op=max, axis=2), x.reduce_keep(op=mean, axis=2))
}
fn odd(x: Tensor[F32, [6, 10]]) -> Tensor[F32, [6, 1]] {
  x.reduce_keep(op=sum, axis=1)
}
"""


def _module(tmp_path, text: str) -> str:
    return emitted(text, str(tmp_path / "k.kina"))


def _lib(tmp_path, text: str, level: int, name: str):
    src = tmp_path / f"{name}.kina"
    src.write_text(text)
    res = build.build_file(src, tmp_path / f"{name}_O{level}.so", level, cache=False)
    assert res.ok, res.diagnostics
    return runtime.load(res.so_path)


def test_every_f32_exp_is_rewritten_and_the_module_verifies(tmp_path):
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(_module(tmp_path, CAUSAL))
        before = str(module).count("math.exp")
        assert before >= 2
        assert math_lowering.lower_math(ir, module) == {"math.exp": before}
        assert module.operation.verify()
        text = str(module)
        assert "math.exp" not in text and "math.roundeven" in text and "math.fma" in text


def test_O0_rewrites_the_exp_lines_of_the_text_in_place(tmp_path):
    """-O0's rewrite of the emitted text (toolchain.run_passes): every f32 exp line becomes
    the polynomial on that line (tool errors map back through the line numbers), and the
    module still verifies."""
    emitted_text = _module(tmp_path, CAUSAL)
    text, counts = math_lowering.lower_math_text(emitted_text)
    assert counts == {"math.exp": emitted_text.count("math.exp")} and counts["math.exp"] >= 2
    assert "math.exp" not in text and text.count("\n") == emitted_text.count("\n")
    ir, _, _ = engine.engine_module()
    with ir.Context():
        assert ir.Module.parse(text).operation.verify()


def test_inner_reductions_are_tagged_and_others_are_not(tmp_path):
    """Rows of 64 and 32 (multiples of 16) are tagged; a row of 10 is not."""
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(_module(tmp_path, CAUSAL))
        tagged = loop_tags.tag_inner_reductions(ir, module)
        text = str(module)
    assert tagged == text.count("kina.reduce_inner")
    # attn: max and sum; lsm: its rows are 48 = 3 x 16: max and sum; rows: sum, max, mean's sum
    assert tagged == 7
    assert "tensor<6x10xf32>) outs" in text and text.count("kina.reduce_inner = array<i64: 1, 0>") == 2


TWO_SUMS = """
fn f(v: Tensor[{t}, [3, 48]]) -> Tensor[{t}, [1, 1]] {{
  let a = v.reduce_keep(op=sum, axis=0) in
  a.reduce_keep(op=sum, axis=1)
}}
"""


def test_a_reduction_that_computes_f8_values_is_not_tagged(tmp_path):
    """Fusion folds the F8 rounding of `a` into the second sum, whose operands are f32:
    vectorised, its vector<16xf8> conversions did not lower (tests/regressions/
    f8_fused_inner_reduction.kina).  The F32 program's second sum is tagged."""
    ir, _, _ = engine.engine_module()
    counts = {}
    for t in ("F32", "F8E5M2", "F8E4M3"):
        with ir.Context():
            module = ir.Module.parse(_module(tmp_path, TWO_SUMS.format(t=t)))
            fusion.fuse_elementwise(ir, module)
            sums = walk_ops(ir, module, lambda op: op.name == "linalg.generic" and "reduction\"]" in str(op))
            fused = any("arith.truncf" in str(op) for op in sums)
            counts[t] = (loop_tags.tag_inner_reductions(ir, module), fused)
    assert counts == {"F32": (1, False), "F8E5M2": (0, True), "F8E4M3": (0, True)}


@pytest.fixture(scope="module")
def exp_log(tmp_path_factory):
    """{level: library} of EXP, whose `lg` takes FnEmitter.own_log (as log_softmax's row
    log does) in place of the elementwise log's libm call."""
    own = emit_ops.elementwise(lambda em, x: em.own_log(x))
    libs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(emit_ops.LOWERINGS, "log", own)
        for level in (0, 2):
            libs[level] = _lib(tmp_path_factory.mktemp(f"exp{level}"), EXP, level, "exp")
    return libs


def _sweep(libs, fn: str, xs: np.ndarray, want) -> float:
    """The largest ulp error of `fn` at -O2 on xs (in chunks of N) against float64 `want`;
    asserts the -O0 and -O2 results are the same bits and non-finite results exact."""
    worst = 0.0
    for start in range(0, xs.size, N):
        x = np.ones(N, np.float32)
        chunk = xs[start:start + N]
        x[:chunk.size] = chunk
        got0, got = libs[0][fn](x), libs[2][fn](x)
        np.testing.assert_array_equal(got0.view(np.uint32), got.view(np.uint32))
        with np.errstate(over="ignore", divide="ignore"):
            ref = want(x.astype(np.float64))
            ref32 = ref.astype(np.float32)
        finite = np.isfinite(ref32) & (ref32 != 0)
        np.testing.assert_array_equal(got[~finite], ref32[~finite])
        ulp = np.abs(got.astype(np.float64) - ref)[finite] / np.spacing(np.abs(ref32[finite])).astype(np.float64)
        worst = max(worst, float(ulp.max()))
    return worst


def test_compiled_exp_is_within_two_ulp_and_the_same_bits_at_both_levels(exp_log):
    """Every 4099th f32 between -110 and 95 (about 590,000 values; the subnormal results
    included) against float64 exp, and the special values exactly."""
    top = int(np.float32(110.0).view(np.int32))
    mags = np.arange(0, top, 4099, dtype=np.int64).astype(np.int32).view(np.float32)
    xs = np.concatenate([mags, -mags])
    assert _sweep(exp_log, "ex", xs[(xs > -110) & (xs < 95)], np.exp) <= 2.0
    special = np.array([np.nan, np.inf, -np.inf, -1e4, -104.0, 89.0, 0.0, -0.0, 1e-30], np.float32)
    x = np.zeros(N, np.float32)
    x[:special.size] = special
    with np.errstate(over="ignore"):
        for lib in exp_log.values():
            np.testing.assert_array_equal(lib.ex(x)[:special.size], np.exp(special))


def test_own_log_is_within_one_ulp_and_the_same_bits_at_both_levels(exp_log):
    """Every 2411th positive finite f32 (about 880,000 values, the subnormals included)
    against float64 log, and the special values exactly."""
    xs = np.arange(1, 0x7F800000, 2411, dtype=np.int64).astype(np.int32).view(np.float32)
    assert _sweep(exp_log, "lg", xs, np.log) <= 1.0
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.0, 1e-45, 3.4028235e38], np.float32)
    x = np.ones(N, np.float32)
    x[:special.size] = special
    with np.errstate(divide="ignore", invalid="ignore"):
        for lib in exp_log.values():
            np.testing.assert_array_equal(lib.lg(x)[:special.size], np.log(special))


def test_causal_softmax_and_row_reductions_match_O0_and_numpy(tmp_path):
    """The program that showed libmvec's slow lanes (half the scores masked to -1e4), the
    log_softmax rows and sum / max / mean rows (reassociated sums: within tolerance)."""
    lib2, lib0 = _lib(tmp_path, CAUSAL, 2, "c"), _lib(tmp_path, CAUSAL, 0, "c")
    rng = np.random.default_rng(0)
    s = (rng.standard_normal((2, 4, 32, 32)) * 3).astype(np.float32)
    mask = np.triu(np.full((32, 32), -1e4, np.float32), 1).reshape(1, 1, 32, 32)
    m = s.astype(np.float64) + mask
    e = np.exp(m - m.max(axis=3, keepdims=True))
    np.testing.assert_allclose(lib2.attn(s, mask), e / e.sum(axis=3, keepdims=True), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(lib2.attn(s, mask), lib0.attn(s, mask), rtol=2e-6, atol=1e-7)
    x = (rng.standard_normal((8, 48)) * 4).astype(np.float32)
    x64 = x.astype(np.float64)
    want = x64 - x64.max(1, keepdims=True) - np.log(np.exp(x64 - x64.max(1, keepdims=True)).sum(1, keepdims=True))
    np.testing.assert_allclose(lib2.lsm(x), want, rtol=1e-5, atol=1e-6)
    r = rng.standard_normal((3, 5, 64)).astype(np.float32)
    got = lib2.rows(r)
    np.testing.assert_allclose(got[0], r.astype(np.float64).sum(2, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], r.max(2, keepdims=True))            # max: exact in any order
    np.testing.assert_allclose(got[2], r.astype(np.float64).mean(2, keepdims=True), rtol=1e-5, atol=1e-6)
    o = rng.standard_normal((6, 10)).astype(np.float32)
    np.testing.assert_array_equal(lib2.odd(o), lib0.odd(o))                   # untagged: the same loop
