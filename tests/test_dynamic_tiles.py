"""The -O2 tiled paths of dynamic exports (issue 25 item 4) at sizes their tiles do not divide.

A dynamic export's matmuls are forall blocks of 32 x 128 with peeled register tiles (the
last rows one at a time), and a second body with packed panels of B for the calls whose
product is wide or deep (compiler/backend/parallelize.py `_pack_test`); its transposes 16 x 16 peeled vector tiles in forall loops, its inner reductions 16-lane
chunks with a remainder loop, its scatter the row-update loop; the threads of each forall
are chosen at the call (compiler/backend/parallel_if.py).  One
library (built once, at -O2) is called at size 1, at odd sizes (7, 33: partial tiles
and blocks only, or full ones and a remainder) and at sizes that turn the threads on,
against NumPy."""
from __future__ import annotations

import re

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
# and remainders); 64 x 600 x 200 (2 M K N = 15 M flops: threads on at the call); 3 x 64 x
# 2048 (rows fewer than a register tile's); the packed body: 37 x 70 x 2100 (wide: N >=
# 2048, a partial last panel and row block), 20 x 600 x 300 (deep: K >= 512), 2 x 70 x
# 2100 (two rows); single rows, never packed (the blocked body runs rows past the register
# tile with k outermost): 1 x 2048 x 2048 (wide), 1 x 600 x 300 (deep, threads on); 9 x 40
# x 200 (a full tile and one row past it)
MATMULS = [(1, 1, 1), (7, 5, 33), (33, 70, 129), (64, 600, 200), (3, 64, 2048),
           (37, 70, 2100), (20, 600, 300), (1, 2048, 2048), (1, 600, 300), (9, 40, 200), (2, 70, 2100)]
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


def _tagged(source: str, tag, exports: list[str] | None = None) -> dict[str, str]:
    """`source`'s module after --inline and `tag` (a parallelize tagging): each function's text
    by name."""
    from compiler.backend import engine
    res = build.BuildResult(False, source=build.SourceText(source, "t.kina"))
    mlir = build.front_end(source, "t.kina", {}, res, build.keep_exports(exports) if exports else None)
    assert mlir is not None
    ir, passmanager, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(mlir)
        passmanager.PassManager.parse("builtin.module(inline)").run(module.operation)
        tag(ir, module)
        return {ir.StringAttr(f.attributes["sym_name"]).value: str(f) for f in module.body.operations
                if f.operation.name == "func.func"}


def test_a_wide_or_deep_product_gets_a_packed_body_picked_at_the_call():
    """The tagging puts a dynamic f32 matmul in `scf.if` (the call's sizes pick): the packed
    body (`kina.parallel_packed`) or the blocked one (`kina.parallel_peeled`, threads chosen
    at the call); a batch_matmul keeps one body."""
    from compiler.backend import parallelize
    text = "\n".join(_tagged(SOURCE, parallelize.tag_vectorizable, ["mm", "bmm"]).values())
    mm = next(part for part in text.split("func.func") if "@kina_mm(" in part)
    assert mm.count("kina.parallel_packed") == 1 and mm.count("kina.parallel_peeled") == 1
    assert mm.index("scf.if") < mm.index("kina.parallel_packed") < mm.index("} else {") < mm.index("kina.parallel_peeled")
    bmm = next(part for part in text.split("func.func") if "@kina_bmm(" in part)
    assert "kina.parallel_packed" not in bmm and bmm.count("kina.parallel_peeled") == 1
    # a single row is never packed: the test reads A's rows (dim 0) against PACK_MIN_ROWS
    head = mm[:mm.index("scf.if")]
    rows = re.search(r"(%dim_\d+) = tensor.dim %arg3, %c0\b", head)
    assert rows and parallelize.PACK_MIN_ROWS == 2
    assert re.search(rf"arith.cmpi sge, {rows[1]}, %c2 ", head)


SHARED = """
fn two[M, K, N](a: Tensor[F32, [M, K]], b: Tensor[F32, [K, N]], c: Tensor[F32, [N, K]]) -> Tensor[F32, [M, K]] {
  let x = a @ b in
  let y = x @ c in
  y
}
fn batched[B, M, K](a: Tensor[F32, [B, M, K]], b: Tensor[F32, [B, K, M]]) -> Tensor[F32, [B, M, M]] {
  a @ b
}
fn fixed(a: Tensor[F32, [8, 4]], b: Tensor[F32, [4, 8]]) -> Tensor[F32, [8, 8]] {
  a @ b
}
"""


def test_products_of_one_type_share_one_function_and_match_numpy(tmp_path):
    """compiler/backend/shared_products.py: the two `?x?` matmuls of `two` call one function
    (their fills moved into it), the batch matmul another; the static product keeps its place.
    The library built from it computes what NumPy does."""
    from compiler.backend import parallelize, shared_products
    funcs = _tagged(SHARED, parallelize.tag_for_script)
    products = sorted(name for name in funcs if name.startswith(shared_products.PREFIX))
    assert len(products) == 2, products
    def calls(name: str) -> int:
        return len(re.findall(r'call @"?kina\.product\.', funcs[name]))
    assert calls("kina_two") == 2 and "linalg.matmul" not in funcs["kina_two"]
    assert "linalg.fill" not in funcs["kina_two"] and calls("kina_batched") == 1
    assert "linalg.matmul" in funcs["kina_fixed"] and "kina.product" not in funcs["kina_fixed"]
    assert all("linalg.fill" in funcs[p] and "llvm.linkage" in funcs[p] for p in products)
    src = tmp_path / "s.kina"
    src.write_text(SHARED)
    built = build.build_file(src, tmp_path / "s.so", 2, cache=False)
    assert built.ok, [d.message for d in built.diagnostics]
    lib = runtime.load(built.so_path)
    rng = np.random.default_rng(3)
    for m, k, n in ((1, 1, 1), (5, 7, 3), (40, 600, 300)):
        a, b, c = (rng.random(s, np.float32) for s in ((m, k), (k, n), (n, k)))
        _close(lib.two(a, b, c), (a @ b) @ c, k * n)
    a3, b3 = rng.random((2, 9, 5), np.float32), rng.random((2, 5, 9), np.float32)
    _close(lib.batched(a3, b3), a3 @ b3, 5)
    a2, b2 = rng.random((8, 4), np.float32), rng.random((4, 8), np.float32)
    _close(lib.fixed(a2, b2), a2 @ b2, 4)
