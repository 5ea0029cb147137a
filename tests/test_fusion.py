"""The -O2 elementwise fusion (compiler/backend/fusion.py): which producers move into their
consumers, which stay, and that fused programs compute what -O0 computes."""
from __future__ import annotations

import numpy as np
import pytest
from emit_support import emitted, libraries_at_levels

from compiler.backend import engine, fusion

SGD = """
fn f(w: Tensor[F32, [64, 32]], g: Tensor[F32, [64, 32]], lr: Tensor[F32, [1, 1]]) -> Tensor[F32, [64, 32]] {
  let w2 = w - lr.broadcast([64, 32]) * g in
  w2
}
"""
# exp feeds a sum (a reduction: a math.exp call is not fused, its vector calls stay; the
# pipeline makes exp arithmetic first, and then it is: see below); x * y feeds a max over
# the same loops (fused); x + y feeds the matmul (a named op: never a consumer); the two
# broadcasts of [4, 1] columns are read in place by the subtraction and the addition.
MIXED = """
fn f(x: Tensor[F32, [4, 8]], y: Tensor[F32, [4, 8]], w: Tensor[F32, [8, 8]]) -> Tensor[F32, [4, 8]] {
  let e = x.exp() in
  let s = e.reduce_keep(op=sum, axis=1) in
  let p = x * y in
  let q = p.reduce_keep(op=max, axis=1) in
  let a = x + y in
  let m = a @ w in
  let d = m - q.broadcast([4, 8]) in
  let t = d.transpose([1, 0]) in
  let u = t.transpose([1, 0]) in
  u + s.broadcast([4, 8])
}
"""
# p has two uses: it stays (fusing would compute it twice).
SHARED = """
fn f(x: Tensor[F32, [16, 16]]) -> Tensor[F32, [16, 16]] {
  let p = x * x in
  let a = p + x in
  let b = p - x in
  a * b
}
"""


def _emitted(tmp_path, text: str) -> str:
    return emitted(text, str(tmp_path / "k.kina"))


def _fused(tmp_path, text: str) -> tuple[int, str]:
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(_emitted(tmp_path, text))
        count = fusion.fuse_elementwise(ir, module)
        assert module.operation.verify()
        return count, str(module)


def test_an_sgd_update_is_one_loop_nest(tmp_path):
    count, text = _fused(tmp_path, SGD)
    assert count == 1                           # the multiply (the emitter reads lr.broadcast through)
    assert text.count("linalg.generic") == 1
    body = text.split("linalg.generic", 1)[1]
    assert "arith.mulf" in body and "arith.subf" in body
    assert "affine_map<(d0, d1) -> (0, 0)>" in text     # lr read in place, never broadcast


def test_no_work_is_repeated_and_reductions_keep_vector_math(tmp_path):
    count, text = _fused(tmp_path, MIXED)
    assert count == 1                           # x * y into its max (the broadcasts come read through)
    assert "linalg.matmul ins(%" in text        # named matmuls are never consumers
    reductions = []
    for op in text.split("linalg.generic")[1:]:
        head, _, rest = op.partition("^bb0")
        if "reduction" in head:
            reductions.append(rest.split("linalg.yield", 1)[0])
    assert len(reductions) == 2
    assert not any("math.exp" in r for r in reductions)   # exp keeps its own (vector) loop
    assert any("arith.mulf" in r and "arith.maximumf" in r for r in reductions)


def test_a_producer_with_two_uses_stays(tmp_path):
    count, text = _fused(tmp_path, SHARED)
    assert count == 2                           # a and b into a * b
    assert text.count("linalg.generic") == 2    # p = x * x, computed once, and the rest
    assert text.count("arith.mulf") == 2


# Cross-entropy against one class per row and its gradient: the take_along_axis VJP's
# one-hot cotangent feeds a row sum and the log_softmax VJP.
CROSS_ENTROPY = """
fn loss(x: Tensor[F32, [64, 2048]], t: Tensor[I64, [64, 1]]) -> Tensor[F32, [1, 1]] {
  let logp = x.log_softmax(axis=1) in
  let picked = logp.take_along_axis(t, axis=1) in
  let total = picked.reduce_keep(op=sum, axis=0) in
  let out = -total in
  out
}

fn grad(x: Tensor[F32, [64, 2048]], t: Tensor[I64, [64, 1]]) -> Tensor[F32, [64, 2048]] {
  let (l, gx) = handle loss(x, t) with reverseMode in
  gx
}
"""


def _built(tmp_path, text: str) -> dict:
    """The program's libraries at -O0 and -O2, by level."""
    return libraries_at_levels(text, tmp_path)


def _prepared(tmp_path, text: str) -> str:
    """The module as the -O2 pipeline starts from it (engine.prepare_for_script: exp lowered, then fusion)."""
    from compiler.backend import pipelines
    mlir = _emitted(tmp_path, text)
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(mlir)
        engine.prepare_for_script(ir, module, pipelines.passes_for(mlir, 2, tmp_path))
        assert module.operation.verify()
        return str(module)


