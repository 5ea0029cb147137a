"""-O2's "@vector-copies" slot (compiler/backend/row_copies.py): strided copies of contiguous
rows become vector loads and stores, and a fill that such a copy overwrites is dropped."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from compiler import build
from compiler.backend import engine, pipelines, row_copies
from compiler.runtime import library as runtime

# Rows of 200 floats (three 64-float pieces and one of 8), of 1000 (a loop of 15 pieces and
# one of 40) and of 24 int64 in a rank-3 copy; the first destination is filled before.
COPIES = """
func.func @f(%a: memref<5x256xf32>, %b: memref<5x200xf32>, %c: memref<2x3x40xi64>, %d: memref<2x3x24xi64>,
             %e: memref<3x1024xf32>, %o: memref<3x1000xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 7.0 : f32
  linalg.fill ins(%cst : f32) outs(%b : memref<5x200xf32>)
  %s = memref.subview %a[0, 3] [5, 200] [1, 1] : memref<5x256xf32> to memref<5x200xf32, strided<[256, 1], offset: 3>>
  memref.copy %s, %b : memref<5x200xf32, strided<[256, 1], offset: 3>> to memref<5x200xf32>
  %t = memref.subview %c[0, 0, 16] [2, 3, 24] [1, 1, 1] : memref<2x3x40xi64> to memref<2x3x24xi64, strided<[120, 40, 1], offset: 16>>
  memref.copy %t, %d : memref<2x3x24xi64, strided<[120, 40, 1], offset: 16>> to memref<2x3x24xi64>
  %u = memref.subview %e[0, 24] [3, 1000] [1, 1] : memref<3x1024xf32> to memref<3x1000xf32, strided<[1024, 1], offset: 24>>
  memref.copy %u, %o : memref<3x1000xf32, strided<[1024, 1], offset: 24>> to memref<3x1000xf32>
  return
}
"""
LOWER = ("builtin.module(convert-vector-to-scf,convert-linalg-to-loops,expand-strided-metadata,lower-affine,"
         "convert-scf-to-cf,convert-vector-to-llvm,finalize-memref-to-llvm,convert-to-llvm,reconcile-unrealized-casts)")


def test_strided_row_copies_become_vector_moves_with_the_same_values():
    from mlir.runtime import get_ranked_memref_descriptor
    ir, passmanager, execution_engine = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(COPIES)
        assert row_copies.vectorize_row_copies(ir, module) == 4       # three copies and the fill
        text = str(module)
        assert "memref.copy" not in text and "linalg.fill" not in text
        assert text.count("vector.load") == 4 + 1 + 2 and "vector<8xf32>" in text and "vector<24xi64>" in text
        passmanager.PassManager.parse(LOWER).run(module.operation)
        jit = execution_engine.ExecutionEngine(module, opt_level=2)
        rng = np.random.default_rng(0)
        a, e = rng.random((5, 256), np.float32), rng.random((3, 1024), np.float32)
        c = np.arange(240, dtype=np.int64).reshape(2, 3, 40)
        b, d, o = np.zeros((5, 200), np.float32), np.zeros((2, 3, 24), np.int64), np.zeros((3, 1000), np.float32)
        jit.invoke("f", *[ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(x))) for x in (a, b, c, d, e, o)])
    np.testing.assert_array_equal(b, a[:, 3:203])
    np.testing.assert_array_equal(d, c[:, :, 16:40])
    np.testing.assert_array_equal(o, e[:, 24:])


@pytest.mark.parametrize("body", [
    # the copy reads the filled buffer itself: the fill stays
    """%s = memref.subview %b[0, 0] [5, 200] [1, 1] : memref<5x200xf32> to memref<5x200xf32, strided<[200, 1]>>
  memref.copy %s, %b : memref<5x200xf32, strided<[200, 1]>> to memref<5x200xf32>""",
    # something reads the filled buffer before the copy: the fill stays
    """%x = memref.load %b[%i, %i] : memref<5x200xf32>
  memref.copy %a, %b : memref<5x200xf32> to memref<5x200xf32>""",
    # the copy writes only part of the filled buffer: the fill stays
    """%v = memref.subview %b[0, 0] [5, 100] [1, 1] : memref<5x200xf32> to memref<5x100xf32, strided<[200, 1]>>
  %w = memref.subview %a[0, 0] [5, 100] [1, 1] : memref<5x200xf32> to memref<5x100xf32, strided<[200, 1]>>
  memref.copy %w, %v : memref<5x100xf32, strided<[200, 1]>> to memref<5x100xf32, strided<[200, 1]>>""",
])
def test_a_fill_that_is_read_or_not_overwritten_whole_stays(body):
    ir, _, _ = engine.engine_module()
    text = ("func.func @g(%a: memref<5x200xf32>, %b: memref<5x200xf32>) {\n  %i = arith.constant 0 : index\n"
            "  %cst = arith.constant 7.0 : f32\n  linalg.fill ins(%cst : f32) outs(%b : memref<5x200xf32>)\n"
            f"  {body}\n  return\n}}\n")
    with ir.Context():
        module = ir.Module.parse(text)
        copies = [op for op in module.body.operations[0].regions[0].blocks[0].operations if op.name == "memref.copy"]
        assert row_copies.drop_overwritten_fills(ir, copies) == 0
        assert "linalg.fill" in str(module)


def test_contiguous_and_dynamic_copies_are_left_to_lower_copies():
    ir, _, _ = engine.engine_module()
    text = """func.func @h(%a: memref<4x8xf32>, %b: memref<4x8xf32>, %c: memref<?x8xf32, strided<[16, 1]>>, %d: memref<?x8xf32>) {
  memref.copy %a, %b : memref<4x8xf32> to memref<4x8xf32>
  memref.copy %c, %d : memref<?x8xf32, strided<[16, 1]>> to memref<?x8xf32>
  return
}
"""
    with ir.Context():
        module = ir.Module.parse(text)
        assert row_copies.vectorize_row_copies(ir, module) == 0
        assert str(module).count("memref.copy") == 2


PACKED = """
fn wide(a: Tensor[F32, [40, 256]], b: Tensor[F32, [256, 2048]]) -> Tensor[F32, [40, 2048]] {
  a @ b
}
fn deep(a: Tensor[F32, [256, 2048]], b: Tensor[F32, [2048, 96]]) -> Tensor[F32, [256, 96]] {
  a @ b
}
"""


def test_packed_panels_and_strips_of_b_are_copied_by_vector_moves_and_match_O0(tmp_path):
    """The panels ([256, 128]) and strips ([2048, 32]) of B are copied with vector loads and
    stores and no fill; both products agree with -O0 and float64 NumPy."""
    src = tmp_path / "p.kina"
    src.write_text(PACKED)
    res = build.BuildResult(False, source=build.SourceText(PACKED, str(src)))
    mlir = build.front_end(PACKED, str(src), {}, res)
    ir, passmanager, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(mlir)
        passes = pipelines.passes_for(mlir, 2, tmp_path)
        engine.run_pipeline(ir, passmanager, module, passes[:passes.index(pipelines.COPY_SLOT)], mlir)
        text = str(module)
    assert "memref.copy" not in text and "linalg.map" not in text
    assert "vector<64xf32>" in text and "vector<32xf32>" in text       # a panel's rows, a strip's
    rng = np.random.default_rng(3)
    args = {"wide": (rng.standard_normal((40, 256), np.float32), rng.standard_normal((256, 2048), np.float32)),
            "deep": (rng.standard_normal((256, 2048), np.float32), rng.standard_normal((2048, 96), np.float32))}
    outs = {}
    for level in (0, 2):
        built = build.build_file(src, tmp_path / f"p{level}.so", level, cache=False)
        assert built.ok, built.diagnostics
        lib = runtime.load(built.so_path)
        outs[level] = {name: getattr(lib, name)(*xs) for name, xs in args.items()}
    for name, (a, b) in args.items():
        np.testing.assert_allclose(outs[2][name], outs[0][name], rtol=2e-5, atol=2e-4)   # -O2 fuses mul-adds
        np.testing.assert_allclose(outs[2][name], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
