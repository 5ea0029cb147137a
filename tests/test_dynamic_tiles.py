"""The -O2 tiled paths of dynamic exports (issue 25 item 4) at sizes their tiles do not divide.

A dynamic export's matmuls are forall blocks of 32 x 128 with peeled 8 x 32 register tiles,
its transposes 16 x 16 peeled vector tiles in forall loops, its inner reductions 16-lane
chunks with a remainder loop, its scatter the row-update loop; the threads of each forall
are chosen at the call (compiler/backend/parallel_if.py).  One
library (built once, at -O2) is called at size 1, at odd sizes (7, 33: partial tiles
and blocks only, or full ones and a remainder) and at sizes that turn the threads on,
against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import build
from compiler.runtime import library as runtime

SOURCE = """
fn mm[M, K, N](a: Tensor[F32, [M, K]], b: Tensor[F32, [K, N]]) -> Tensor[F32, [M, N]] {
  a @ b
}
fn bmm[B, M, K, N](a: Tensor[F32, [B, M, K]], b: Tensor[F32, [B, K, N]]) -> Tensor[F32, [B, M, N]] {
  a @ b
}
fn sm[M, N](x: Tensor[F32, [M, N]]) -> Tensor[F32, [M, N]] {
  x.softmax(axis=1)
}
fn tr[M, N](x: Tensor[F32, [M, N]]) -> Tensor[F32, [N, M]] {
  x.transpose([1, 0])
}
fn tr4[A, B, C, D](x: Tensor[F32, [A, B, C, D]]) -> Tensor[F32, [A, B, D, C]] {
  x.transpose([0, 1, 3, 2])
}
fn rows[N, V, D](ids: Tensor[I64, [N]], table: Tensor[F32, [V, D]]) -> Tensor[F32, [N, D]] {
  let out = gather(table, ids) in
  out
}
fn counts[N, V, D](ids: Tensor[I64, [N]], table: Tensor[F32, [V, D]]) -> Tensor[F32, [V, D]] {
  let (r, g_table) = handle rows[N, V, D](ids, table) with reverseMode in
  g_table
}
"""
# (M, K, N): 1; odd (partial tiles and blocks only); 33 x 70 x 129 (full tiles and blocks
# and remainders); 64 x 600 x 200 (2 M K N = 15 M flops: threads on at the call)
MATMULS = [(1, 1, 1), (7, 5, 33), (33, 70, 129), (64, 600, 200)]
ROWS = [(1, 1), (7, 33), (33, 17), (300, 1000)]   # the last: a 300,000-element transpose, threads on


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    src = tmp_path_factory.mktemp("tiles") / "tiles.kina"
    src.write_text(SOURCE)
    res = build.build_file(src, src.with_suffix(".so"), 2, cache=False)
    assert res.ok, [d.message for d in res.diagnostics]
    return runtime.load(res.so_path)


def _close(got, want, scale=1.0):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


pytestmark = pytest.mark.both_levels   # builds at -O2 itself: the tiled paths are -O2's


@pytest.mark.parametrize("m, k, n", MATMULS)
def test_matmuls_match_numpy_at_sizes_the_tiles_do_not_divide(lib, m, k, n):
    rng = np.random.default_rng(m + k + n)
    a, b = rng.random((m, k), np.float32), rng.random((k, n), np.float32)
    _close(lib.mm(a, b), a @ b, k)
    a3, b3 = rng.random((3, m, k), np.float32), rng.random((3, k, n), np.float32)
    _close(lib.bmm(a3, b3), a3 @ b3, k)


@pytest.mark.parametrize("m, n", ROWS)
def test_softmax_and_transposes_match_numpy(lib, m, n):
    x = np.random.default_rng(m * n).random((m, n), np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    _close(lib.sm(x), e / e.sum(1, keepdims=True))
    assert np.array_equal(lib.tr(x), x.T)
    x4 = x.reshape(1, 1, m, n)
    assert np.array_equal(lib.tr4(x4), x4.transpose(0, 1, 3, 2))


@pytest.mark.parametrize("n, v, d", [(1, 1, 1), (7, 3, 33), (33, 40, 17)])
def test_the_gather_gradient_scatter_counts_rows(lib, n, v, d):
    rng = np.random.default_rng(n)
    ids, table = rng.integers(0, v, n), rng.random((v, d), np.float32)
    assert np.array_equal(lib.rows(ids, table), table[ids])
    want = np.zeros((v, d), np.float32)
    np.add.at(want, ids, 1.0)
    assert np.array_equal(lib.counts(ids, table), want)
