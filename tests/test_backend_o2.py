"""The -O2 back end's build-time machinery: kernel outlining (transform_library.OUTLINE_LIBRARY),
identical-kernel merging and the opt/llc stage (compiler/backend/llvm_stage.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from emit_support import libraries_at_levels, o2_module_before

from compiler import build
from compiler.backend import engine, llvm_stage, pipelines, rewrites, transform_library
from compiler.runtime import library as runtime

TWICE = """
fn f(x: Tensor[F32, [64, 128]], y: Tensor[F32, [64, 128]], w: Tensor[F32, [64, 128]]) -> Tensor[F32, [64, 128]] {
  let a = x + y in
  let b = a.tanh() in
  let c = b + w in
  let d = c.tanh() in
  let e = d * x in
  e
}
"""


def _front_end(tmp_path, text: str, name: str = "k.kina") -> tuple[Path, str]:
    """The source written into tmp_path, and the MLIR the front end emits for it."""
    src = tmp_path / name
    src.write_text(text)
    res = build.BuildResult(False, source=build.SourceText(text, str(src)))
    return src, build.front_end(text, str(src), {}, res)


def _lowered(tmp_path, ir, passmanager, text: str, without: str | None = None):
    """The module after the -O2 pass pipeline (less the slot `without`), before LLVM
    (inside an ir.Context)."""
    _, mlir = _front_end(tmp_path, text)
    module = ir.Module.parse(mlir)
    passes = [p for p in pipelines.passes_for(mlir, 2, tmp_path) if p != without]
    engine.run_pipeline(ir, passmanager, module, passes, mlir)
    return module


def _kernels(ir, module) -> list[str]:
    return [ir.StringAttr(op.attributes["sym_name"]).value for op in module.body.operations
            if op.operation.name == "llvm.func" and
            ir.StringAttr(op.attributes["sym_name"]).value.startswith(llvm_stage.KERNEL_PREFIX)]


def test_each_loop_nest_is_a_private_noinline_kernel_and_twins_merge(tmp_path):
    ir, passmanager, _ = engine.engine_module()
    with ir.Context():
        module = _lowered(tmp_path, ir, passmanager, TWICE, without=pipelines.MERGE_SLOT)
        kernels = _kernels(ir, module)
        assert len(kernels) == 5                       # one per elementwise op
        text = str(module)
        assert 'passthrough = ["noinline"]' in text and "llvm.func internal @kina.kernel" in text
        merged = llvm_stage.dedupe_kernels(ir, module)      # x + y and b + w are twins (at least)
        assert merged >= 1 and len(_kernels(ir, module)) == 5 - merged
        assert llvm_stage.dedupe_kernels(ir, module) == 0   # nothing left to merge
        assert module.operation.verify()
        calls = [c for c in str(module).split("llvm.call @")[1:] if c.startswith("kina.kernel")]
        assert {c.split("(")[0] for c in calls} <= set(_kernels(ir, module))
    with ir.Context():   # a context of its own: the transform library is preloaded once per context
        # The pipeline merges the same twins right after outlining (func.func kernels), so
        # the lowering passes see each distinct kernel once.
        early = _lowered(tmp_path, ir, passmanager, TWICE)
        assert len(_kernels(ir, early)) == 5 - merged
        assert llvm_stage.dedupe_kernels(ir, early) == 0


def test_merged_kernels_compute_each_call_on_its_own_operands(tmp_path):
    src = tmp_path / "t.kina"
    src.write_text(TWICE)
    res = build.build_file(src, tmp_path / "t.so", 2)
    assert res.ok, res.diagnostics
    rng = np.random.default_rng(0)
    x, y, w = (rng.standard_normal((64, 128)).astype(np.float32) for _ in range(3))
    want = np.tanh(np.tanh(x + y) + w) * x
    np.testing.assert_allclose(runtime.load(res.so_path).f(x, y, w), want, rtol=1e-6, atol=1e-6)


def test_llvm_targets_the_host_triple():
    flags = llvm_stage.host_target()
    assert flags[-1] == "-mcpu=native" and flags[0].startswith("-mtriple=")


SPLAT = """
fn big(x: Tensor[F32, [300, 300]]) -> Tensor[F32, [300, 300]] {
  let c = Tensor[F32, [300, 300]]{1.5} in
  let z = Tensor[F32, [300, 300]]{} in
  let y = x + c + z in
  y
}
"""


def test_large_splat_literals_are_fills_not_element_lists(tmp_path):
    """A [10000, 10000] splat used to be written element by element into the object file."""
    src, mlir = _front_end(tmp_path, SPLAT, "s.kina")
    assert "tensor<300x300xf32>" in mlir and "dense<1.5> : tensor<300x300xf32>" not in mlir
    # and the add reads each as a scalar (no fill either: FnEmitter.splats)
    assert "arith.constant 1.5" in mlir and "linalg.fill" not in mlir
    small = "fn f(x: Tensor[F32, [2, 2]]) -> Tensor[F32, [2, 2]] {\n  x * Tensor[F32, [2, 2]]{2.0}\n}\n"
    assert "dense<2.0> : tensor<2x2xf32>" in build.front_end(small, "f.kina", {}, build.BuildResult(
        False, source=build.SourceText(small, "f.kina")))                # small splats stay constants
    for level in (0, 2):
        out = build.build_file(src, tmp_path / f"s{level}.so", level)
        assert out.ok, out.diagnostics
        x = np.arange(90000, dtype=np.float32).reshape(300, 300)
        np.testing.assert_array_equal(runtime.load(out.so_path).big(x), x + np.float32(1.5))


def test_shared_empty_tensors_are_split_into_groups():
    """CSE leaves one tensor.empty for every same-typed output; bufferization's analysis of
    its uses is quadratic, so uses beyond EMPTY_GROUP get clones (a 4,000-let function built
    in 81 s, 70 of them in one-shot-bufferize)."""
    n = 2 * rewrites.EMPTY_GROUP + 5
    body = "\n".join(f"  %r{i} = linalg.copy ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>"
                     for i in range(n))
    text = (f"func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {{\n  %e = tensor.empty() : tensor<4xf32>\n"
            f"{body}\n  return %r0 : tensor<4xf32>\n}}\n")
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(text)
        assert rewrites.unshare_empty_tensors(ir, module) == 2
        assert module.operation.verify()
        uses = [len(list(op.results[0].uses)) for op in module.body.operations[0].regions[0].blocks[0].operations
                if op.operation.name == "tensor.empty"]
        assert sorted(uses) == [5, rewrites.EMPTY_GROUP, rewrites.EMPTY_GROUP]
        assert rewrites.unshare_empty_tensors(ir, module) == 0


def test_run_passes_at_O2_runs_the_rewrites_between_mlir_opt_processes(tmp_path):
    """The "tools" path of an -O2 pass list (mlir-opt processes, toolchain.run_passes):
    @tag-outline ran between the processes, "@outline" found its script again, and
    @merge-kernels merged the twin kernels (x + y, b + w) there too."""
    import re

    from compiler.backend import pipelines, toolchain
    mlir = build.front_end(TWICE, "t.kina", {}, build.BuildResult(False, source=build.SourceText(TWICE, "t.kina")))
    assert mlir is not None
    out = toolchain.run_passes(mlir, pipelines.passes_for(mlir, 2, tmp_path), tmp_path, {})
    assert len(set(re.findall(r"llvm\.func internal @kina\.kernel\w*", out))) == 4


# exp (-O2's polynomial), a threaded matmul (an OpenMP loop) and a fused elementwise chain
EMITTED = """
fn f(x: Tensor[F32, [256, 256]], w: Tensor[F32, [256, 256]]) -> Tensor[F32, [256, 256]] {
  let m = x @ w in
  let e = m.exp() in
  e * x + w
}
"""


def test_emit_llvm_at_O2_is_the_IR_the_build_compiles(tmp_path):
    """`kinac emit --llvm -O2` runs the build's worker: the same rewrites before the passes
    (exp lowering, fusion, tagging: vectorised and threaded kernels), kernel merging and
    packed entry points; it once ran the pass list alone through mlir-opt and showed scalar
    exp calls and serial loops that no -O2 library contains."""
    from compiler.backend import toolchain
    mlir = build.front_end(EMITTED, "e.kina", {}, build.BuildResult(False, source=build.SourceText(EMITTED, "e.kina")))
    assert mlir is not None
    text, diags = toolchain.mlir_to_llvm_ir(mlir, opt_level=2)
    assert not diags and text is not None
    assert "@llvm.exp.f32" not in text and "@llvm.roundeven" in text      # math_lowering.lower_math
    from compiler.backend import threads
    if threads.openmp_library() is not None:
        assert "__kmpc_fork_call" in text                                 # the matmul's OpenMP loop
    assert "define internal void @kina.kernel" in text                    # outlined kernels
    assert "define i32 @_kina_packed_kina_f" in text
    text0, diags0 = toolchain.mlir_to_llvm_ir(mlir, opt_level=0)
    assert not diags0 and text0 is not None                               # -O0: the same exp
    assert "@llvm.exp.f32" not in text0 and "@llvm.roundeven" in text0    # (math_lowering.lower_math_text)


EMBED_GRAD = """
fn rows(e: Tensor[F32, [1024, 128]], i: Tensor[I64, [64]]) -> Tensor[F32, [64, 128]] {
  let y = gather(e, i) in
  y
}

