"""-O2 reads a matmul's transposed A operand through the matmul's maps instead of a
linalg.transpose (compiler/backend/transposed_operands.py): which matmuls it folds, and that
the results stay those of -O0 and NumPy."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import build
from compiler.backend import engine
from compiler.backend.transposed_operands import FOLD_MAX_N, fold_transposed_lhs
from compiler.runtime import library as runtime

pytestmark = pytest.mark.both_levels

SRC = """
fn tn(a: Tensor[F32, [64, 256]], b: Tensor[F32, [64, 32]]) -> Tensor[F32, [256, 32]] {
  a.transpose([1, 0]) @ b
}
fn shared(x: Tensor[F32, [64, 64]], g: Tensor[F32, [64, 32]], h: Tensor[F32, [64, 64]]) -> (Tensor[F32, [64, 32]], Tensor[F32, [64, 64]]) {
  let xt = x.transpose([1, 0]) in
  (xt @ g, xt @ h)
}
fn keep(x: Tensor[F32, [64, 64]], g: Tensor[F32, [64, 32]]) -> (Tensor[F32, [64, 32]], Tensor[F32, [64, 64]]) {
  let xt = x.transpose([1, 0]) in
  (xt @ g, xt)
}
fn wide(a: Tensor[F32, [64, 64]], b: Tensor[F32, [64, 512]]) -> Tensor[F32, [64, 512]] {
  a.transpose([1, 0]) @ b
}
fn odd(a: Tensor[F32, [20, 12]], b: Tensor[F32, [20, 8]]) -> Tensor[F32, [12, 8]] {
  a.transpose([1, 0]) @ b
}
fn tb(a: Tensor[F32, [64, 64]], b: Tensor[F32, [32, 64]]) -> Tensor[F32, [64, 32]] {
  a @ b.transpose([1, 0])
}
fn btn(q: Tensor[F32, [2, 3, 32, 8]], g: Tensor[F32, [2, 3, 32, 32]]) -> Tensor[F32, [2, 3, 8, 32]] {
  q.transpose([0, 1, 3, 2]) @ g
}
fn btn3(q: Tensor[F32, [4, 64, 8]], g: Tensor[F32, [4, 64, 32]]) -> Tensor[F32, [4, 8, 32]] {
  q.transpose([0, 2, 1]) @ g
}
fn bperm(q: Tensor[F32, [3, 2, 32, 8]], g: Tensor[F32, [2, 3, 32, 32]]) -> Tensor[F32, [2, 3, 8, 32]] {
  q.transpose([1, 0, 3, 2]) @ g
}
fn grad(x: Tensor[F32, [32, 64]], w: Tensor[F32, [64, 32]]) -> (Tensor[F32, [1, 1]], Tensor[F32, [64, 32]]) {
  let (loss, g_x, g_w) = handle loss(x, w) with reverseMode in
  (loss, g_w)
}
fn loss(x: Tensor[F32, [32, 64]], w: Tensor[F32, [64, 32]]) -> Tensor[F32, [1, 1]] {
  let y = x @ w in
  let sq = y * y in
  let rows = sq.reduce_keep(op=sum, axis=1) in
  let l = rows.reduce_keep(op=sum, axis=0) in
  l
}
"""


def _name(fn) -> str:
    """A func.func's Kina name."""
    return str(fn.attributes["sym_name"]).strip('"').removeprefix("kina_")


def _emitted(src: str, tmp_path) -> str:
    """The MLIR the front end emits for `src`."""
    res = build.build_source(src, "t.kina", tmp_path / "t.so", opt_level=0)
    assert res.ok, res.diagnostics
    return res.mlir


def _libraries(src: str, tmp_path) -> dict[int, object]:
    """`src` built at -O0 and -O2, by level."""
    libs = {}
    for level in (0, 2):
        res = build.build_source(src, "t.kina", tmp_path / f"t{level}.so", opt_level=level)
        assert res.ok, res.diagnostics
        libs[level] = runtime.load(res.so_path)
    return libs


def _functions(module) -> dict[str, list[str]]:
    """The op names of each function's body, by Kina name."""
    return {_name(fn): [op.operation.name for op in fn.regions[0].blocks[0].operations] for fn in module.body.operations}


