"""-O2's "@zero-tiles" slot (compiler/backend/zero_tiles.py): register tiles whose first read
of their block would read the block's fill start from the fill's value, and the fill is
dropped; anything the tiles do not overwrite whole, or read otherwise, keeps its fill."""
from __future__ import annotations

import ctypes
from contextlib import contextmanager

import numpy as np
import pytest
from emit_support import libraries_at_levels, o2_module_before

from compiler.backend import engine, pipelines, zero_tiles

LOWER = ("builtin.module(canonicalize,convert-vector-to-scf,convert-linalg-to-loops,expand-strided-metadata,"
         "lower-affine,convert-scf-to-cf,convert-vector-to-llvm,finalize-memref-to-llvm,convert-to-llvm,"
         "reconcile-unrealized-casts)")


def _nest(*, k_blocks: int = 2, i_ub: int = 16, j_step: int = 32, fill: str = "%cst", before: str = "",
          inner: str = "", read_in_if: bool = False, copy: bool = False) -> str:
    """C[16, 64] = fill (or, `copy`, a copy of W) + column sums of B[8, 64] in 8 x 32 register
    tiles, the k loop cut into k_blocks blocks (one: no revisiting loop), with the variations
    the tests name."""
    kb = 8 // k_blocks
    read = ("%r = vector.transfer_read %v[%c0, %c0], %pad {in_bounds = [true, true]} : "
            "memref<8x32xf32, strided<[64, 1], offset: ?>>, vector<8x32xf32>")
    init = (f"linalg.fill ins({fill} : f32) outs(%c : memref<16x64xf32>)" if not copy
            else "memref.copy %w, %c : memref<16x64xf32> to memref<16x64xf32>")
    if read_in_if:
        read = (f"%r = scf.if %t -> (vector<8x32xf32>) {{\n {read}\n scf.yield %r : vector<8x32xf32>\n"
                "} else {\n scf.yield %z : vector<8x32xf32>\n}")
    return f"""
func.func @f(%b: memref<8x64xf32>, %c: memref<16x64xf32>, %w: memref<16x64xf32>, %s: f32, %t: i1) attributes {{llvm.emit_c_interface}} {{
  %cst = arith.constant 0.5 : f32
  %pad = arith.constant 0.0 : f32
  %z = arith.constant dense<0.0> : vector<8x32xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %ckb = arith.constant {kb} : index
  %ci = arith.constant {i_ub} : index
  %cj = arith.constant {j_step} : index
  %c64 = arith.constant 64 : index
  {init}
  {before}
  scf.for %kb = %c0 to %c8 step %ckb {{
    scf.for %i = %c0 to %ci step %c8 {{
      scf.for %j = %c0 to %c64 step %cj {{
        %v = memref.subview %c[%i, %j] [8, 32] [1, 1] : memref<16x64xf32> to memref<8x32xf32, strided<[64, 1], offset: ?>>
        {inner}
        {read}
        %acc = scf.for %k = %c0 to %ckb step %c1 iter_args(%x = %r) -> (vector<8x32xf32>) {{
          %kk = arith.addi %kb, %k : index
          %row = vector.load %b[%kk, %j] : memref<8x64xf32>, vector<32xf32>
          %all = vector.broadcast %row : vector<32xf32> to vector<8x32xf32>
          %y = arith.addf %x, %all : vector<8x32xf32>
          scf.yield %y : vector<8x32xf32>
        }}
        vector.transfer_write %acc, %v[%c0, %c0] {{in_bounds = [true, true]}} : vector<8x32xf32>, memref<8x32xf32, strided<[64, 1], offset: ?>>
      }}
    }}
  }}
  return
}}
"""


@contextmanager
def _module(text: str):
    ir, passmanager, execution_engine = engine.engine_module()
    with ir.Context():
        yield ir, ir.Module.parse(text), passmanager, execution_engine


W = np.arange(16 * 64, dtype=np.float32).reshape(16, 64) / 7


def _run(ir, module, passmanager, execution_engine, b: np.ndarray) -> np.ndarray:
    from mlir.runtime import get_ranked_memref_descriptor
    passmanager.PassManager.parse(LOWER).run(module.operation)
    jit = execution_engine.ExecutionEngine(module, opt_level=2)
    c = np.full((16, 64), np.nan, np.float32)          # whatever the fill does not overwrite shows
    w = W.copy()
    args = [ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(x))) for x in (b, c, w)]
    jit.invoke("f", *args, ctypes.pointer(ctypes.c_float(0.5)), ctypes.pointer(ctypes.c_bool(True)))
    np.testing.assert_array_equal(w, W)                # the copy's source is only read
    return c


