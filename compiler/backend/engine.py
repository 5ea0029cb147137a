"""The back end of -O1..-O3: the upstream `mlir` Python bindings parse and verify the
emitted module, tag it for the -O2 transform script (compiler/backend/parallelize.py), run the pass
pipeline (compiler/backend/pipelines.py) with the rewrites of compiler/backend/rewrites.py at their slots, merge identical
kernels, and LLVM's `opt` and `llc` (compiler/backend/llvm_stage.py, as processes) optimise and
compile the lowered module for the host CPU into the object file.

Builds call `engine_object_in_child`, which runs `engine_object` in a worker process
(compiler/backend/worker.py): MLIR's verifiers abort the process on some bugs (and opt
or llc, being processes of their own, cannot take the worker down).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.backend import rewrites
from compiler.backend import worker as backend_worker
from compiler.backend.bindings import engine_module, mlir_error_text
from compiler.backend.entry_points import (
    CIFACE_PREFIX,
    PART_DECLARATIONS,
    entry_points_text,
    mark_glue,
    record_failed_asserts,
)
from compiler.backend.errors import StageFailed
from compiler.backend.fusion import enabled as fusion_enabled
from compiler.backend.fusion import fuse_elementwise
from compiler.backend.llvm_stage import dedupe_kernels, llvm_object
from compiler.backend.math_lowering import lower_math
from compiler.backend.pipelines import pipeline_text, segments
from compiler.backend.rewrites import rewrite_scatters
from compiler.backend.tools import find_tool
from compiler.backend.transposed_operands import fold_transposed_lhs

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module

    from compiler.backend.worker import Worker

# on_phase(phase, the bindings' ir module, the module so far (None before it is parsed)).
PhaseHook = Callable[[str, "ModuleType", "Module | None"], None]

def engine_object_in_child(mlir_text: str, passes: list[str], llvm_level: int, obj: Path,
                           timings: dict[str, float], worker: Worker | None = None,
                           llvm_ir: Path | None = None, part: bool = False,
                           objects: Path | None = None) -> list[tuple[str, int]]:
    """engine_object in a worker process (compiler/backend/worker.py; `worker`: one started
    ahead): an LLVM or MLIR abort becomes a StageFailed, and the calling process (the
    language server) lives on.  With `llvm_ir`, the LLVM IR the pass pipeline lowered to
    is written there instead of an object (`kinac emit --llvm`).  `part`: the module is one
    part of a library built in parts (engine_object).  `objects`: the build cache's root,
    where the LLVM stage looks up and stores each part's object (None: the cache is off).
    Returns the exported functions (ciface symbol, descriptors)."""
    src = obj.with_suffix(".in.mlir")
    src.write_text(mlir_text)
    request = {"mode": "engine", "input": str(src), "passes": passes, "llvm_level": llvm_level, "obj": str(obj),
               "part": part, "objects": None if objects is None else str(objects)}
    if llvm_ir is not None:
        request["llvm_ir"] = str(llvm_ir)
    result = backend_worker.run(request, obj.parent, worker)
    timings.update(result["timings"])
    if not (llvm_ir or obj).exists():
        raise StageFailed("llvm", "the -O2 back end wrote no " + ("LLVM IR" if llvm_ir else "object file"))
    return [(name, n) for name, n in result.get("exported", [])]


# The pass manager verifies the whole module after every pass by default: 35% of the -O2
# pipeline's time on the scaled StoryLM (1.5 -> 1.0 s).  Upstream passes are trusted to keep
# the IR valid; the module is verified after each of our own rewrites (before a pass reads
# it) and once at the end, so invalid IR still never reaches LLVM.  A rewrite that changed
# nothing, or only set discardable attributes (`Rewrite.tags_only`), cannot have broken it:
# no verification then (0.08 of the GPT block's 0.2 s of them).  KINA_MLIR_VERIFY_EACH=1
# verifies after every pass and every rewrite again (to find which one broke a module).
VERIFY_EACH_ENV = "KINA_MLIR_VERIFY_EACH"


def prepare_for_script(mlir_ir: ModuleType, module: Module, passes: list[str]) -> None:
    """The Python rewrites before the -O2 pass list (none without the transform script):
    scatters, elementwise fusion, transposed A operands of matmuls, the exp polynomial.
    The tags that pick what the script vectorises, threads and tiles are set after --inline
    (the "@tag-for-script" slot)."""
    if not any(p.startswith("--transform-interpreter") for p in passes):
        return
    rewrite_scatters(mlir_ir, module)
    # exp becomes its polynomial first: plain arithmetic, which fuses into a reduction (a
    # softmax's sum of exps) where a math.exp call would have kept the loop scalar
    lower_math(mlir_ir, module)
    if fusion_enabled():
        fuse_elementwise(mlir_ir, module)
    fold_transposed_lhs(mlir_ir, module)


def run_pipeline(mlir_ir: ModuleType, passmanager: ModuleType, module: Module, passes: list[str], emitted: str,
                 enable_timing: bool = False) -> None:
    """The pass list on a module in this process, with the rewrite of each slot
    (compiler/backend/rewrites.py) between its segments; `emitted`: the module's emitted text.
    Raises mlir_ir.MLIRError when a pass fails or the module stops verifying."""
    import os

    verify_each = os.environ.get(VERIFY_EACH_ENV, "").strip() == "1"
    for slot, part in segments(passes):
        if slot is not None and rewrites.SLOTS[slot].maybe(emitted):
            changed = rewrites.SLOTS[slot].run(mlir_ir, module)
            if verify_each or (changed and not rewrites.SLOTS[slot].tags_only):
                verify(module)
        if part:
            pm = passmanager.PassManager.parse(pipeline_text(part))
            pm.enable_verifier(verify_each)
            if enable_timing:
                pm.enable_timing()
            pm.run(module.operation)
    verify(module)


def verify(module: Module) -> None:
    """Verify the whole module (raises mlir_ir.MLIRError when it is invalid)."""
    module.operation.verify()


def engine_object(mlir_text: str, passes: list[str], llvm_level: int, obj: Path, timings: dict[str, float],
                  on_phase: PhaseHook | None = None, llvm_ir: Path | None = None,
                  part: bool = False, objects: Path | None = None) -> list[tuple[str, int]]:
    """Pass pipeline and translation to LLVM IR in this process, then LLVM's opt and llc
    processes (compiler/backend/llvm_stage.py) write `obj`; with `llvm_ir`, the lowered module's
    LLVM IR is written there instead (before opt).  on_phase(phase, mlir_ir, module) is called
    as "mlir-verify", "mlir-opt" and "llvm" start (module: the lowered one, for "llvm").
    `part`: one part of a library built in parts (compiler/backend/split.py): the entry points
    are the entry module's.  `objects`: the build cache's root, for the LLVM stage's objects
    (llvm_stage.llvm_object).  Returns the exported functions (ciface symbol, descriptors).
    Builds call this through engine_object_in_child: MLIR aborts the process on some bugs."""
    mlir_ir, passmanager, _ = engine_module()
    hook: PhaseHook = on_phase or (lambda phase, mlir_ir, module: None)
    with mlir_ir.Context() as ctx:
        ctx.enable_multithreading(False)  # 2-core machines: the thread pool costs more than it gains
        t0 = time.perf_counter()
        hook("mlir-verify", mlir_ir, None)
        try:
            module = mlir_ir.Module.parse(mlir_text)
        except mlir_ir.MLIRError as e:
            # The emitted module does not verify: a lowering bug, reported at its Kina line.
            raise StageFailed("mlir-verify", mlir_error_text(e)) from None
        hook("mlir-opt", mlir_ir, module)
        try:
            prepare_for_script(mlir_ir, module, passes)
            run_pipeline(mlir_ir, passmanager, module, passes, mlir_text)
        except mlir_ir.MLIRError as e:
            raise StageFailed("mlir-opt", mlir_error_text(e)) from None
        exported = _append_packed(mlir_ir, module, mlir_text, part)
        dedupe_kernels(mlir_ir, module)
        hook("llvm", mlir_ir, module)
        defines = _defines_functions(mlir_ir, module)
        # Translated here, not by an mlir-translate process: 0.04 s against 0.10 s (the
        # process re-reads the module) for the scaled StoryLM's 0.7 MB of LLVM IR.
        ll = llvm_ir if llvm_ir is not None else obj.parent / "lowered.ll"
        ll.write_text(_translate(mlir_ir, module))
        timings["passes"] = time.perf_counter() - t0
    if llvm_ir is not None:
        return exported
    if not defines:
        _empty_object(obj)   # nothing to compile (an empty file): an empty object file is the right answer
    else:
        llvm_object(ll, obj, llvm_level, timings, part, objects)
    return exported


def _translate(mlir_ir: ModuleType, module: Module) -> str:
    """The lowered module (LLVM dialect) as LLVM IR text."""
    from mlir.dialects import llvm
    try:
        text: str = llvm.translate_module_to_llvmir(module.operation)
    except mlir_ir.MLIRError as e:
        raise StageFailed("mlir-translate", mlir_error_text(e)) from None
    if not text.strip():
        raise StageFailed("mlir-translate", "the lowered module did not translate to LLVM IR")
    return text


def _defines_functions(mlir_ir: ModuleType, module: Module) -> bool:
    return any(op.operation.name == "llvm.func" and len(op.regions[0].blocks) > 0
               for op in module.body.operations)


def _empty_object(obj: Path) -> None:
    """An object file with no symbols, from the C compiler (an empty translation unit)."""
    import subprocess

    src = obj.with_suffix(".empty.c")
    src.write_text("/* a Kina module without functions */\n")
    proc = subprocess.run([str(find_tool("cc")), "-c", "-fPIC", str(src), "-o", str(obj)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise StageFailed("cc", proc.stderr or "cc could not compile an empty file")


def _append_packed(mlir_ir: ModuleType, module: Module, mlir_text: str, part: bool = False) -> list[tuple[str, int]]:
    """The entry points of compiler/backend/entry_points.py, with each failed bounds check
    recording its message and returning (`mlir_text`: the emitted module, whose function
    signatures give the shapes the checked entries compare); returns the exported functions
    (ciface symbol, descriptors).  `part`: one part of a library built in parts
    (compiler/backend/split.py): only `_kina_fail`'s declaration, the entry module has the rest."""
    record_failed_asserts(mlir_ir, module)
    exported = []
    for op in module.body.operations:
        if op.operation.name == "llvm.func":
            name = mlir_ir.StringAttr(op.attributes["sym_name"]).value
            if name.startswith(CIFACE_PREFIX + "kina_"):
                exported.append((name, str(op.attributes["function_type"]).count("ptr")))
    if part:
        wrapper = mlir_ir.Module.parse(PART_DECLARATIONS)
        ops = list(wrapper.body.operations)
    else:
        wrapper = mlir_ir.Module.parse(entry_points_text(exported, mlir_text, declare=True))
        ops = list(wrapper.body.operations)[len(exported):]   # skip the declarations
    for op in ops:
        module.body.append(op.detach_from_parent())
    mark_glue(mlir_ir, module)
    return exported