fn step(e: Tensor[F32, [1024, 128]], i: Tensor[I64, [64]], lr: Tensor[F32, []]) -> Tensor[F32, [1024, 128]] {
  let (y, g_e) = handle rows(e, i) with reverseMode in
  e - lr.broadcast([1024, 128]) * g_e
}
"""

FILLS = """
func.func @f(%a: tensor<256x256xf32>, %b: tensor<256x512xf32>) -> (tensor<512x256xf32>, tensor<256x512xf32>, tensor<64x64xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512x256xf32>
  %big = linalg.fill ins(%z : f32) outs(%e : tensor<512x256xf32>) -> tensor<512x256xf32>
  %e2 = tensor.empty() : tensor<256x512xf32>
  %init = linalg.fill ins(%z : f32) outs(%e2 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %m = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x512xf32>) outs(%init : tensor<256x512xf32>) -> tensor<256x512xf32>
  %e3 = tensor.empty() : tensor<64x64xf32>
  %small = linalg.fill ins(%z : f32) outs(%e3 : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %big, %m, %small : tensor<512x256xf32>, tensor<256x512xf32>, tensor<64x64xf32>
}
"""


def test_large_fills_run_on_threads_unless_their_forall_zeroes_them():
    """A fill of PARALLEL_MIN_ELEMENTS or more is row-parallel, so each core zeroes the rows it
    reads next; a parallel matmul's init stays for "@fuse-fills" (one per block), a small one serial."""
    from compiler.backend import parallelize
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(FILLS)
        parallelize.tag_for_script(ir, module)
        fills = rewrites.walk_ops(ir, module, lambda op: op.name == "linalg.fill")
        tagged = [str(f.results[0].type) for f in fills if "kina.parallel_rows" in f.attributes]
    assert tagged == ["tensor<512x256xf32>"]


def test_parallel_loops_are_statically_scheduled_and_an_embedding_update_is_threaded(tmp_path):
    """Every OpenMP loop keeps the static schedule (thread t always takes the t-th share, so
    the rows it wrote are in its cache when the next loop reads them: threads.py).  The
    embedding's update `e - lr * g_e` scatters -lr * rows into a copy of e
    (compiler/backend/accumulate.py): no zero fill of the gradient is left, the copy is a
    forall of rows (one of those loops), and each hit row gets its -lr terms added in order, as np.add.at does."""
    from compiler.backend import threads
    if threads.openmp_library() is None:
        pytest.skip("no OpenMP runtime")
    from compiler.backend import parallelize
    src = tmp_path / "emb.kina"
    src.write_text(EMBED_GRAD)
    with o2_module_before(EMBED_GRAD, pipelines.TAG_SLOT, tmp_path) as (ir, module):
        parallelize.tag_for_script(ir, module)
        fills = rewrites.walk_ops(ir, module, lambda op: op.name == "linalg.fill"
                                  and str(op.results[0].type) == "tensor<1024x128xf32>")
        copies = rewrites.walk_ops(ir, module, lambda op: op.name == "scf.forall")
        assert fills == []
        assert [(str(c.results[0].type), [o.name for o in c.regions[0].blocks[0].operations]) for c in copies] == [
            ("tensor<1024x128xf32>", ["tensor.extract_slice", "scf.forall.in_parallel"])]
    res = build.build_file(src, tmp_path / "emb.so", 2, cache=False)
    assert res.ok, res.diagnostics
    lib_bytes = res.so_path.read_bytes()
    assert b"__kmpc_for_static_init" in lib_bytes and b"__kmpc_dispatch_next" not in lib_bytes
    rng = np.random.default_rng(0)
    e = rng.standard_normal((1024, 128)).astype(np.float32)
    i = rng.integers(0, 1024, 64).astype(np.int64)
    i[:8] = 5                                   # a row gathered eight times: its gradient sums them
    lr = np.float32(0.5)
    e_before = e.copy()
    got = runtime.load(res.so_path).step(e, i, np.array(lr))
    np.testing.assert_array_equal(e, e_before)  # the argument is copied, never written
    want = e.copy()
    np.add.at(want, i, -lr)
    np.testing.assert_array_equal(got, want)
    g = np.zeros_like(e)
    np.add.at(g, i, np.float32(1.0))
    np.testing.assert_allclose(got, e - lr * g, rtol=1e-6, atol=1e-6)


SMALL = "fn f(x: Tensor[F32, [4, 8]]) -> Tensor[F32, [4, 8]] {\n  let a = x + x in\n  let b = a.tanh() in\n  b * x\n}\n"


def test_small_loop_nests_stay_inline_unless_a_function_has_many(tmp_path):
    """StoryLM-0-sized kernels: a call each cost 30% of its step, so they stay in their
    function; a function of more than OUTLINE_SMALL_LIMIT of them is outlined all the same
    (LLVM's time grew superlinearly with their count)."""
    ir, passmanager, _ = engine.engine_module()
    with ir.Context():
        assert _kernels(ir, _lowered(tmp_path, ir, passmanager, SMALL)) == []
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import letgen
    many = letgen.let_chain(3 * transform_library.OUTLINE_SMALL_LIMIT, rows=4, cols=8)
    with ir.Context():
        assert len(_kernels(ir, _lowered(tmp_path, ir, passmanager, many))) > 0


# The scaled StoryLM's `probs @ v` (B * H = 32 heads there): a parallel batch_matmul
# whose forall body is a kernel call next to its 64 x 32 fill loop, too small to outline.
PARALLEL_BMM = """
fn f(p: Tensor[F32, [16, 64, 64]], v: Tensor[F32, [16, 64, 32]]) -> Tensor[F32, [16, 64, 32]] {
  let out = p @ v in
  out
}
"""


def test_parallel_body_with_a_kernel_call_and_an_inline_loop_builds(tmp_path):
    """Regression: "'memref.alloca_scope' op expects region #0 to have 0 or 1 blocks" at
    -O2 (convert-scf-to-openmp's scope kept by the canonicalizer because of the call, then
    split by convert-scf-to-cf); rewrites.inline_alloca_scopes removes the scopes."""
    src = tmp_path / "bmm.kina"
    src.write_text(PARALLEL_BMM)
    res = build.build_file(src, tmp_path / "bmm.so", 2)
    assert res.ok, [d.message for d in res.diagnostics]
    rng = np.random.default_rng(0)
    p = rng.standard_normal((16, 64, 64)).astype(np.float32)
    v = rng.standard_normal((16, 64, 32)).astype(np.float32)
    np.testing.assert_allclose(runtime.load(res.so_path).f(p, v), p @ v, rtol=1e-4, atol=1e-4)


SCOPES = """
func.func @f(%n: index, %m: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %x = arith.constant 1.0 : f32
  memref.alloca_scope {
    scf.for %i = %c0 to %n step %c1 {
      memref.store %x, %m[%c0] : memref<8xf32>
    }
  }
  memref.alloca_scope {
    %a = memref.alloca() : memref<4xf32>
    scf.for %i = %c0 to %n step %c1 {
      memref.store %x, %a[%c0] : memref<4xf32>
    }
  }
  return
}
"""


def test_alloca_scopes_are_inlined_and_stack_buffers_still_freed():
    """A scope without stack buffers becomes its body; one with them keeps freeing them at
    its end through stacksave / stackrestore, and the module then lowers to LLVM."""
    ir, passmanager, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(SCOPES)
        assert rewrites.inline_alloca_scopes(ir, module) == 2
        assert module.operation.verify()
        text = str(module)
        assert "alloca_scope" not in text
        assert text.count("llvm.intr.stacksave") == 1 and text.count("llvm.intr.stackrestore") == 1
        assert text.index("stacksave") < text.index("memref.alloca()") < text.index("stackrestore")
        passmanager.PassManager.parse(pipelines.pipeline_text(pipelines._LOWER_TO_LLVM[:2] + [
            "--finalize-memref-to-llvm", "--convert-arith-to-llvm", "--convert-cf-to-llvm",
            "--convert-func-to-llvm", "--reconcile-unrealized-casts"])).run(module.operation)
        assert module.operation.verify() and "llvm.intr.stackrestore" in str(module)


LOG_SOFTMAX = "fn f(x: Tensor[F32, [64, 512]]) -> Tensor[F32, [64, 512]] {\n  let y = x.log_softmax(axis=1) in\n  y\n}\n"
LOG = "fn f(x: Tensor[F32, [64, 512]]) -> Tensor[F32, [64, 512]] {\n  x.log()\n}\n"


def test_log_calls_vector_math_and_matches_numpy(tmp_path, monkeypatch):
    """With libmvec as opt's vector library, an elementwise log is vector calls (1.7x faster
    at [256, 2048]); KINA_VECTOR_MATH=0 keeps scalar calls.  (exp is -O2's own polynomial,
    compiler/backend/math_lowering.py: no call either way.)"""
    import pytest
    if not llvm_stage.vector_math():
        pytest.skip("no libmvec on this machine")
    src = tmp_path / "log.kina"
    src.write_text(LOG)
    x = np.random.default_rng(0).uniform(1e-3, 50.0, (64, 512)).astype(np.float32)
    for setting, vector in (("1", True), ("0", False)):
        monkeypatch.setenv("KINA_VECTOR_MATH", setting)
        res = build.build_file(src, tmp_path / f"log{setting}.so", 2, cache=False)
        assert res.ok, res.diagnostics
        assert llvm_stage.uses_vector_math(res.so_path) == vector
        np.testing.assert_allclose(runtime.load(res.so_path).f(x), np.log(x.astype(np.float64)), rtol=1e-6)


def test_log_softmax_matches_numpy_at_O2(tmp_path):
    """exp (the polynomial), the vectorised row max and sum, and log together."""
    src = tmp_path / "ls.kina"
    src.write_text(LOG_SOFTMAX)
    x = np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32) * 4
    ref = x.astype(np.float64) - np.log(np.exp(x.astype(np.float64)).sum(axis=1, keepdims=True))
    res = build.build_file(src, tmp_path / "ls.so", 2, cache=False)
    assert res.ok, res.diagnostics
    np.testing.assert_allclose(runtime.load(res.so_path).f(x), ref, rtol=1e-5, atol=1e-5)