@pytest.mark.parametrize("k_blocks", [1, 2, 4])
@pytest.mark.parametrize("copy", [False, True], ids=["fill", "copy"])
def test_tiles_start_from_the_fill_and_compute_the_same_values(k_blocks, copy):
    """From a fill, the tiles start from its value; from a copy of W (an SGD update
    accumulated into the weight, accumulate.py), they read W where the copy would be."""
    b = np.random.default_rng(0).random((8, 64), np.float32)
    results = []
    for rewrite in (False, True):
        with _module(_nest(k_blocks=k_blocks, copy=copy)) as (ir, module, pm, ee):
            if rewrite:
                assert zero_tiles.start_tiles_from_fills(ir, module) == 1
                text = str(module)
                assert "linalg.fill" not in text and "memref.copy" not in text
                # a k loop cut into blocks revisits each tile: the fill's value on its first block only
                assert ("scf.if" in text) == (k_blocks > 1)
            results.append(_run(ir, module, pm, ee, b))
    np.testing.assert_array_equal(results[0], results[1])           # bit for bit
    start = W if copy else 0.5
    np.testing.assert_allclose(results[1], np.broadcast_to(start + b.sum(0), (16, 64)), rtol=1e-6)


@pytest.mark.parametrize("variation", [
    {"i_ub": 8},                    # the tiles cover rows 0-7 only: rows 8-15 keep the fill's value
    {"j_step": 16},                 # tiles 32 wide every 16 columns overlap: a tile reads its neighbour's sums
    {"fill": "%s"},                 # not a constant
    {"before": "%x0 = memref.load %c[%c0, %c0] : memref<16x64xf32>"},   # read between fill and tiles
    {"before": "scf.for %q = %c0 to %c8 step %c1 {\n %x3 = memref.load %c[%q, %q] : memref<16x64xf32>\n }"},
    {"inner": "%x1 = memref.load %c[%i, %j] : memref<16x64xf32>"},       # another read in the nest
    {"read_in_if": True},           # the read under a condition
    {"copy": True, "inner": "memref.store %pad, %w[%i, %j] : memref<16x64xf32>"},   # the source written
    {"copy": True, "before": "%x2 = memref.load %w[%c0, %c0] : memref<16x64xf32>"},  # used between
])
def test_a_fill_the_tiles_do_not_overwrite_whole_or_read_otherwise_stays(variation):
    with _module(_nest(**variation)) as (ir, module, _, _):
        before = str(module)
        assert zero_tiles.start_tiles_from_fills(ir, module) == 0
        assert str(module) == before


def test_the_partial_cover_keeps_the_fills_values():
    """The minimal nest a wrong rewrite breaks: rows the tiles never write hold the fill."""
    b = np.random.default_rng(1).random((8, 64), np.float32)
    with _module(_nest(i_ub=8)) as (ir, module, pm, ee):
        zero_tiles.start_tiles_from_fills(ir, module)
        c = _run(ir, module, pm, ee, b)
    np.testing.assert_allclose(c[:8], np.broadcast_to(0.5 + b.sum(0), (8, 64)), rtol=1e-6)
    np.testing.assert_array_equal(c[8:], 0.5)


MATMUL = "fn mm(a: Tensor[F32, [{m}, {k}]], b: Tensor[F32, [{k}, {n}]]) -> Tensor[F32, [{m}, {n}]] {{\n  a @ b\n}}\n"
# a threaded product with packed panels and a blocked k loop, a threaded one with one k
# block, a serial vectorised one, and one the tile does not divide (peeled: left alone)
SHAPES = [(64, 512, 2048), (256, 256, 256), (16, 64, 64), (20, 40, 40)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matmuls_lose_their_fill_and_agree_with_O0_and_numpy(tmp_path, m, k, n):
    text = MATMUL.format(m=m, k=k, n=n)
    with o2_module_before(text, zero_tiles.SLOT, tmp_path, after=True) as (_, module):
        fills = str(module).count("linalg.fill")
    assert (fills == 0) == ((m, n) != (20, 40))
    libs = libraries_at_levels(text, tmp_path, "mm")
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    for _ in range(2):             # again: a second call reuses the first's freed buffers
        o2 = libs[2].mm(a, b)
        np.testing.assert_allclose(o2, libs[0].mm(a, b), rtol=1e-5, atol=1e-5 * np.sqrt(k))
        np.testing.assert_allclose(o2, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_the_slot_runs_while_copies_are_still_memref_copies():
    """Before "@vector-copies" makes the block copies of an accumulated update loops of vector
    moves (the slot then reads their source instead) and after bufferization."""
    passes = pipelines.O2_PASSES
    assert passes.index("--convert-bufferization-to-memref") < passes.index(zero_tiles.SLOT)
    assert passes.index(zero_tiles.SLOT) < passes.index(pipelines.ROW_COPIES_SLOT) < passes.index(pipelines.COPY_SLOT)
