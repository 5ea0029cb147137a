"""An elementwise op reads a literal as a scalar in its body and a broadcast through the
broadcast's map (compiler/backend/emit/folded.py), not tensors of copies: `x * 0.5` at -O2
took a 2 MiB fill and a second read of it on a [256, 2048] x (0.33 ms; 0.12 ms as a
scalar).  The fill or broadcast stays when another kind of op reads it, and the results are
those of NumPy at every level."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.runtime import library as runtime

SCALED = """
fn f(x: Tensor[F32, [64, 128]]) -> Tensor[F32, [64, 128]] {
  let y = x * 0.5 in
  let z = y + x in
  let w = where(ge(z, 0.0), z, -1e9) in
  w
}
"""
# A splat of 4,096 values is a fill (not a dense constant): read by the product as a
# tensor, and by the add as its scalar.
SHARED = """
fn f(x: Tensor[F32, [16, 64]]) -> Tensor[F32, [16, 64]] {
  let c = Tensor[F32, [64, 64]] { 0.25 } in
  let y = x @ c in
  let z = y + 0.75 in
  z
}
"""
# reverseMode binds the literal to a let (`inert.N`) that the forward product and its VJP
# both read: two elementwise readers, no fill.
GRAD = """
fn loss(x: Tensor[F32, [8, 32]]) -> Tensor[F32, [1, 1]] {
  let y = x * 3.0 in
  let s = y.reduce_keep(op=sum, axis=-1) in
  let t = s.reduce_keep(op=sum, axis=0) in
  t
}