def test_a_large_module_is_optimised_and_compiled_in_parts_with_the_same_results(tmp_path, monkeypatch):
    """llvm_stage.llvm_object splits a module of at least SPLIT_MIN_BYTES of LLVM IR into
    LLVM_PARTS (opt and llc run on each at once) and joins the objects: here every module
    is split (KINA_LLVM_SPLIT_BYTES=0); the kernels, now calls between parts, still compute
    each call on its own operands, and none of them is exported by the library."""
    from compiler.backend import toolchain
    src, mlir = _front_end(tmp_path, TWICE, "t.kina")
    monkeypatch.setenv("KINA_LLVM_SPLIT_BYTES", "0")
    obj, timings = tmp_path / "out.o", {}
    engine.engine_object(mlir, pipelines.passes_for(mlir, 2, tmp_path), 2, obj, timings)
    assert all((tmp_path / f"part{k}.o").exists() for k in range(llvm_stage.LLVM_PARTS))
    assert {"llvm-opt", "codegen"} <= set(timings)
    lib = build.build_file(src, tmp_path / "t.so", 2, cache=False)   # the worker sees the setting too
    assert lib.ok, lib.diagnostics
    rng = np.random.default_rng(1)
    x, y, w = (rng.standard_normal((64, 128)).astype(np.float32) for _ in range(3))
    want = np.tanh(np.tanh(x + y) + w) * x
    np.testing.assert_allclose(runtime.load(lib.so_path).f(x, y, w), want, rtol=1e-6, atol=1e-6)
    import subprocess
    nm = toolchain.find_tool("llc").parent / "llvm-nm"
    exported = subprocess.run([str(nm), "-D", "--defined-only", str(lib.so_path)],
                              capture_output=True, text=True, check=True).stdout
    assert "_kina_packed_kina_f" in exported and llvm_stage.KERNEL_PREFIX not in exported


