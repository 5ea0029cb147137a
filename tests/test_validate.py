"""Validate: a cf.assert trap in the library is reported, not fatal; comparisons; the Kina end-to-end path."""
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler.core.types import f32, i64
from compiler.ir import nodes as ir
from compiler.oracle import directional, tolerance, validate

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
        validate.write_inputs(work, name, args)
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
    validate.write_inputs(lib.parent, "ok", [np.ones(2, np.float32)])
    assert not validate.run_in_child(lib, lib.parent, ["ok"], timeout=60, cancel=lambda: True,
                                     on_done=lambda n, e: None)


def test_compare_reports_errors_and_tolerances():
    c = tolerance.compare("result 0", np.float32([1.0, 2.0]), np.float32([1.0, 2.5]), "F32", "interp")
    assert not c.ok and c.max_abs == pytest.approx(0.5) and c.max_rel == pytest.approx(0.2)
    assert tolerance.compare("r", np.float32([1.0]), np.float32([1.0 + 1e-6]), "F32", "interp").ok
    assert tolerance.compare("r", np.float32([np.nan]), np.float32([np.nan]), "F32", "interp").ok
    assert not tolerance.compare("r", np.float32([np.nan]), np.float32([1.0]), "F32", "interp").ok


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
    # the default gradient check: both parameters along random directions at once
    assert [c.name for c in grad.checks if c.reference == directional.REFERENCE] == ["d/d w, x"]
    assert report.ok, validate.format_report(report)
    assert seen[0] == ("building", 0, 0) and seen[-1][1:] == (3, 3)


GENERIC_STEP = """\
fn scale[N](x: Tensor[F32, [N]], w: Tensor[F32, [N]]) -> Tensor[F32, [N]] {
  let y = x * w in
  let z = y.tanh() in
  z
}

fn both(x: Tensor[F32, [3]], w: Tensor[F32, [3]], u: Tensor[F32, [5]], v: Tensor[F32, [5]])
    -> (Tensor[F32, [3]], Tensor[F32, [3]], Tensor[F32, [3]], Tensor[F32, [5]], Tensor[F32, [5]], Tensor[F32, [5]]) {
  let (a, ga, gw) = handle scale(x, w) with reverseMode in
  let (b, gu, gv) = handle scale(u, v) with reverseMode in
  (a, ga, gw, b, gu, gv)
}
"""


def test_validate_checks_the_gradient_of_each_instantiation_of_a_generic_function(tmp_path):
    """`handle scale(..)` at two sizes differentiates the private instances scale$3 and
    scale$5: each gets an exported wrapper and its finite-difference check.  The generic
    `scale` itself is exported dynamic (no --size): checked at N = 1 and two random N."""
    path = tmp_path / "generic.kina"
    path.write_text(GENERIC_STEP)
    report = validate.validate_file(path)
    assert report.build.ok, [report.build.source.render(d) for d in report.build.diagnostics]
    names = [f.name for f in report.functions]
    assert names[:3] == ["both", "scale$3 (reverseMode)", "scale$5 (reverseMode)"]
    assert names[3] == "scale[N=1]" and len(names) == 6 and all(n.startswith("scale[N=") for n in names[3:])
    for f in report.functions[1:3]:
        assert [c.name for c in f.checks if c.reference == directional.REFERENCE] == ["d/d x, w"]
    assert report.ok, validate.format_report(report)


def test_finite_differences_run_only_what_the_target_reaches():
    """Each interpreter run of a finite difference lowers the handles of the program it is
    given, so it is given only the target and its callees."""
    from compiler.analysis import analyze
    from compiler.ir import nodes as ir_nodes
    program = validate.add_gradient_wrappers(analyze(GENERIC_STEP).program)
    assert set(ir_nodes.reachable(program, ["both"]).functions) == {"both", "scale$3", "scale$5"}
    assert set(ir_nodes.reachable(program, ["scale$5"]).functions) == {"scale$5"}
    assert set(ir_nodes.reachable(program, ["__validate_grad_scale__3"]).functions) == {
        "__validate_grad_scale__3", "scale$3"}


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
    # the library's bounds check returns an error (it used to abort the child: "library crashed")
    assert "library call raised KinaIndexError" in main.error and "gather index out of bounds" in main.error
    (embed,) = [f for f in report.functions if f.name == "embed"]
    assert embed.ok


