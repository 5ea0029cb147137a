"""The -O2 elementwise fusion (compiler/backend/fusion.py): which producers move into their
consumers, which stay, and that fused programs compute what -O0 computes."""
from __future__ import annotations

import numpy as np
import pytest
from emit_support import emitted

from compiler import build
from compiler.backend import engine, fusion
from compiler.runtime import library as runtime

SGD = """
fn f(w: Tensor[F32, [64, 32]], g: Tensor[F32, [64, 32]], lr: Tensor[F32, [1, 1]]) -> Tensor[F32, [64, 32]] {
  let w2 = w - lr.broadcast([64, 32]) * g in
  w2
}
"""
# exp feeds a sum (a reduction: not fused, its vector calls stay); x * y feeds a max over
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
    assert count == 2                           # the broadcast and the multiply
    assert text.count("linalg.generic") == 1
    body = text.split("linalg.generic", 1)[1]
    assert "arith.mulf" in body and "arith.subf" in body
    assert "affine_map<(d0, d1) -> (0, 0)>" in text     # lr read in place, never broadcast


def test_no_work_is_repeated_and_reductions_keep_vector_math(tmp_path):
    count, text = _fused(tmp_path, MIXED)
    assert count == 3                           # x * y into its max, the two broadcasts
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


@pytest.mark.parametrize("text", [SGD, MIXED, SHARED], ids=["sgd", "mixed", "shared"])
def test_fused_programs_equal_O0_bit_for_bit_on_elementwise_work(tmp_path, text):
    src = tmp_path / "p.kina"
    src.write_text(text)
    libs = {}
    for level in (0, 2):
        res = build.build_file(src, tmp_path / f"p{level}.so", level, cache=False)
        assert res.ok, res.diagnostics
        libs[level] = runtime.load(res.so_path)
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