def test_the_worker_started_before_the_front_end_runs_the_build_or_is_ended(tmp_path, monkeypatch):
    """build_source starts the -O2 worker before the front end (its MLIR import overlaps
    the parse, check and emit); it runs the build, and a build that stops in the front end
    ends it: no process or directory is left behind."""
    from compiler.backend import worker as backend_worker
    started = []

    class Recording(backend_worker.Worker):
        def __init__(self) -> None:
            super().__init__()
            started.append(self)

    monkeypatch.setattr(backend_worker, "Worker", Recording)
    src = tmp_path / "t.kina"
    src.write_text(TWICE)
    assert build.build_file(src, tmp_path / "t.so", 2, cache=False).ok
    src.write_text(TWICE.replace("let e = d * x in", "let e = d @ x in"))   # [64,128] @ [64,128]: a shape error
    bad = build.build_file(src, tmp_path / "bad.so", 2, cache=False)
    assert not bad.ok and bad.diagnostics
    assert len(started) == 2
    assert started[0].proc.returncode == 0                 # it ran the request and exited
    assert all(w.proc.returncode is not None and not Path(w.cwd).exists() for w in started)
    assert len(build.build_file(src, tmp_path / "bad0.so", 0, cache=False).diagnostics) and len(started) == 2


def test_a_prestarted_worker_runs_the_next_build_and_an_unclaimed_one_ends_with_the_command(tmp_path, monkeypatch):
    """`kinac build -O2` starts its worker before importing the front end
    (backend_worker.prestart); the build takes that worker instead of starting one, and
    -O0 or another command starts none.  One never claimed ends when the command does."""
    from compiler import cli
    from compiler.backend import worker as backend_worker
    src = tmp_path / "t.kina"
    src.write_text(TWICE)
    backend_worker.prestart()
    spare = backend_worker._spare
    assert spare is not None
    started = []
    real_worker = backend_worker.Worker
    monkeypatch.setattr(backend_worker, "Worker", lambda: started.append(1))   # a new one would fail here
    assert build.build_file(src, tmp_path / "t.so", 2, cache=False).ok
    assert not started and backend_worker._spare is None and spare.proc.returncode == 0
    monkeypatch.setattr(backend_worker, "Worker", real_worker)
    asked = []
    monkeypatch.setattr(backend_worker, "prestart", lambda: asked.append(1))
    monkeypatch.delenv("KINA_OPT_LEVEL", raising=False)
    for argv, want in ((["build", "-O2", "x.kina"], 1), (["validate", "x.kina", "-O2"], 1), (["build", "x.kina"], 0),
                       (["build", "-O2", "-O0", "x.kina"], 0), (["check", "-O2"], 0)):
        asked.clear()
        cli._prestart(argv[0], argv)
        assert len(asked) == want, argv
    monkeypatch.setenv("KINA_CACHE_DIR", str(tmp_path / "cache"))   # a build the cache will serve: none
    monkeypatch.delenv("KINA_CACHE", raising=False)
    assert build.build_file(src, tmp_path / "c.so", 2).ok
    asked.clear()
    cli._prestart("build", ["build", "-O2", str(src), "-o", str(tmp_path / "d.so")])
    cli._prestart("build", ["build", "-O2", "--no-cache", str(src)])
    assert len(asked) == 1
    monkeypatch.undo()
    spares = []
    real_prestart = backend_worker.prestart
    monkeypatch.setattr(backend_worker, "prestart", lambda: (real_prestart(), spares.append(backend_worker._spare)))
    assert cli.main(["build", "-O2", str(tmp_path / "missing.kina")]) == 2   # unreadable: no build took it
    assert len(spares) == 1 and backend_worker._spare is None
    assert spares[0].proc.returncode is not None and not Path(spares[0].cwd).exists()