# ---- the comparison rule (issues 11, 26): |got - ref| <= atol + rtol * max(|ref|, magnitude) ------
ATTENTION = """
fn attention(q: Tensor[F32, [16, 32]], k: Tensor[F32, [16, 32]], v: Tensor[F32, [16, 32]],
             wo: Tensor[F32, [32, 32]]) -> Tensor[F32, [16, 32]] {
  let kt = k.transpose([1, 0]) in
  let s = q @ kt in
  let p = s.softmax(axis=1) in
  let o = p @ v in
  let y = o @ wo in
  let z = y @ wo in
  z
}
fn attention_grads(q: Tensor[F32, [16, 32]], k: Tensor[F32, [16, 32]], v: Tensor[F32, [16, 32]],
                   wo: Tensor[F32, [32, 32]])
    -> (Tensor[F32, [16, 32]], Tensor[F32, [16, 32]], Tensor[F32, [16, 32]], Tensor[F32, [16, 32]], Tensor[F32, [32, 32]]) {
  let r = handle attention(q, k, v, wo) with reverseMode in
  r
}
fn bmm(a: Tensor[F32, [4, 16, 32]], b: Tensor[F32, [4, 32, 32]], c: Tensor[F32, [4, 32, 32]]) -> Tensor[F32, [4, 16, 32]] {
  let x = a @ b in
  let y = x @ c in
  let z = y @ c in
  z
}
"""


def _elementwise_rule_fails(report, work_outputs) -> bool:
    """Whether a plain element-by-element rule (atol 1e-5, rtol 1e-4 of each element, no
    magnitude) rejects one of these outputs (it does: f32 rounding of sums of +-1e3 terms;
    the magnitude each element was computed from is what lets validate pass them)."""
    return any(not np.all(np.abs(g - w) <= 1e-5 + 1e-4 * np.abs(w)) for g, w in work_outputs)


@pytest.mark.both_levels
@pytest.mark.parametrize("level", [0, 2])
def test_validate_passes_16x32_attention_and_batched_matmul(tmp_path, level, monkeypatch):
    path = tmp_path / "attention.kina"
    path.write_text(ATTENTION)
    seen = []
    load = validate.load_outputs

    def spy(work, name):
        got = load(work, name)
        seen.append((name, got))
        return got
    monkeypatch.setattr(validate, "load_outputs", spy)
    report = validate.validate_file(path, opt_level=level)
    assert report.ok, validate.format_report(report)
    assert {f.name for f in report.functions} == {"attention", "attention_grads", "bmm", "attention (reverseMode)"}
    # The outputs are large (the point of the test) and the old rule would have failed them.
    from compiler.oracle import interp
    program = report.build.program
    pairs = []
    for name, got in seen:
        if name == "bmm":
            args = interp.random_inputs(program.functions[name], 0, program)
            want = interp.run_function(program, name, args, dtype=np.float64)
            pairs.append((np.float64(got[0]), want))
    assert pairs and np.abs(pairs[0][1]).max() > 300
    assert _elementwise_rule_fails(report, pairs)


@pytest.mark.parametrize("rel,ok", [(1e-3, False), (1e-5, True)])
def test_a_relative_error_of_1e_3_in_one_output_fails_validate(tmp_path, monkeypatch, rel, ok):
    """Errors are injected where the library's results come back from the child process."""
    path = tmp_path / "attention.kina"
    path.write_text(ATTENTION)
    load = validate.load_outputs

    def perturbed(work, name):
        got = load(work, name)
        if name == "bmm":
            got[0] = (got[0].astype(np.float64) * (1 + rel)).astype(got[0].dtype)
        return got
    monkeypatch.setattr(validate, "load_outputs", perturbed)
    report = validate.validate_file(path)
    assert report.failing == ([] if ok else ["bmm"]), validate.format_report(report)
    bad = [c for f in report.functions for c in f.checks if not c.ok]
    if not ok:
        assert bad and bad[0].max_rel == pytest.approx(rel, rel=0.2)
        assert "result 0" in validate.format_report(report)