def test_only_whole_tile_matmuls_with_a_transposed_a_are_folded(tmp_path):
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(_emitted(SRC, tmp_path))
        before = _functions(module)
        folded = fold_transposed_lhs(ir, module)
        assert module.operation.verify()
        after = _functions(module)
        text = str(module)
    # tn, both of shared's, keep's, btn's (through its collapse to [6, 32, 8]), btn3's and the
    # weight gradient x^T @ g of grad's reverse pass
    assert folded == 7 and FOLD_MAX_N == 512
    assert before["tn"].count("linalg.transpose") == 1 and "linalg.transpose" not in after["tn"]
    assert "linalg.transpose" not in after["shared"]       # its two readers both folded
    assert after["keep"].count("linalg.transpose") == 1     # also a result: it stays
    assert after["odd"] == before["odd"]                    # 12 x 8: not whole 8 x 32 tiles
    assert after["wide"] == before["wide"]                  # N = FOLD_MAX_N: a transpose pass pays
    assert after["tb"] == before["tb"]                      # a transposed B is not folded
    assert "linalg.transpose" not in after["btn"] + after["btn3"]
    assert after["btn"].count("tensor.collapse_shape") == before["btn"].count("tensor.collapse_shape")
    assert after["bperm"] == before["bperm"]                # it moves a batch dim: not folded
    assert text.count("affine_map<(d0, d1, d2) -> (d2, d0)>") == 1   # the maps, printed once as an alias
    assert text.count("affine_map<(d0, d1, d2, d3) -> (d0, d3, d1)>") == 1


def test_folded_matmuls_match_O0_and_numpy(tmp_path):
    libs = _libraries(SRC, tmp_path)
    rng = np.random.default_rng(3)
    for name in ("tn", "shared", "keep", "wide", "odd", "tb", "btn", "btn3", "bperm", "grad"):
        args = [rng.standard_normal(p.shape).astype(np.float32) for p in libs[2][name].params]
        got, want = (libs[lv][name](*args) for lv in (2, 0))
        got, want = (r if isinstance(r, tuple) else (r,) for r in (got, want))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4, err_msg=name)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 256), (64, 32)))
    np.testing.assert_allclose(libs[2].tn(a, b), a.T @ b, rtol=1e-5, atol=1e-4)
    q, g = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 32, 8), (2, 3, 32, 32)))
    np.testing.assert_allclose(libs[2].btn(q, g), np.swapaxes(q, 2, 3) @ g, rtol=1e-5, atol=1e-4)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((32, 64), (64, 32)))
    np.testing.assert_allclose(libs[2].grad(x, w)[1], x.T @ (2 * (x @ w)), rtol=1e-4, atol=1e-3)


# A packed B that is a transpose (transposed_operands.tag_packed_transposed_rhs): the script
# transposes each panel straight into its packed buffer.  K = 8192 makes the [K, 128] panels
# deep enough to be packed.
PACKED = """
fn tbp(g: Tensor[F32, [32, 8192]], w: Tensor[F32, [256, 8192]]) -> Tensor[F32, [32, 256]] {
  let wt = w.transpose([1, 0]) in
  let y = g @ wt in
  y
}
fn tbp_keep(g: Tensor[F32, [32, 8192]], w: Tensor[F32, [256, 8192]]) -> (Tensor[F32, [32, 256]], Tensor[F32, [8192, 256]]) {
  let wt = w.transpose([1, 0]) in
  let y = g @ wt in
  (y, wt)
}
fn plain(g: Tensor[F32, [32, 8192]], wt: Tensor[F32, [8192, 256]]) -> Tensor[F32, [32, 256]] {
  let y = g @ wt in
  y
}
"""


KINA_TAGS = ("kina.pack_b", "kina.pack_b_t", "kina.parallel", "kina.transpose_tile", "kina.parallel_transpose")


def test_a_packed_b_made_by_a_transpose_is_transposed_by_its_matmul(tmp_path):
    from compiler.backend.bindings import walk_ops
    from compiler.backend.parallelize import tag_for_script
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(_emitted(PACKED, tmp_path))
        tag_for_script(ir, module)
        tags: dict[str, dict[str, set[str]]] = {}
        for fn in module.body.operations:
            for op in walk_ops(ir, fn, lambda op: op.name in ("linalg.matmul", "linalg.transpose")):
                tags.setdefault(_name(fn), {})[op.name] = {t for t in KINA_TAGS if t in op.attributes}
    assert "kina.pack_b_t" in tags["tbp"]["linalg.matmul"] and "kina.pack_b" not in tags["tbp"]["linalg.matmul"]
    assert not tags["tbp"]["linalg.transpose"]                       # the matmul's script transposes it
    assert "kina.pack_b" in tags["tbp_keep"]["linalg.matmul"]         # the transpose is also a result
    assert "kina.transpose_tile" in tags["tbp_keep"]["linalg.transpose"]
    assert "kina.pack_b" in tags["plain"]["linalg.matmul"]


def test_a_packed_transposed_b_is_bit_identical_to_a_packed_b(tmp_path):
    libs = _libraries(PACKED, tmp_path)
    rng = np.random.default_rng(5)
    g, w = rng.standard_normal((32, 8192)).astype(np.float32), rng.standard_normal((256, 8192)).astype(np.float32)
    got = libs[2].tbp(g, w)
    np.testing.assert_array_equal(got, libs[2].plain(g, np.ascontiguousarray(w.T)))
    np.testing.assert_array_equal(libs[2].tbp_keep(g, w)[0], got)
    np.testing.assert_allclose(got, libs[0].tbp(g, w), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got, g @ w.T, rtol=1e-4, atol=1e-3)