def test_a_rewrite_that_breaks_the_module_is_caught_before_the_next_pass(tmp_path, monkeypatch):
    """The pass manager no longer verifies after every pass (engine.VERIFY_EACH_ENV), so
    run_pipeline verifies after each of our Python rewrites: a broken module is an
    MLIRError there (a `mlir-opt` diagnostic in a build), not input to the next pass."""
    import pytest
    ir, passmanager, _ = engine.engine_module()

    def drop_a_terminator(mlir_ir, module) -> int:
        fn = next(op for op in module.body.operations if op.operation.name == "func.func")
        list(fn.regions[0].blocks[0].operations)[-1].erase()
        return 1

    monkeypatch.setitem(rewrites.SLOTS, "@unshare-empties", rewrites.Rewrite(drop_a_terminator, lambda text: True))
    src, mlir = _front_end(tmp_path, TWICE, "k.kina")
    with ir.Context():
        module = ir.Module.parse(mlir)
        with pytest.raises(ir.MLIRError, match="terminator"):
            engine.run_pipeline(ir, passmanager, module, pipelines.passes_for(mlir, 2, tmp_path), mlir)


def test_verification_follows_only_rewrites_that_changed_the_module(tmp_path, monkeypatch):
    """run_pipeline verifies after a rewrite that reports a change, and skips it after one
    that changed nothing or only set tags (Rewrite.tags_only); the end is always verified."""
    ir, passmanager, _ = engine.engine_module()
    src, mlir = _front_end(tmp_path, TWICE, "k.kina")
    passes = pipelines.passes_for(mlir, 2, tmp_path)
    cut = passes[:passes.index("@merge-kernels") + 1]    # the rewrite is the last step
    calls: list[str] = []
    real_verify = engine.verify
    monkeypatch.setattr(engine, "verify", lambda module: (calls.append("verify"), real_verify(module)))
    for reported, tags_only, after_it in ((0, False, 0), (2, True, 0), (2, False, 1)):
        monkeypatch.setitem(rewrites.SLOTS, "@merge-kernels", rewrites.Rewrite(
            lambda mlir_ir, module, n=reported: calls.append("rewrite") or n, lambda text: True, tags_only=tags_only))
        with ir.Context():
            module = ir.Module.parse(mlir)
            engine.prepare_for_script(ir, module, passes)
            calls.clear()
            engine.run_pipeline(ir, passmanager, module, cut, mlir)
        tail = calls[calls.index("rewrite") + 1:]
        assert tail == ["verify"] * (after_it + 1), (reported, tags_only, calls)


def _without_tags(text: str, tags: tuple[str, ...]) -> str:
    import re
    for tag in tags:
        text = re.sub(rf"\s*\{{{re.escape(tag)}\}}|{re.escape(tag)}, |, {re.escape(tag)}", "", text)
    return text


def test_tags_only_rewrites_only_set_their_tags(tmp_path):
    """The rewrites marked tags_only (run without a verification after them) change nothing
    but their kina.* attributes, on a program with loops, foralls and kernels."""
    from compiler.backend.rewrites import tag_innermost_loops, tag_outlined_loops
    ir, passmanager, _ = engine.engine_module()
    text = (Path(__file__).parent / "programs" / "gpt_block.kina").read_text()
    res = build.BuildResult(False, source=build.SourceText(text, "g.kina"))
    mlir = build.front_end(text, "g.kina", {}, res)
    passes = pipelines.passes_for(mlir, 2, tmp_path)
    assert {s for s, r in rewrites.SLOTS.items() if r.tags_only} == {"@tag-outline", "@tag-hoist"}
    for slot, fn, tag in (("@tag-hoist", tag_innermost_loops, "kina.hoist"),
                          ("@tag-outline", tag_outlined_loops, "kina.outline")):
        with ir.Context():
            module = ir.Module.parse(mlir)
            engine.prepare_for_script(ir, module, passes)
            engine.run_pipeline(ir, passmanager, module, passes[:passes.index(slot)], mlir)
            before = str(module)
            assert fn(ir, module) > 0
            after = str(module)
            assert tag in after and _without_tags(after, (tag,)) == before