fn grads(x: Tensor[F32, [8, 32]]) -> (Tensor[F32, [1, 1]], Tensor[F32, [8, 32]]) {
  handle loss(x) with reverseMode
}
"""


def emitted(src: str, tmp_path: Path) -> str:
    path = tmp_path / "p.kina"
    path.write_text(src)
    res = build.build_file(path, tmp_path / "p.so", 0, cache=False)
    assert res.ok, res.diagnostics
    assert res.mlir is not None
    return res.mlir


def compiled(src: str, tmp_path: Path, level: int):
    path = tmp_path / f"p{level}.kina"
    path.write_text(src)
    res = build.build_file(path, tmp_path / f"p{level}.so", level, cache=False)
    assert res.ok, res.diagnostics
    return runtime.load(res.so_path)


def fills(mlir: str) -> list[str]:
    return re.findall(r"linalg\.fill ins\(%[\w.$-]+ : f32\) outs\(%[\w.$-]+ : (tensor<[^>]*>)\)", mlir)


def test_a_literal_read_by_elementwise_ops_is_no_tensor(tmp_path):
    mlir = emitted(SCALED, tmp_path)
    assert fills(mlir) == [] and "bufferization.alloc_tensor" not in mlir
    assert re.search(r"arith\.mulf %[\w.$-]+, %[\w.$-]+ : f32", mlir)
    # each generic takes only its tensor operands: x (* 0.5); y, x; z (>= 0.0); the mask, z (else -1e9)
    assert [len(m.split(",")) for m in re.findall(r"ins\(([^:]*) :", mlir)] == [1, 2, 1, 2]


@pytest.mark.parametrize("level", [0, 2])
def test_scalar_literals_give_numpys_values(level, tmp_path):
    x = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    z = x * np.float32(0.5) + x
    want = np.where(z >= 0, z, np.float32(-1e9))
    np.testing.assert_array_equal(compiled(SCALED, tmp_path, level).f(x), want)


def test_a_literal_another_op_reads_keeps_its_fill(tmp_path):
    mlir = emitted(SHARED, tmp_path)
    assert "tensor<64x64xf32>" in fills(mlir)           # the product's operand
    assert "tensor<16x64xf32>" in fills(mlir)           # the product's accumulator (zeros)
    assert len(fills(mlir)) == 2                        # 0.75 is the add's scalar
    x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    want = x.astype(np.float64) @ np.full((64, 64), 0.25) + 0.75
    for level in (0, 2):
        np.testing.assert_allclose(compiled(SHARED, tmp_path, level).f(x), want, rtol=1e-5, atol=1e-5)


def test_the_literal_of_a_differentiated_op_is_read_by_the_forward_and_the_vjp(tmp_path):
    mlir = emitted(GRAD, tmp_path)
    grads_fn = mlir[mlir.index('@"kina_loss.rev"'):]
    assert grads_fn.count("arith.constant 3.0") == 1 and len(fills(grads_fn)) == 2   # the two sums' zeros
    x = np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32)
    for level in (0, 2):
        t, g = compiled(GRAD, tmp_path, level).grads(x)
        np.testing.assert_allclose(t, [[3.0 * x.astype(np.float64).sum()]], rtol=1e-5)
        np.testing.assert_array_equal(g, np.full((8, 32), 3.0, np.float32))


BIAS = """
fn f(x: Tensor[F32, [6, 8]], b: Tensor[F32, [8]], s: Tensor[F32, [6, 1]]) -> Tensor[F32, [6, 8]] {
  let b2 = b.reshape([1, 8]) in
  let bb = b2.broadcast([6, 8]) in
  let y = x + bb in
  let sb = s.broadcast([6, 8]) in
  let z = y * sb in
  let c = Tensor[F32, [1, 1]] { 2.0 } in
  let cb = c.broadcast([6, 8]) in
  let w = z - cb in
  w
}
"""
# bb is read by the product too (it stays, written once) and by the add through its map;
# a broadcast of a broadcast reads the first one's source.
SHARED_VIEW = """
fn f(x: Tensor[F32, [8, 8]], b: Tensor[F32, [1, 8]], v: Tensor[F32, [1, 1, 8]])
    -> (Tensor[F32, [8, 8]], Tensor[F32, [4, 3, 8]]) {
  let bb = b.broadcast([8, 8]) in
  let p = x @ bb in
  let out = p + bb in
  let v2 = v.broadcast([1, 3, 8]) in
  let v3 = v2.broadcast([4, 3, 8]) in
  let q = x.slice(axis=0, start=0, stop=4).reshape([4, 1, 8]) in
  let qb = q.broadcast([4, 3, 8]) in
  let r = qb * v3 in
  (out, r)
}
"""


def test_a_broadcast_read_by_elementwise_ops_is_read_through(tmp_path):
    mlir = emitted(BIAS, tmp_path)
    assert mlir.count("linalg.generic") == 3                 # the add, the multiply, the subtract
    assert "affine_map<(d0, d1) -> (0, d1)>" in mlir          # b's row for every row of x
    assert "affine_map<(d0, d1) -> (d0, 0)>" in mlir          # s's value for each row
    assert fills(mlir) == []                                  # 2.0 broadcast: still its scalar
    rng = np.random.default_rng(3)
    x, b, s = (rng.standard_normal(shape).astype(np.float32) for shape in ((6, 8), (8,), (6, 1)))
    want = (x + b) * s - np.float32(2.0)
    for level in (0, 2):
        np.testing.assert_array_equal(compiled(BIAS, tmp_path, level).f(x, b, s), want)


def test_a_broadcast_another_op_reads_stays_and_chains_read_the_first_source(tmp_path):
    mlir = emitted(SHARED_VIEW, tmp_path)
    # bb's broadcast (read by the product), the add, the multiply: v2, v3 and qb are read through
    assert mlir.count("linalg.generic") == 3
    assert "affine_map<(d0, d1, d2) -> (0, 0, d2)>" in mlir    # v, for v3 = (v2 = v.broadcast).broadcast
    rng = np.random.default_rng(4)
    x, b, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((8, 8), (1, 8), (1, 1, 8)))
    bb = np.broadcast_to(b, (8, 8))
    for level in (0, 2):
        out, r = compiled(SHARED_VIEW, tmp_path, level).f(x, b, v)
        np.testing.assert_allclose(out, x.astype(np.float64) @ bb + bb, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(r, np.broadcast_to(x[:4].reshape(4, 1, 8) * v, (4, 3, 8)))
