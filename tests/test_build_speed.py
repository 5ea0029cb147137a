"""The -O0 lowering in as few mlir-opt processes as its rewrite slots allow (mlir_opt.run_passes,
issue 27 item 2): one process prints the module at each slot that may be needed and is stopped
at the first slot its module needs; the next process starts there, after the slot's rewrite.
Hand-written MLIR; no library is built, so the module runs once (its result does not depend
on KINA_OPT_LEVEL)."""
from pathlib import Path

import pytest

from compiler.backend import mlir_opt, pipelines, toolchain

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
    for name in ("run_tool", "run_tool_until"):
        real = getattr(mlir_opt, name)

        def counting(tool, args, timings, stage, *stop, real=real):
            runs.append(tool)
            return real(tool, args, timings, stage, *stop)
        monkeypatch.setattr(mlir_opt, name, counting)
    return toolchain.run_passes(mlir, pipelines.passes_for(mlir, 0, tmp), tmp, {}), runs.count("mlir-opt")


def test_no_needed_slot_one_process(tmp_path, monkeypatch):
    lowered, processes = _lower(ADD, tmp_path, monkeypatch)
    assert "llvm.func @kina_f" in lowered
    assert processes == 1


def test_a_needed_copy_rewrite_stops_the_process_at_its_slot(tmp_path, monkeypatch):
    lowered, processes = _lower(STRIDED_COPY, tmp_path, monkeypatch)
    assert "memrefCopy" not in lowered   # the slot's rewrite ran: the copy is loops
    assert "llvm.func @kina_g" in lowered
    assert processes == 2


# A strided copy with no op that makes a view (the strided buffer is an argument): "@lower-copies"
# is not tested at its slot (no print of the module there), and the lowering shows it was needed.
ARGUMENT_COPY = """
func.func @kina_h(%a: memref<4x4xf32, strided<[8, 1]>>, %b: memref<4x4xf32>) attributes {llvm.emit_c_interface} {
  memref.copy %b, %a : memref<4x4xf32> to memref<4x4xf32, strided<[8, 1]>>
  return
}
"""


def test_a_module_without_views_is_lowered_without_the_copy_print(tmp_path, monkeypatch):
    """No op of the emitted text makes a strided view: one process, and no module printed at
    "@lower-copies" (its print was 0.02 s of the GPT block's gradient's 0.25 s)."""
    printed = []
    real = mlir_opt.run_tool_until

    def watching(tool, args, timings, stage, stop):
        printed.extend(a for a in args if a.startswith("--mlir-print-ir-after="))
        return real(tool, args, timings, stage, stop)
    monkeypatch.setattr(mlir_opt, "run_tool_until", watching)
    twice = ADD.replace("-> tensor<2x3xf32> attributes", "-> (tensor<2x3xf32>, tensor<2x3xf32>) attributes")
    twice = twice.replace("return %r : tensor<2x3xf32>", "return %r, %r : tensor<2x3xf32>, tensor<2x3xf32>")
    toolchain.run_passes(twice, pipelines.passes_for(twice, 0, tmp_path), tmp_path, {})
    assert printed and all("convert-bufferization-to-memref" not in a for a in printed), printed


def test_a_skipped_copy_slot_that_was_needed_is_run_again_with_it(tmp_path, monkeypatch):
    """The lowering without the "@lower-copies" test calls `memrefCopy` (a library that would
    not link): it is lowered again, stopped at the slot, and the copy becomes loops."""
    lowered, processes = _lower(ARGUMENT_COPY, tmp_path, monkeypatch)
    assert "memrefCopy" not in lowered and "llvm.func @kina_h" in lowered
    assert processes == 3    # the first lowering; then stopped at the slot; then the rest


def test_a_module_with_a_view_is_tested_at_the_copy_slot_at_once(tmp_path, monkeypatch):
    """STRIDED_COPY makes a subview: tested at the slot in the first process (no lowering
    thrown away)."""
    assert mlir_opt._skipped_slots(STRIDED_COPY, pipelines.passes_for(STRIDED_COPY, 0, tmp_path)) == frozenset()
    assert mlir_opt._skipped_slots(ADD, pipelines.passes_for(ADD, 0, tmp_path)) == {"@lower-copies"}


def test_a_value_returned_twice_is_copied_before_out_params(tmp_path, monkeypatch):
    """Without "@distinct-results", buffer-results-to-out-params crashes on this module: the
    process must stop at the slot, not run on."""
    twice = ADD.replace("-> tensor<2x3xf32> attributes", "-> (tensor<2x3xf32>, tensor<2x3xf32>) attributes")
    twice = twice.replace("return %r : tensor<2x3xf32>", "return %r, %r : tensor<2x3xf32>, tensor<2x3xf32>")
    lowered, processes = _lower(twice, tmp_path, monkeypatch)
    assert "llvm.func @kina_f" in lowered
    # stopped at "@distinct-results"; the contiguous copy its rewrite makes needs no "@lower-copies"
    assert processes == 2


def test_a_contiguous_copy_needs_no_rewrite_worker(tmp_path, monkeypatch):
    """"@lower-copies" rewrites copies between buffers that are not both contiguous: a copy of
    two static identity-layout buffers starts no worker process (0.3 s of CPU) and no second
    mlir-opt process."""
    workers = []
    monkeypatch.setattr(mlir_opt.backend_worker, "run", lambda *a, **k: workers.append(a))
    contiguous = STRIDED_COPY.replace("memref<4x4xf32, strided<[8, 1]>>", "memref<4x4xf32>").replace(
        "%s = memref.subview %a[0, 0] [4, 4] [1, 1] : memref<4x8xf32> to memref<4x4xf32>\n", "")
    contiguous = contiguous.replace("memref.copy %b, %s", "memref.copy %b, %c").replace(
        "%b: memref<4x4xf32>)", "%b: memref<4x4xf32>, %c: memref<4x4xf32>)")
    lowered, processes = _lower(contiguous, tmp_path, monkeypatch)
    assert "llvm.func @kina_g" in lowered and "memrefCopy" not in lowered
    assert (processes, workers) == (1, [])
    assert toolchain.slot_needed("@lower-copies", STRIDED_COPY)
    assert toolchain.slot_needed("@lower-copies", '"memref.copy"(%a, %b) : (memref<4xf32>, memref<4xf32>) -> ()')