LONG_K = "fn f(a: Tensor[F32, [64, 1024]], b: Tensor[F32, [1024, 128]]) -> Tensor[F32, [64, 128]] {\n  a @ b\n}\n"


def test_a_long_k_parallel_matmul_runs_its_k_loop_in_blocks_and_matches_numpy(tmp_path):
    """K >= K_BLOCK_MIN: tagged kina.k_block (the script steps its k loop by K_BLOCK);
    each element still sums its K products in order (checked against float64 NumPy)."""
    from compiler.backend import parallelize, transform_library
    src, mlir = _front_end(tmp_path, LONG_K)
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(mlir)
        parallelize.tag_vectorizable(ir, module)
        assert "kina.k_block" in str(module) and "kina.parallel" in str(module)
    assert f"tile_sizes [0, 0, {transform_library.K_BLOCK}]" in transform_library.TRANSFORM_LIBRARY
    built = build.build_file(src, tmp_path / "k.so", 2, cache=False)
    assert built.ok, built.diagnostics
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((64, 1024)).astype(np.float32), rng.standard_normal((1024, 128)).astype(np.float32)
    got = runtime.load(built.so_path).f(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)


PACKED_K = """
fn whole(a: Tensor[F32, [64, 512]], b: Tensor[F32, [512, 2048]]) -> Tensor[F32, [64, 2048]] {
  a @ b
}
fn blocked(a: Tensor[F32, [64, 1024]], b: Tensor[F32, [1024, 2048]]) -> Tensor[F32, [64, 2048]] {
  a @ b
}
"""


def test_a_packed_product_of_k_up_to_512_runs_its_k_loop_whole(tmp_path):
    """PACKED_WHOLE_K_MAX: packed panels of K <= 512 take no k blocks (their tiles start from
    registers, "@zero-tiles"); a deeper one keeps them.  Both still match float64 NumPy."""
    from compiler.backend import parallelize
    from compiler.backend.bindings import walk_ops
    src, mlir = _front_end(tmp_path, PACKED_K, "packed.kina")
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(mlir)
        parallelize.tag_for_script(ir, module)
        tags = [{name for name in ("kina.k_block", "kina.pack_b") if name in op.attributes}
                for op in walk_ops(ir, module, lambda op: op.name == "linalg.matmul")]
    assert tags == [{"kina.pack_b"}, {"kina.pack_b", "kina.k_block"}]
    lib = runtime.load(build.build_file(src, tmp_path / "packed.so", 2, cache=False).so_path)
    rng = np.random.default_rng(6)
    for fn, k in ((lib.whole, 512), (lib.blocked, 1024)):
        a, b = rng.standard_normal((64, k)).astype(np.float32), rng.standard_normal((k, 2048)).astype(np.float32)
        np.testing.assert_allclose(fn(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))


# The minimal program that broke the -O2 build ("Attempted to vectorize, but failed"): a
# regression head's input gradient, g @ transpose(w) with K = 8.  Its B, a transpose only the
# product reads, was packed into strips by a transpose in 16 x 16 tiles, which 8 rows leave
# partial; K = 40 likewise.  Such a B is now transposed by a pass of its own.
SHALLOW_T = """
fn k8(d: Tensor[F32, [256, 8]], w: Tensor[F32, [1024, 8]]) -> Tensor[F32, [256, 1024]] {
  d @ w.transpose([1, 0])
}
fn k40(d: Tensor[F32, [256, 40]], w: Tensor[F32, [512, 40]]) -> Tensor[F32, [256, 512]] {
  d @ w.transpose([1, 0])
}
"""


