"""Validate: a cf.assert trap in the library is reported, not fatal; comparisons; the Kina end-to-end path."""
import pickle
from pathlib import Path

import numpy as np
import pytest

from compiler import ir, validate
from compiler.types import f32, i64

# `check(idx)` asserts every index is < 4 (the message emitted for ScatterAdd); `ok(a)` copies.
MLIR = """
#id = affine_map<(d0) -> (d0)>
#all = affine_map<(d0) -> ()>
func.func @kina_check(%idx: tensor<2xi64>) -> tensor<2xi64> attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %four = arith.constant 4 : i64
  scf.for %i = %c0 to %c2 step %c1 {
    %v = tensor.extract %idx[%i] : tensor<2xi64>
    %in = arith.cmpi ult, %v, %four : i64
    cf.assert %in, "scatter_add index out of bounds"
  }
  return %idx : tensor<2xi64>
}
func.func @kina_ok(%a: tensor<2xf32>) -> tensor<2xf32> attributes {llvm.emit_c_interface} {
  return %a : tensor<2xf32>
}
"""
PROGRAM = ir.Program({
    "check": ir.Function("check", [ir.Param("idx", i64(2))], i64(2), [], None),
    "ok": ir.Function("ok", [ir.Param("a", f32(2))], f32(2), [], None),
})


@pytest.fixture(scope="module")
def lib(hand_written_lib):
    return hand_written_lib("lib", MLIR, PROGRAM)


def _run(lib: Path, inputs: dict, order: list[str]) -> dict:
    work = lib.parent
    for name, args in inputs.items():
        with open(work / f"{name}.in.pkl", "wb") as f:
            pickle.dump(args, f)
    results = {}
    assert validate.run_in_child(lib, work, order, timeout=60, cancel=None,
                                 on_done=lambda n, err: results.__setitem__(n, err))
    return results


def test_assertion_in_child_is_reported_and_parent_carries_on(lib):
    inputs = {"check": [np.array([1, 9], np.int64)], "ok": [np.ones(2, np.float32)]}
    results = _run(lib, inputs, ["check", "ok"])
    assert "scatter_add index out of bounds" in results["check"]
    assert results["ok"] is None          # the child was restarted for the remaining function
    out = pickle.loads((lib.parent / "ok.out.pkl").read_bytes())
    np.testing.assert_array_equal(out[0], np.ones(2, np.float32))


def test_in_range_indices_pass(lib):
    results = _run(lib, {"check": [np.array([0, 3], np.int64)]}, ["check"])
    assert results == {"check": None}


def test_cancel_stops_the_child(lib):
    with open(lib.parent / "ok.in.pkl", "wb") as f:
        pickle.dump([np.ones(2, np.float32)], f)
    assert not validate.run_in_child(lib, lib.parent, ["ok"], timeout=60, cancel=lambda: True,
                                     on_done=lambda n, e: None)


def test_compare_reports_errors_and_tolerances():
    c = validate.compare("result 0", np.float32([1.0, 2.0]), np.float32([1.0, 2.5]), "F32", "interp")
    assert not c.ok and c.max_abs == pytest.approx(0.5) and c.max_rel == pytest.approx(0.2)
    assert validate.compare("r", np.float32([1.0]), np.float32([1.0 + 1e-6]), "F32", "interp").ok
    assert validate.compare("r", np.float32([np.nan]), np.float32([np.nan]), "F32", "interp").ok
    assert not validate.compare("r", np.float32([np.nan]), np.float32([1.0]), "F32", "interp").ok


STEP = """
fn loss(w: Tensor[F32, [2, 2]], x: Tensor[F32, [2, 2]]) -> Tensor[F32, [2, 1]] {
  let y = x @ w in
  let e = y.exp() in
  let s = e.reduce_keep(op=sum, axis=1) in
  s
}

fn step(w: Tensor[F32, [2, 2]], x: Tensor[F32, [2, 2]]) -> Tensor[F32, [2, 2]] {
  let (l, gw, gx) = handle loss(w, x) with reverseMode in
  w - gw
}
"""


def test_validate_file_end_to_end(tmp_path):
    path = tmp_path / "step.kina"
    path.write_text(STEP)
    seen = []
    report = validate.validate_file(path, progress=lambda name, done, total: seen.append((name, done, total)))
    assert report.build.ok, [report.build.source.render(d) for d in report.build.diagnostics]
    names = {f.name for f in report.functions}
    assert names == {"loss", "step", "loss (reverseMode)"}
    grad = next(f for f in report.functions if f.name == "loss (reverseMode)")
    assert [c.name for c in grad.checks if c.reference == "finite differences"] == ["d/d w", "d/d x"]
    assert report.ok, validate.format_report(report)
    assert seen[-1][1:] == (3, 3)


def test_validate_reports_the_library_trap_when_the_reference_rejects_the_inputs(tmp_path):
    src = tmp_path / "trap.kina"
    src.write_text("""
fn embed(emb: Tensor[F32, [8, 4]], ids: Tensor[I64, [1, 4]]) -> Tensor[F32, [1, 4, 4]] {
  gather(emb, ids)
}
fn main() -> Tensor[F32, [1, 4, 4]] {
  let emb = Tensor[F32, [8, 4]] { 1.0 } in
  let ids = Tensor[I64, [1, 4]] { 1, 99, 2, 3 } in
  embed(emb, ids)
}
""")
    report = validate.validate_file(src)
    assert report.failing == ["main"]
    (main,) = [f for f in report.functions if f.name == "main"]
    assert "library crashed" in main.error and "gather index out of bounds" in main.error
    (embed,) = [f for f in report.functions if f.name == "embed"]
    assert embed.ok
