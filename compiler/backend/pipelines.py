"""Pass pipelines: the mlir-opt pass list of each optimisation level, as data.

One `Pipeline` per level (`PIPELINES`): mlir-opt flags in order, with slots ("@low-precision",
"@transforms", "@outline", the threading slots) expanded per module by `passes_for`, the
list cut at the rewrite slots of compiler/backend/rewrites.py by `segments`, and `pipeline_text`
for the in-process pass manager.

The other -O2 stages: compiler/backend/transform_library.py (the transform-dialect script of the
"@transforms" and "@outline" slots), compiler/backend/parallelize.py (which ops the script
vectorises, tiles and makes parallel), compiler/backend/threads.py (the OpenMP lowering of the
parallel loops), compiler/backend/rewrites.py (the Python IR rewrites of the slots, the scatter
rewrite), compiler/backend/entry_points.py (the packed entry points of every library),
compiler/backend/fusion.py (elementwise fusion, before the tagging) and compiler/backend/alloc_cache.py
(the heap buffers of -O2 libraries).
compiler/backend/engine.py is the back end of -O1..-O3 that runs these through the MLIR Python
bindings (in a worker process), then LLVM's opt and llc (compiler/backend/llvm_stage.py);
compiler/backend/toolchain.py drives them (and the external tools of -O0); the errors every
stage raises are in compiler/backend/errors.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from compiler.backend import alloc_cache, parallel_if, row_copies, threads, zero_tiles
from compiler.backend.errors import ToolchainError
from compiler.backend.rewrites import SLOTS
from compiler.backend.transform_library import HOIST_ENTRY, OUTLINE_ENTRY, TRANSFORM_LIBRARY, transform_flags

# ---- the pass pipeline (data) ---------------------------------------------------------
# Each entry is one mlir-opt flag (pass name and options).  Order matters:
# - inline first, so the private generated functions ("kina_f.rev") disappear;
# - buffer-results-to-out-params with modify-public-functions makes every result a
#   caller-provided buffer: the library mallocs nothing per call (no leaks);
# - low-precision floats: math ops are extended to f32, arith ops emulated in f32;
#   bf16 conversions are expanded to integer ops; F8 conversions go through the
#   APFloat runtime (added only when the module mentions an F8 type, see `passes_for`).
# Not passes: rewrites of compiler/backend/rewrites.py (IR rewrites no upstream pass does) run at
# these points of the list, between the passes before and after them.
COPY_SLOT = "@lower-copies"      # strided memref.copy -> loops (no runner-library call)
ROW_COPIES_SLOT = row_copies.SLOT   # -O2: a copy of contiguous rows -> vector loads and stores
ZERO_TILES_SLOT = zero_tiles.SLOT   # -O2: register tiles start from their fill (copy source), the fill dropped
BF16_SLOT = "@bf16-as-i16"       # bf16 loads and stores as i16 (no bf16 values in LLVM IR)
LOW_PRECISION = [
    "--math-extend-to-supported-types=extra-types=f16 target-type=f32",
    "--arith-emulate-unsupported-floats=source-types=bf16,f8E4M3FN,f8E5M2 target-type=f32",
    "--arith-expand=include-bf16=true",
]
# convert-arith-to-apfloat turns EVERY float arith op of the module into a software APFloat
# call, f32 ones included (and vector ones into vector.to_elements that nothing lowers
# afterwards: the -O2 build of a module with an F8 function and a vectorised matmul
# failed).  So the arith ops LLVM can take are converted to the LLVM dialect first; what is
# left, the F8 <-> f32 conversions, goes to APFloat; the later convert-arith-to-llvm
# lowers the integer code the APFloat conversion writes around its calls.
F8_ONLY = ["--convert-arith-to-llvm", "--convert-arith-to-apfloat"]
_LOWER_TO_LLVM = [
    "--lower-affine",
    "--convert-scf-to-cf",
    "@low-precision",
    "--expand-strided-metadata",
    "--lower-affine",      # expand-strided-metadata writes affine.apply for dynamic sizes and strides
    "--finalize-memref-to-llvm",
    # One dialect conversion for the rest, not five passes that each walk the module: the
    # same output (byte-identical on the GPT block), -O0's mlir-opt 0.44 instead of 0.50 s on
    # it.  memref stays a pass of its own, before: in the one conversion a memref.reshape
    # whose shape operand is converted in the same walk is left unconverted.
    "--convert-to-llvm=filter-dialects=math,arith,cf,func,index",
    "@openmp-to-llvm",
    "--reconcile-unrealized-casts",
    BF16_SLOT,
    "--canonicalize",
]
RESULTS_SLOT = "@distinct-results"   # a buffer returned twice -> a copy for each later use
_BUFFERIZE = [
    "--one-shot-bufferize=bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map",
    RESULTS_SLOT,
    "--buffer-results-to-out-params=hoist-static-allocs hoist-dynamic-allocs modify-public-functions",
]
O0_PASSES = [
    "--inline",
    *_BUFFERIZE,
    "--buffer-deallocation-pipeline",
    "--convert-bufferization-to-memref",
    COPY_SLOT,
    "--convert-linalg-to-loops",
    # A scan's loop (compiler/backend/emit/ops_scan.py) slices rows at a dynamic offset: its
    # strided metadata becomes affine.apply ops, lowered by _LOWER_TO_LLVM's lower-affine.
    "--expand-strided-metadata",
    *_LOWER_TO_LLVM,
]
# Buffers up to this size become stack allocations at -O2 (no malloc/free per call).
# Small on purpose: every promoted buffer of a function is live in its frame at once.
STACK_BUFFER_BYTES = 4096
# More rewrite slots (compiler/backend/rewrites.py), -O2 only:
UNSHARE_SLOT = "@unshare-empties"       # a tensor.empty of thousands of uses -> groups of clones
OUTLINE_TAG_SLOT = "@tag-outline"       # picks the loop nests "@outline" makes kernels
PARALLEL_IF_SLOT = parallel_if.SLOT     # a dynamic export's foralls: a serial twin when small
SCOPE_SLOT = "@inline-alloca-scopes"    # the OpenMP bodies' memref.alloca_scope -> their bodies
MERGE_SLOT = "@merge-kernels"           # outlined kernels with identical bodies -> one
TAG_SLOT = "@tag-for-script"            # what the transform script vectorises, threads, tiles
HOIST_TAG_SLOT = "@tag-hoist"           # the loops "@hoist" visits: the innermost ones
PRODUCT_SLOT = "@product-results"       # a shared product's function returns its buffer argument
FILL_SLOT = "@fuse-fills"               # a parallel matmul's fill -> one per block, in its forall
O2_PASSES = [
    "--inline",
    TAG_SLOT,
    "@transforms",
    HOIST_TAG_SLOT,
    "@hoist",
    FILL_SLOT,
    "--canonicalize",
    "--cse",
    # CSE merges every `tensor.empty` of one type into one value that thousands of ops then
    # write into, and one-shot bufferization's conflict analysis of that value's uses is
    # quadratic (a 4,000-let function: 70 s of an 81 s build): see rewrites.unshare_empty_tensors.
    UNSHARE_SLOT,
    _BUFFERIZE[0],
    # the shared products' functions (compiler/backend/shared_products.py) return their
    # accumulator argument: dropped here, so the out-parameters below add no copy
    PRODUCT_SLOT,
    "--drop-equivalent-buffer-results",
    *_BUFFERIZE[1:],
    f"--promote-buffers-to-stack=max-alloc-size-in-bytes={STACK_BUFFER_BYTES} max-rank-of-allocated-memref=8",
    "--buffer-deallocation-pipeline",
    "--convert-bufferization-to-memref",
    ZERO_TILES_SLOT,
    ROW_COPIES_SLOT,
    COPY_SLOT,
    "--convert-vector-to-scf",
    "--convert-linalg-to-loops",
    OUTLINE_TAG_SLOT,
    "@outline",
    # The scaled StoryLM's 123 kernels are 53 distinct ones (its train step repeats the
    # forward's): merged here, the lowering below takes 0.25 instead of 0.5 s.
    MERGE_SLOT,
    # Multithreading: the script's scf.forall loops (big matmuls, big row-parallel generics)
    # become OpenMP parallel loops (omp.parallel + omp.wsloop: each thread takes a static
    # share of the blocks or rows, the same share in every loop; threads.py says why), or
    # serial loops without an OpenMP runtime; see compiler/backend/threads.py.  -O0 has no
    # forall loops.
    PARALLEL_IF_SLOT,
    "@threads",
    # convert-scf-to-openmp wraps each parallel body in a one-block memref.alloca_scope,
    # which the loops left in it break into blocks at convert-scf-to-cf: see
    # rewrites.inline_alloca_scopes.
    SCOPE_SLOT,
    # Fold the index arithmetic of the loop nests before it is expanded into LLVM ops.
    "--canonicalize",
    "--cse",
    # Tiled loops index subviews dynamically: their strided metadata becomes affine.apply
    # ops, which the lower-affine of _LOWER_TO_LLVM then lowers.
    "--expand-strided-metadata",
    "--convert-vector-to-llvm",
    "--convert-ub-to-llvm",
    # Heap buffers from the library's cache of freed blocks (compiler/backend/alloc_cache.py); the
    # list ends with --canonicalize: a second one changed nothing and cost 0.1 s.
    *[alloc_cache.FINALIZE_FLAG if p == "--finalize-memref-to-llvm" else p for p in _LOWER_TO_LLVM],
    "--cse",
]


# Passes that only run on func.func: a textual pipeline (the "engine" back end) must
# nest them; mlir-opt's command line nests them implicitly.
FUNC_PASSES = {"linalg-fuse-elementwise-ops", "promote-buffers-to-stack"}


@dataclass(frozen=True)
class Pipeline:
    passes: list[str]   # mlir-opt flags, in order ("@low-precision" is a slot, see passes_for)
    backend: str        # "tools" (mlir-opt, mlir-translate, llc processes) or "engine" (in-process)
    llvm_level: int     # the -O level of LLVM's opt and llc


PIPELINES: dict[int, Pipeline] = {
    0: Pipeline(O0_PASSES, "tools", 0),
    1: Pipeline(O2_PASSES, "engine", 1),
    2: Pipeline(O2_PASSES, "engine", 2),
    3: Pipeline(O2_PASSES, "engine", 3),
}
# mlir-opt options (not passes): on 2-core machines the thread pool costs more than it gains.
MLIR_OPT_FLAGS = ["--mlir-disable-threading"]
_F8_RE = re.compile(r"f8E(4M3FN|5M2)\b")
_LOW_PRECISION_RE = re.compile(r"\bb?f16\b|f8E")


def uses_f8(mlir_text: str) -> bool:
    return bool(_F8_RE.search(mlir_text))


def low_precision_passes(mlir_text: str) -> list[str]:
    """The "@low-precision" slot: math-extend-to-supported-types and
    arith-emulate-unsupported-floats only act on f16/bf16/F8 ops, so a module without those
    types skips them (0.03 s of the GPT block's 0.7 s -O0 lowering); arith-expand also
    expands ops of every float type (maximumf, ceildivsi, ...) and always runs."""
    # The substrings first: the expression alone took 12 ms on the GPT block's gradient (a
    # word boundary tried at every offset), on the critical path of each -O0 build.
    if not (("f16" in mlir_text or "f8E" in mlir_text) and _LOW_PRECISION_RE.search(mlir_text)):
        return [p for p in LOW_PRECISION if p.startswith("--arith-expand")]
    return LOW_PRECISION + (F8_ONLY if uses_f8(mlir_text) else [])


def pipeline_for(opt_level: int) -> Pipeline:
    if opt_level not in PIPELINES:
        raise ToolchainError(f"unsupported optimisation level -O{opt_level} (known: "
                             + ", ".join(f"-O{k}" for k in sorted(PIPELINES)) + ")")
    return PIPELINES[opt_level]


def passes_for(mlir_text: str, opt_level: int = 0, work_dir: str | Path | None = None) -> list[str]:
    """The mlir-opt flags for this module at this level, expanding the slots:
    @low-precision (by the module's float types) and @transforms (TRANSFORM_LIBRARY,
    written into `work_dir`, which levels with that slot need)."""
    pipeline = pipeline_for(opt_level)
    slots = {"@low-precision": lambda: low_precision_passes(mlir_text),
             "@transforms": lambda: _transform_slot(work_dir),
             "@outline": lambda: [f"--transform-interpreter=entry-point={OUTLINE_ENTRY}"],
             "@hoist": lambda: [f"--transform-interpreter=entry-point={HOIST_ENTRY}"],
             threads.THREAD_SLOT: lambda: threads.slot_passes(threads.THREAD_SLOT),
             threads.LOWER_SLOT: lambda: (threads.slot_passes(threads.LOWER_SLOT)
                                          if threads.THREAD_SLOT in pipeline.passes else [])}
    out: list[str] = []
    for p in pipeline.passes:
        out.extend(slots[p]() if p in slots else [p])
    return out


def _transform_slot(work_dir: str | Path | None) -> list[str]:
    if work_dir is None:
        raise ToolchainError("this pipeline runs a transform script: passes_for needs a work_dir")
    library = Path(work_dir) / "kina_transforms.mlir"
    library.write_text(TRANSFORM_LIBRARY)
    return transform_flags(library)


def segments(passes: list[str]) -> list[tuple[str | None, list[str]]]:
    """The pass list cut at each rewrite slot: [(slot run before the passes, passes)]."""
    out: list[tuple[str | None, list[str]]] = [(None, [])]
    for p in passes:
        if p in SLOTS:
            out.append((p, []))
        else:
            out[-1][1].append(p)
    return out


def pipeline_text(passes: list[str]) -> str:
    """mlir-opt flags -> a textual pass pipeline: `--name=opts` becomes `name{opts}`,
    func-only passes are nested in func.func(...)."""
    items = []
    for flag in passes:
        name, _, opts = flag.lstrip("-").partition("=")
        item = f"{name}{{{opts}}}" if opts else name
        items.append(f"func.func({item})" if name in FUNC_PASSES else item)
    return "builtin.module(" + ",".join(items) + ")"