def test_a_transposed_b_of_a_k_the_transpose_tiles_do_not_divide_builds_and_matches_numpy(tmp_path):
    libs = libraries_at_levels(SHALLOW_T, tmp_path, "shallow")
    rng = np.random.default_rng(8)
    for fn, k, n in (("k8", 8, 1024), ("k40", 40, 512)):
        d, w = rng.standard_normal((256, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
        got = getattr(libs[2], fn)(d, w)
        np.testing.assert_allclose(got, getattr(libs[0], fn)(d, w), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, d.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)


DEEP_K = """
fn plain(a: Tensor[F32, [256, 2048]], b: Tensor[F32, [2048, 96]]) -> Tensor[F32, [256, 96]] {
  a @ b
}
fn short(a: Tensor[F32, [64, 2048]], b: Tensor[F32, [2048, 96]]) -> Tensor[F32, [64, 96]] {
  a @ b
}
fn transposed(a: Tensor[F32, [256, 2048]], w: Tensor[F32, [96, 2048]]) -> Tensor[F32, [256, 96]] {
  a @ w.transpose([1, 0])
}
fn input_grad(g: Tensor[F32, [128, 256]], w: Tensor[F32, [96, 256]]) -> Tensor[F32, [128, 96]] {
  g @ w.transpose([1, 0])
}
fn shallow(g: Tensor[F32, [128, 256]], w: Tensor[F32, [256, 96]]) -> (Tensor[F32, [128, 96]], Tensor[F32, [96, 256]]) {
  let wt = w.transpose([1, 0]) in
  (g @ w, wt)
}
"""


def test_a_deep_parallel_matmul_runs_over_packed_strips_of_b_and_matches_O0(tmp_path):
    """STRIP_MIN_K <= K with STRIP_MIN_M rows, or any K when B is a transpose only the product
    reads: threads over [K, 32] strips of B (three here: 2 + 1 on two threads), each packed (a
    transposed B transposed into its strip), no k blocks; each element sums its K products in
    order, so a transposed B gives the same bits as the plain one.  A short or shallow product
    of a plain B keeps its blocks."""
    from compiler.backend import parallelize
    from compiler.backend.bindings import walk_ops
    src, mlir = _front_end(tmp_path, DEEP_K, "deep.kina")
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(mlir)
        parallelize.tag_for_script(ir, module)
        tags = [{name for name in ("kina.k_block", "kina.pack_b", "kina.pack_b_t") if name in op.attributes}
                | {str(op.attributes["kina.parallel"])} for op in walk_ops(ir, module, lambda op: op.name == "linalg.matmul")]
    strips = "array<i64: 32, 32>"
    assert tags == [{"kina.pack_b", strips}, {"kina.k_block", strips}, {"kina.pack_b_t", strips},
                    {"kina.pack_b_t", strips}, {strips}]
    tall = parallelize.STRIP_MIN_M
    assert parallelize._strips(tall, parallelize.STRIP_MAX_K, 64) and not parallelize._strips(tall, parallelize.STRIP_MAX_K * 2, 64)
    assert not parallelize._strips(tall, parallelize.STRIP_MIN_K, 32)       # one strip: no second thread
    libs = {level: runtime.load(build.build_file(src, tmp_path / f"deep{level}.so", level, cache=False).so_path)
            for level in (0, 2)}
    rng = np.random.default_rng(9)
    a, w = rng.standard_normal((256, 2048)).astype(np.float32), rng.standard_normal((96, 2048)).astype(np.float32)
    got = libs[2].plain(a, np.ascontiguousarray(w.T))
    np.testing.assert_array_equal(libs[2].transposed(a, w), got)
    np.testing.assert_array_equal(libs[2].short(a[:64], np.ascontiguousarray(w.T)), got[:64])
    np.testing.assert_allclose(got, libs[0].plain(a, np.ascontiguousarray(w.T)), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got, a.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4, atol=1e-3)
    g, w2 = rng.standard_normal((128, 256)).astype(np.float32), rng.standard_normal((96, 256)).astype(np.float32)
    got = libs[2].input_grad(g, w2)
    np.testing.assert_array_equal(got, libs[2].shallow(g, np.ascontiguousarray(w2.T))[0])
    np.testing.assert_allclose(got, libs[0].input_grad(g, w2), rtol=1e-5, atol=1e-4)


PAR_MM = ("fn f(a: Tensor[F32, [64, 256]], b: Tensor[F32, [256, 256]], x: Tensor[F32, [8, 64, 64]], "
          "y: Tensor[F32, [8, 64, 64]]) -> (Tensor[F32, [64, 256]], Tensor[F32, [8, 64, 64]]) {\n  (a @ b, x @ y)\n}\n")


def test_a_parallel_matmul_zeroes_each_block_inside_its_forall(tmp_path):
    """"@fuse-fills" (block_fills.fuse_fills_into_foralls) moves the fill of each parallel
    matmul / batch_matmul into its scf.forall, onto the block the body writes; the
    results still match NumPy."""
    src, mlir = _front_end(tmp_path, PAR_MM, "m.kina")
    passes = pipelines.passes_for(mlir, 2, tmp_path)
    upto = passes[:passes.index(pipelines.FILL_SLOT) + 1]   # the script, then the slot
    ir, passmanager, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(mlir)
        engine.prepare_for_script(ir, module, passes)
        engine.run_pipeline(ir, passmanager, module, upto, mlir)
        foralls = rewrites.walk_ops(ir, module, lambda op: op.name == "scf.forall")
        fills = rewrites.walk_ops(ir, module, lambda op: op.name == "linalg.fill")
        assert len(foralls) == 2 and len(fills) == 2
        assert all(f.parent.name == "scf.forall" for f in fills)        # one per block, inside
        assert sorted(str(f.results[0].type) for f in fills) == ["tensor<1x64x64xf32>", "tensor<32x128xf32>"]
    built = build.build_file(src, tmp_path / "m.so", 2, cache=False)
    assert built.ok, built.diagnostics
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((64, 256), (256, 256), (8, 64, 64), (8, 64, 64))]
    mm, bmm = runtime.load(built.so_path).f(*args)
    np.testing.assert_allclose(mm, args[0].astype(np.float64) @ args[1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bmm, args[2].astype(np.float64) @ args[3], rtol=1e-4, atol=1e-4)


def test_a_forall_that_reads_more_than_its_block_keeps_its_fill():
    """The fill moves only when the body reads the shared_out as exactly the block its
    parallel_insert_slice writes: here each iteration reads row 0 as well."""
    from compiler.backend import block_fills
    text = """func.func @f(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %f = linalg.fill ins(%c : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = scf.forall (%i) in (4) shared_outs(%o = %f) -> (tensor<4x8xf32>) {
    %row0 = tensor.extract_slice %o[0, 0] [1, 8] [1, 1] : tensor<4x8xf32> to tensor<1x8xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %row0 into %o[%i, 0] [1, 8] [1, 1] : tensor<1x8xf32> into tensor<4x8xf32>
    }
  }
  return %r : tensor<4x8xf32>
}
"""
    ir, _, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(text)
        assert block_fills.fuse_fills_into_foralls(ir, module) == 0
        assert str(module) == str(ir.Module.parse(text))


TWO_TRANSPOSES = """fn f(x: Tensor[F32, [4, 64, 8, 32]]) -> Tensor[F32, [4, 8, 32, 64]] {
  let a = x.transpose([0, 2, 1, 3]) in
  a.transpose([0, 1, 3, 2])
}
"""


def test_a_transpose_the_inliner_rebuilds_is_still_tiled(tmp_path):
    """--inline's canonicalisation folds these two transposes into one ([0, 2, 3, 1]),
    a new op without the attributes of either; tagged before it, that transpose lost its
    tiling (the scaled train step: 3 of its 17 tiled transposes ran as scalar loops).  The
    tags are set after --inline ("@tag-for-script")."""
    src, mlir = _front_end(tmp_path, TWO_TRANSPOSES, "t.kina")
    passes = pipelines.passes_for(mlir, 2, tmp_path)
    ir, passmanager, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(mlir)
        engine.prepare_for_script(ir, module, passes)
        engine.run_pipeline(ir, passmanager, module, passes[:passes.index(pipelines.TAG_SLOT) + 1], mlir)
        transposes = rewrites.walk_ops(ir, module, lambda op: op.name == "linalg.transpose")
        assert len(transposes) == 1 and "kina.transpose_tile" in transposes[0].attributes
    built = build.build_file(src, tmp_path / "t.so", 2, cache=False)
    assert built.ok, built.diagnostics
    x = np.random.default_rng(2).standard_normal((4, 64, 8, 32)).astype(np.float32)
    np.testing.assert_array_equal(runtime.load(built.so_path).f(x), x.transpose(0, 2, 3, 1))


def test_kinac_builds_and_validates_at_O1_and_O3(tmp_path, capsys):
    """-O1 and -O3 are -O2's MLIR pipeline with LLVM's opt/llc at that level.
    KINA_OPT_LEVEL and the Python API took them while kinac refused the flags, so
    `fuzz_compile.py --levels 1` failed every build; now each level validates."""
    from compiler import cli
    src = tmp_path / "t.kina"
    src.write_text(TWICE)
    assert [pipelines.pipeline_for(lv).llvm_level for lv in (1, 3)] == [1, 3]
    for level in ("-O1", "-O3"):
        assert cli.main(["validate", level, str(src)]) == 0
        assert "1/1 functions passed" in capsys.readouterr().out
        assert cli.main(["build", level, str(src), "-o", str(tmp_path / f"t{level}.so")]) == 0
    with pytest.raises(SystemExit) as stop:
        cli.main(["build", "-O1", "-O3", str(src)])
    assert stop.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


HOISTED = """
fn f(x: Tensor[F32, [64, 64]], w: Tensor[F32, [64, 64]]) -> Tensor[F32, [64, 64]] {
  x @ w
}

fn g[N, K](x: Tensor[F32, [N, K]], w: Tensor[F32, [K, 64]]) -> Tensor[F32, [N, 64]] {
  x @ w
}
"""


def test_the_innermost_loops_are_hoisted_and_only_they_are_visited(tmp_path):
    """The "@hoist" script visits the loops `tag_innermost_loops` tags (visiting all 820 of
    the GPT block's loops cost 0.55 s for the same module): only loops with no loop nested
    in them, and the register tile's k loop among them carries the C tile as a vector
    iter_arg, in the static matmul and in the dynamic one's peeled main tiles (both the
    host's REGISTER_TILE; the dynamic one in the function of its shared product)."""
    import re
    ir, passmanager, _ = engine.engine_module()
    res = build.BuildResult(False, source=build.SourceText(HOISTED, "h.kina"))
    mlir = build.front_end(HOISTED, "h.kina", {}, res)
    assert mlir is not None
    passes = pipelines.passes_for(mlir, 2, tmp_path)
    upto = passes[:passes.index(f"--transform-interpreter=entry-point={transform_library.HOIST_ENTRY}") + 1]
    with ir.Context():
        module = ir.Module.parse(mlir)
        engine.run_pipeline(ir, passmanager, module, upto, mlir)
        tagged = rewrites.walk_ops(ir, module, lambda op: op.name == "scf.for" and "kina.hoist" in op.attributes)
        assert tagged
        for loop in tagged:
            nested = rewrites.walk_ops(ir, loop, lambda op: op.name == "scf.for")
            assert [op.operation for op in nested] == [loop.operation]    # walk_ops includes the loop itself
        # the static matmul and the dynamic one's peeled main tiles take the host's register tile
        # (g's product is in its shared function: compiler/backend/shared_products.py)
        for name in ("kina_f", "kina.product.0"):
            m, n = transform_library.REGISTER_TILE
            body = next(str(op) for op in module.body.operations
                        if re.search(rf'@"?{re.escape(name)}"?\(', str(op).split("\n")[0]))
            assert re.search(rf"scf\.for .*iter_args\(.*\) -> \(.*vector<{m}x{n}xf32>", body), name


# A row-parallel elementwise body of the exp polynomial, a one-hot select on the column index
# and an FMA-free mix of ops, [256, 512]: vectorised 16 lanes wide by the script.
VECTOR_ROWS = """
fn f(x: Tensor[F32, [256, 512]], y: Tensor[F32, [256, 512]], t: Tensor[I64, [256, 1]]) -> Tensor[F32, [256, 512]] {
  let e = (x - y).exp() in
  let s = e * y + x in
  let (l, g) = handle pick(s, t) with reverseMode in
  g * e
}

fn pick(s: Tensor[F32, [256, 512]], t: Tensor[I64, [256, 1]]) -> Tensor[F32, [256, 1]] {
  let p = s.take_along_axis(t, axis=1) in
  p
}
"""


def test_row_parallel_elementwise_loops_are_vectorised_and_equal_O0_bit_for_bit(tmp_path):
    """`kina.vector_rows`: after the script, the fused elementwise loop is vector code (the
    one-hot's column index a vector.step); per lane the scalar ops of -O0, so the library's
    values equal -O0's bit for bit."""
    src, mlir = _front_end(tmp_path, VECTOR_ROWS, "v.kina")
    passes = pipelines.passes_for(mlir, 2, tmp_path)
    upto = passes[:passes.index(pipelines.FILL_SLOT) + 1]   # the tags, the script, then the slot
    ir, passmanager, _ = engine.engine_module()
    with ir.Context():
        module = ir.Module.parse(mlir)
        engine.prepare_for_script(ir, module, passes)
        engine.run_pipeline(ir, passmanager, module, upto, mlir)
        text = str(module)
    assert "vector<1x16xf32>" in text and "vector.step" in text
    libs = {}
    for level in (0, 2):
        built = build.build_file(src, tmp_path / f"v{level}.so", level, cache=False)
        assert built.ok, built.diagnostics
        libs[level] = runtime.load(built.so_path)
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal((256, 512)).astype(np.float32) for _ in range(2))
    t = rng.integers(0, 512, (256, 1))
    np.testing.assert_array_equal(libs[2].f(x, y, t), libs[0].f(x, y, t))