def _generics(text: str) -> list[tuple[str, str]]:
    """(head, body) of each linalg.generic of the module text."""
    out = []
    for op in text.split("linalg.generic")[1:]:
        head, _, rest = op.partition("^bb0")
        out.append((head, rest.split("linalg.yield", 1)[0]))
    return out


def test_a_sum_of_exps_is_one_loop_once_exp_is_arithmetic(tmp_path):
    sums = [body for head, body in _generics(_prepared(tmp_path, MIXED)) if "reduction" in head]
    assert any("math.roundeven" in b and "arith.addf" in b for b in sums)   # exp's polynomial in the sum
    assert "math.exp" not in _prepared(tmp_path, MIXED)


def test_the_one_hot_cotangent_is_computed_by_the_vjp_that_reads_it(tmp_path):
    """No zero fill of [64, 2048] for the one-hot; the log_softmax VJP computes its own copy
    (it reads the row's class, linalg.index, and the log-probabilities); the row sums the
    VJP needs are the picks' cotangent (vjp_layout._row_sums), so no other loop writes a
    [64, 2048] one-hot.  The gradient matches -O0."""
    text = _prepared(tmp_path, CROSS_ENTROPY)
    assert not any("tensor<64x2048xf32>" in ln and "linalg.fill" in ln for ln in text.splitlines())
    writers = [(h, b) for h, b in _generics(text) if "tensor<64x2048xf32>" in h.split("outs(")[-1]]
    vjp = [b for h, b in writers if "linalg.index" in b and "math.roundeven" in b]
    assert len(vjp) == 1                 # one-hot select and exp(logp) in one loop
    assert len(writers) == 1             # log_softmax's output is computed where the loss picks
    #                                      from it and in the VJP; no one-hot for a row sum
    libs = _built(tmp_path, CROSS_ENTROPY)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 2048)).astype(np.float32)
    t = rng.integers(0, 2048, (64, 1)).astype(np.int64)
    g0, g2 = libs[0].grad(x, t), libs[2].grad(x, t)
    np.testing.assert_allclose(g2, g0, rtol=1e-6, atol=1e-7)   # row sums reassociated at -O2
    z = x - x.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    ref = p.copy()
    ref[np.arange(64), t[:, 0]] -= 1.0
    np.testing.assert_allclose(g2, ref, rtol=1e-4, atol=1e-6)


# The picked elements of an elementwise result, and a gather that reads every element twice
# (more reads than the product has elements: it stays written once).
PICKED = """
fn f(x: Tensor[F32, [16, 32]], y: Tensor[F32, [16, 32]], i: Tensor[I64, [16, 1]], j: Tensor[I64, [64]])
    -> (Tensor[F32, [16, 1]], Tensor[F32, [64, 32]]) {
  let p = x * y + x in
  let picked = p.take_along_axis(i, axis=1) in
  let q = x - y in
  let rows = gather(q, j) in
  (picked, rows)
}
"""


def test_an_elementwise_result_read_at_a_few_points_is_computed_there(tmp_path):
    text = _prepared(tmp_path, PICKED)
    written = [h for h, _ in _generics(text) if "tensor<16x32xf32>" in h.split("outs(")[-1]]
    assert len(written) == 1                       # q (gathered 64 times from 16 rows); not p
    libs = _built(tmp_path, PICKED)
    rng = np.random.default_rng(9)
    x, y = (rng.standard_normal((16, 32)).astype(np.float32) for _ in range(2))
    i, j = rng.integers(0, 32, (16, 1)), rng.integers(0, 16, 64)
    got0, got2 = libs[0].f(x, y, i, j), libs[2].f(x, y, i, j)
    for a, b in zip(got0, got2):
        np.testing.assert_array_equal(a, b)       # the same scalar ops: the same bits
    np.testing.assert_array_equal(got2[0], np.take_along_axis(x * y + x, i, axis=1))


@pytest.mark.parametrize("text", [SGD, MIXED, SHARED], ids=["sgd", "mixed", "shared"])
def test_fused_programs_equal_O0_bit_for_bit_on_elementwise_work(tmp_path, text):
    libs = _built(tmp_path, text)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(shape).astype(np.float32) for shape in _shapes(text)]
    a, b = libs[0].f(*args), libs[2].f(*args)
    if "@" in text:   # the matmul's FMA rounds once: float tolerance
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    else:             # elementwise ops in the same order: the same bits
        np.testing.assert_array_equal(b, a)


def _shapes(text: str) -> list[tuple[int, ...]]:
    header = text.split("->")[0]
    return [tuple(int(d) for d in part.split("[")[2].split("]")[0].split(","))
            for part in header.split("Tensor")[1:]]