def test_compare_bounds_each_element_by_its_own_value_and_compares_infinities_exactly():
    """The mixed rule |got - ref| <= atol + rtol * max(|ref|, magnitude), element by element
    (issue 26): a -1e30 sentinel no longer lifts every other element's bound."""
    ref = np.array([1.0, -1e30, 0.5])
    c = tolerance.compare("r", np.array([1.0 + 1e-2, -1e30, 0.5]), ref, "F32", "interp")
    assert not c.ok and c.index == (0,) and c.want == 1.0
    assert c.max_abs == pytest.approx(1e-2) and c.bound == pytest.approx(1e-5 + 1e-4)
    assert "worst [0]: |got - ref| 1.000e-02 vs bound 1.1e-04 (ref 1)" in tolerance.describe_worst(c)
    assert tolerance.compare("r", np.array([1.0 + 5e-5, -1e30 * (1 + 5e-5), 0.5]), ref, "F32", "interp").ok
    # a magnitude (what the element was computed from) widens that element's bound only
    assert tolerance.compare("r", np.array([1.0 + 1e-2, -1e30, 0.5]), ref, "F32", "interp",
                            magnitude=np.array([200.0, 0.0, 0.0])).ok
    inf = np.inf
    assert tolerance.compare("r", np.array([-inf, inf, np.nan]), np.array([-inf, inf, np.nan]), "F32", "i").ok
    for got in ([inf, inf, np.nan], [-inf, 3e38, np.nan], [-inf, inf, 0.0]):
        assert not tolerance.compare("r", np.array(got), np.array([-inf, inf, np.nan]), "F32", "i").ok


SENTINEL = """
fn masked(x: Tensor[F32, [4, 8]], m: Tensor[Bool, [4, 8]]) -> Tensor[F32, [4, 8]] {
  let y = x * 2.0 in
  where(m, y, -1e30)
}
"""


def test_an_error_next_to_a_sentinel_fails_validate(tmp_path, monkeypatch):
    """A 1e-2 error planted in one unmasked element of an output holding -1e30 sentinels:
    the old bound (1e-4 of the output's largest value, 1e26) passed it; now it fails."""
    path = tmp_path / "sentinel.kina"
    path.write_text(SENTINEL)
    load = validate.load_outputs
    planted = {}

    def perturbed(work, name):
        got = load(work, name)
        keep = np.argwhere(got[0] > -1e29)[0]
        planted["at"] = tuple(int(i) for i in keep)
        got[0][tuple(keep)] += np.float32(1e-2)
        return got
    report = validate.validate_file(path)
    assert report.ok, validate.format_report(report)
    monkeypatch.setattr(validate, "load_outputs", perturbed)
    report = validate.validate_file(path)
    assert report.failing == ["masked"], validate.format_report(report)
    (c,) = [c for f in report.functions for c in f.checks if not c.ok]
    assert c.index == planted["at"] and c.max_abs == pytest.approx(1e-2, rel=1e-3)
    assert f"BAD  result 0       vs interp (f64)       worst [{planted['at'][0]}, {planted['at'][1]}]" \
        in validate.format_report(report)


def test_check_output_falls_back_to_the_same_dtype_reference_only_when_ill_conditioned():
    ref64 = np.array([1.0, 2.0, 3.0])
    # BF16 rounding of the reference itself is within the bound: held to float64.
    assert not tolerance.check_output("r", np.array([1.0, 2.0, 3.3]), ref64, "BF16", ref64).ok
    # A program whose own dtype cannot meet the bound: compared with the same-dtype run.
    same = np.array([1.0, 2.0, 4.0])
    c = tolerance.check_output("r", np.array([1.0, 2.0, 4.0]), ref64, "BF16", same)
    assert c.ok and c.reference == "interp (BF16)"
    assert not tolerance.check_output("r", np.array([1.0, 2.0, 5.0]), ref64, "BF16", same).ok


