"""The -O0 lowering in as few mlir-opt processes as its rewrite slots allow (toolchain.run_passes,
issue 27 item 2): the segments after "@distinct-results" run in one process unless the lowered
module shows that a slot between them was needed, and then the build goes segment by segment
with the slot's rewrite, as before.  Hand-written MLIR; no library is built, so the module
runs once (its result does not depend on KINA_OPT_LEVEL)."""
from pathlib import Path

import pytest

from compiler.backend import pipelines, toolchain

pytestmark = pytest.mark.once

ADD = """
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @kina_f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> attributes {llvm.emit_c_interface} {
  %e = tensor.empty() : tensor<2x3xf32>
  %r = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<2x3xf32>, tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}
"""

# A strided memref.copy (into the left half of a [4, 8] buffer): finalize-memref-to-llvm would
# call the runner library's memrefCopy, which "@lower-copies" rewrites into loops.
STRIDED_COPY = """
func.func @kina_g(%a: memref<4x8xf32>, %b: memref<4x4xf32>) attributes {llvm.emit_c_interface} {
  %s = memref.subview %a[0, 0] [4, 4] [1, 1] : memref<4x8xf32> to memref<4x4xf32, strided<[8, 1]>>
  memref.copy %b, %s : memref<4x4xf32> to memref<4x4xf32, strided<[8, 1]>>
  return
}
"""


def _lower(mlir: str, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """The -O0 lowering of `mlir` and how many mlir-opt processes it took."""
    runs = []
    real = toolchain.run_tool

    def counting(tool, args, timings, stage):
        runs.append(tool)
        return real(tool, args, timings, stage)
    monkeypatch.setattr(toolchain, "run_tool", counting)
    return toolchain.run_passes(mlir, pipelines.passes_for(mlir, 0, tmp), tmp, {}), runs.count("mlir-opt")


def test_segments_after_distinct_results_run_in_one_process(tmp_path, monkeypatch):
    lowered, processes = _lower(ADD, tmp_path, monkeypatch)
    assert "llvm.func @kina_f" in lowered
    assert processes == 2   # inline + bufferize, then everything after "@distinct-results"


def test_a_needed_copy_rewrite_goes_segment_by_segment(tmp_path, monkeypatch):
    lowered, processes = _lower(STRIDED_COPY, tmp_path, monkeypatch)
    assert "memrefCopy" not in lowered   # the slot's rewrite ran: the copy is loops
    assert "llvm.func @kina_g" in lowered
    assert processes > 2