def test_a_discrete_output_may_equal_the_declared_dtype_reference_but_nothing_else():
    ref64, same = np.array([2, 0, 1]), np.array([2, 3, 1])     # an index moved by F8 rounding
    c = tolerance.check_output("r", np.array([2, 3, 1]), ref64, "I64", same)
    assert c.ok and c.reference == "interp (declared dtypes)"
    assert tolerance.check_output("r", np.array([2, 0, 1]), ref64, "I64", same).ok
    bad = tolerance.check_output("r", np.array([2, 1, 1]), ref64, "I64", same)
    assert not bad.ok and bad.reference == "interp (f64)"


# `make fuzz` seed 53169, shrunk: the categorical of logits made by an F8 product.  The
# library rounds the product to F8 as the declared-dtype interpreter does; the float64
# interpreter does not, and one sample of 528 took another index (fixed in check_output).
F8_CATEGORICAL = """
fn f(p1: Tensor[F8E4M3, [33, 2, 7, 4]], p4: Tensor[F8E4M3, [33, 2, 4, 2]], i8: Tensor[I64, [2]],
     v3: Tensor[F8E4M3, [33, 2, 7, 2]]) -> Tensor[I64, [33, 2, 1, 4]] {
  let v5 = p1 @ p4 in
  let v6 = concat(v3, v5, axis=3) in
  let v9 = categorical(i8, v6, axis=2) in
  v9
}
"""


def test_a_categorical_of_f8_logits_validates(tmp_path):
    path = tmp_path / "c53169.kina"
    path.write_text(F8_CATEGORICAL)
    report = validate.validate_file(path)      # seed 0: `kinac validate` failed on it
    assert report.ok, validate.format_report(report)


def test_validate_reports_a_back_end_abort_and_returns(tmp_path, monkeypatch):
    """An LLVM abort in the -O2 build (simulated in its worker process) is a build diagnostic."""
    monkeypatch.setenv("KINA_BACKEND_FAULT", "llvm")
    path = tmp_path / "f.kina"
    path.write_text(STEP)
    report = validate.validate_file(path, opt_level=2)
    assert not report.ok and not report.build.ok
    assert any("killed by signal 6" in d.message for d in report.build.diagnostics)
    proc = subprocess.run([sys.executable, "-m", "compiler.cli", "validate", "-O2", str(path)],
                          capture_output=True, text=True, env={**os.environ, "KINA_BACKEND_FAULT": "llvm"})
    assert proc.returncode == 1 and "killed by signal 6" in proc.stderr and "build failed" in proc.stderr


VJP_PAIR = """
fn dense(x: Tensor[F32, [3, 4]], w: Tensor[F32, [4, 2]]) -> Tensor[F32, [3, 2]] {
  let h = x @ w in
  let y = h.tanh() in
  y
}

fn mlp[N, D](x: Tensor[F32, [N, D]], w: Tensor[F32, [D, D]]) -> Tensor[F32, [N, D]] {
  let h = x @ w in
  let y = h.tanh() in
  y
}
"""


def test_validate_checks_vjp_exports_static_and_dynamic(tmp_path):
    """`kinac validate --vjp f`: every f_vjp runs and gets its directional check, the dynamic
    one (a generic f, no --size) at each of its size runs as well as the static one."""
    path = tmp_path / "pair.kina"
    path.write_text(VJP_PAIR)
    report = validate.validate_file(path, vjp=["dense", "mlp"])
    assert report.ok, validate.format_report(report)
    vjps = [f for f in report.functions if "_vjp" in f.name]
    assert [f.name for f in vjps][:1] == ["dense_vjp"] and len(vjps) == 4, [f.name for f in report.functions]
    assert all(f.name.startswith("mlp_vjp[") for f in vjps[1:])
    for f in vjps:
        assert any(c.name.endswith("(vjp)") for c in f.checks), (f.name, [c.name for c in f.checks])
