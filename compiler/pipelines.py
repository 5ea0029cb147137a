"""Pass pipelines: what happens between the emitted MLIR and an object file.

* The pass pipelines as data, one `Pipeline` per optimisation level (`PIPELINES`):
  mlir-opt flags in order, with slots ("@low-precision", "@transforms") expanded
  per module by `passes_for`, and `pipeline_text` for the in-process pass manager.
* The -O2 transform-dialect script (`TRANSFORM_LIBRARY`), with `tag_vectorizable` and
  `tag_transposes`, which mark the matmuls it vectorises and the transposes it tiles,
  and `rewrite_scatters`, which swaps the O(V * D * N) scatter_add generic for a loop
  over the N update rows (emit_ops.scatter_rows_function) before the pipeline runs.
* Multithreading of the big kernels: `tag_vectorizable` / `tag_parallel_generics` mark
  them, the script makes them scf.forall loops, and the "@threads" slot makes those
  OpenMP loops on LLVM's libomp (compiler/threads.py).
* Kernel outlining ("@outline", `OUTLINE_LIBRARY`): each loop nest becomes a function.
* The packed entry points `_kina_packed_kina_f(void **)` added to every library.

compiler/engine.py is the back end of -O1..-O3 that runs these through the MLIR Python
bindings (in a worker process), then LLVM's opt and llc (compiler/llvm_stage.py);
compiler/rewrites.py holds the Python IR rewrites of the slots.  compiler/toolchain.py drives them (and the external tools of
-O0) and re-exports the public names.  This module imports nothing from them:
`ToolchainError` and `StageFailed`, raised by every stage, are defined here.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from . import alloc_cache, threads


class ToolchainError(Exception):
    """A tool is missing or unusable; the message says how to fix it."""


class StageFailed(Exception):
    """A stage failed on its input: `tool` and its message, turned into diagnostics."""
    def __init__(self, tool: str, stderr: str):
        super().__init__(stderr)
        self.tool, self.stderr = tool, stderr


# A Kina source location as the emitted MLIR writes it (both back ends map errors through it).
INLINE_LOC_RE = re.compile(r'loc\("(?P<file>[^"]+)":(?P<line>\d+):(?P<col>\d+)\)')


# ---- the pass pipeline (data) ---------------------------------------------------------
# Each entry is one mlir-opt flag (pass name and options).  Order matters:
# - inline first, so the private generated functions ("kina_f.rev") disappear;
# - buffer-results-to-out-params with modify-public-functions makes every result a
#   caller-provided buffer: the library mallocs nothing per call (no leaks);
# - low-precision floats: math ops are extended to f32, arith ops emulated in f32;
#   bf16 conversions are expanded to integer ops; F8 conversions go through the
#   APFloat runtime (added only when the module mentions an F8 type, see `passes_for`).
# Not passes: rewrites of compiler/rewrites.py (IR rewrites no upstream pass does) run at
# these points of the list, between the passes before and after them.
COPY_SLOT = "@lower-copies"      # strided memref.copy -> loops (no runner-library call)
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
    "--convert-math-to-llvm",
    "--finalize-memref-to-llvm",
    "--convert-arith-to-llvm",
    "--convert-cf-to-llvm",
    "--convert-func-to-llvm",
    "--convert-index-to-llvm",
    "@openmp-to-llvm",
    "--reconcile-unrealized-casts",
    BF16_SLOT,
    "--canonicalize",
]
_BUFFERIZE = [
    "--one-shot-bufferize=bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map",
    "--buffer-results-to-out-params=hoist-static-allocs modify-public-functions",
]
O0_PASSES = [
    "--inline",
    *_BUFFERIZE,
    "--buffer-deallocation-pipeline",
    "--convert-bufferization-to-memref",
    COPY_SLOT,
    "--convert-linalg-to-loops",
    *_LOWER_TO_LLVM,
]
# Buffers up to this size become stack allocations at -O2 (no malloc/free per call).
# Small on purpose: every promoted buffer of a function is live in its frame at once.
STACK_BUFFER_BYTES = 4096
# More rewrite slots (compiler/rewrites.py), -O2 only:
UNSHARE_SLOT = "@unshare-empties"       # a tensor.empty of thousands of uses -> groups of clones
OUTLINE_TAG_SLOT = "@tag-outline"       # picks the loop nests "@outline" makes kernels
SCHEDULE_SLOT = "@dynamic-schedule"     # OpenMP loops schedule(dynamic)
SCOPE_SLOT = "@inline-alloca-scopes"    # the OpenMP bodies' memref.alloca_scope -> their bodies
O2_PASSES = [
    "--inline",
    "@transforms",
    "--canonicalize",
    "--cse",
    # CSE merges every `tensor.empty` of one type into one value that thousands of ops then
    # write into, and one-shot bufferization's conflict analysis of that value's uses is
    # quadratic (a 4,000-let function: 70 s of an 81 s build): see rewrites.unshare_empty_tensors.
    UNSHARE_SLOT,
    *_BUFFERIZE,
    f"--promote-buffers-to-stack=max-alloc-size-in-bytes={STACK_BUFFER_BYTES} max-rank-of-allocated-memref=8",
    "--buffer-deallocation-pipeline",
    "--convert-bufferization-to-memref",
    COPY_SLOT,
    "--convert-vector-to-scf",
    "--convert-linalg-to-loops",
    OUTLINE_TAG_SLOT,
    "@outline",
    # Multithreading: the script's scf.forall loops (big matmuls, big row-parallel generics)
    # become OpenMP parallel loops (omp.parallel + omp.wsloop: each thread takes a static
    # share of the blocks or rows), or serial loops without an OpenMP runtime; see
    # compiler/threads.py.  -O0 has no forall loops.
    "@threads",
    SCHEDULE_SLOT,
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
    # Heap buffers from the library's cache of freed blocks (compiler/alloc_cache.py).
    *[alloc_cache.FINALIZE_FLAG if p == "--finalize-memref-to-llvm" else p for p in _LOWER_TO_LLVM],
    "--canonicalize",
    "--cse",
]
# Transform-dialect script run at the "@transforms" slot: loop orders and vector code
# for LLVM (a linalg op's loops nest in the order of its dims).
# - matmul / batch_matmul tagged `kina.vectorize` (by `tag_vectorizable`: static shapes
#   whose M and N are multiples of the 8 x 32 tile): tiled to 8 x 32 x 1, vectorised,
#   lowered to vector.fma outer products; hoisting the C tile out of the k loop keeps
#   it in registers (16 AVX-512 registers), about 90% of one core's FMA peak at 512.
#   FMA rounds once where -O0 rounds twice: results agree to float tolerance.
# - other matmuls: (i, j, k) -> (i, k, j).  The innermost k loop reduced into one C
#   element and did not vectorise; the innermost j loop reads a row of B and updates a
#   row of C with unit stride, which LLVM's loop vectoriser turns into FMA vectors.
# - a rank-3 generic with two inputs and dims (parallel, parallel, reduction), i.e. the
#   scatter_along_axis lowering (and scatter_add where rewrite_scatters does not apply) out[v, d] += (idx[n] == v) ? upd[n, d] : 0:
#   (v, d, n) -> (v, n, d), so the innermost loop runs along the rows of out and upd.
#   Interchange only renests loops: each output element sums the same terms in order.
MATMUL_TILE = (8, 32)   # (M, N) of the register tile
VECTOR_ELEMENTS = {"f32", "f16", "bf16"}   # operand element types the vectorised matmul takes
# - the same matmuls, when they do at least PARALLEL_MIN_FLOPS, are first tiled into an
#   scf.forall over blocks of the result (tagged `kina.parallel = blocks` by
#   `tag_vectorizable`), which the OpenMP loop shares among the threads.  Blocks of up to 32 x 128 (one per batch item for batch_matmul): a block's
#   rows of A and columns of B stay in one core's L2 while it runs, where splitting M
#   alone made both cores stream all of B through L3 (K = 2048: 142 -> 216 GFLOP/s on
#   2 cores).  Smaller matmuls stay serial: a parallel loop costs a few microseconds.
PARALLEL_MIN_FLOPS = 4_000_000
PARALLEL_BLOCK = (32, 128)


def parallel_blocks(batch: bool, m: int, n: int) -> tuple[int, ...]:
    """The forall block of an (m x n) result that tiles into MATMUL_TILE: the largest
    divisors of m and n up to PARALLEL_BLOCK that are multiples of the register tile."""
    if batch:
        return (1, 0, 0)   # one batch item per iteration (0: the dim is not tiled)
    return tuple(math.gcd(x, limit) for x, limit in zip((m, n), PARALLEL_BLOCK))


# - a linalg.generic whose dim 0 is parallel and that touches at least PARALLEL_MIN_ELEMENTS
#   elements (its largest operand) becomes an scf.forall over dim 0 (tagged
#   `kina.parallel_rows` by `tag_parallel_generics`): elementwise ops, row-wise softmax /
#   log-softmax pieces and their VJPs over [B * T, V] run on every core.  Each row does
#   the same operations in the same order: results are bit-identical.
PARALLEL_MIN_ELEMENTS = 65536
PARALLEL_MATMUL_BLOCKS = ([("linalg.matmul", (bm, bn)) for bm in (8, 16, 32) for bn in (32, 64, 128)]
                          + [("linalg.batch_matmul", (1, 0, 0))])
# - a transpose that moves the input's innermost dim (it lands on output dim j < rank - 1)
#   read the input with a stride of a whole row per element: a [256, 2048] transpose took
#   1.5 ms, a cache (and TLB) miss per element.  `tag_transposes` tags those whose dims
#   j and rank - 1 are multiples of TRANSPOSE_BLOCK with their tile sizes (TRANSPOSE_BLOCK at
#   j and rank - 1, 1 elsewhere); the script tiles them, so each tile moves a block that
#   stays in L1, then vectorises the tile: a vector.transpose, lowered to AVX-512 shuffles
#   (`shuffle_16x16`), 1.5 ms -> 0.24 ms at [256, 2048].  Transposes only move values:
#   results are bit-identical.  One tiling per (rank, j) for ranks 2..TRANSPOSE_MAX_RANK.
TRANSPOSE_BLOCK = 16
TRANSPOSE_MAX_RANK = 6


def transpose_tiles(rank: int, j: int) -> tuple[int, ...]:
    return tuple(TRANSPOSE_BLOCK if d in (j, rank - 1) else 1 for d in range(rank))


TRANSPOSE_TILINGS = [transpose_tiles(r, j) for r in range(2, TRANSPOSE_MAX_RANK + 1) for j in range(r - 1)]
TRANSFORM_LIBRARY = """\
module attributes {transform.with_named_sequence} {
  transform.named_sequence @match_scatter(%op: !transform.any_op {transform.readonly}) -> !transform.any_op {
    transform.match.operation_name %op ["linalg.generic"] : !transform.any_op
    %m = transform.match.structured failures(propagate) %op : (!transform.any_op) -> !transform.any_op {
    ^bb0(%s: !transform.any_op):
      %rank = transform.match.structured.rank %s : (!transform.any_op) -> !transform.param<i64>
      %c3 = transform.param.constant 3 : i64 -> !transform.param<i64>
      transform.match.param.cmpi eq %rank, %c3 : !transform.param<i64>
      transform.match.structured.dim %s[0, 1] {parallel} : !transform.any_op
      transform.match.structured.dim %s[2] {reduction} : !transform.any_op
      %n = transform.match.structured.num_inputs %s : (!transform.any_op) -> !transform.param<i64>
      %c2 = transform.param.constant 2 : i64 -> !transform.param<i64>
      transform.match.param.cmpi eq %n, %c2 : !transform.param<i64>
      transform.match.structured.yield %s : !transform.any_op
    }
    transform.yield %m : !transform.any_op
  }
  transform.named_sequence @interchange_scatter(%op: !transform.any_op {transform.consumed}) {
    %i = transform.structured.interchange %op iterator_interchange = [0, 2, 1] : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
  transform.named_sequence @kina_o2(%root: !transform.any_op {transform.consumed}) {
@TRANSPOSES@
@PARALLEL_MATMULS@
    %prow = transform.structured.match ops{["linalg.generic"]} attributes{kina.parallel_rows} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %prow : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %g, %all = transform.structured.tile_using_forall %op tile_sizes [1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    }
    %vm = transform.structured.match ops{["linalg.matmul"]} attributes{kina.vectorize} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %vm : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %t, %l:3 = transform.structured.tile_using_for %op tile_sizes [8, 32, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %t : !transform.any_op
    }
    %vb = transform.structured.match ops{["linalg.batch_matmul"]} attributes{kina.vectorize} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %vb : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %t, %l:4 = transform.structured.tile_using_for %op tile_sizes [1, 8, 32, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %t : !transform.any_op
    }
    %f = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.vector.lower_transpose lowering_strategy = "shuffle_16x16"
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    %loops = transform.structured.match ops{["scf.for"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %loops : !transform.any_op {
    ^bb0(%lp: !transform.any_op):
      transform.loop.hoist_loop_invariant_subsets %lp : !transform.any_op
    }
    %mm = transform.structured.match ops{["linalg.matmul"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %mm : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %g = transform.structured.generalize %op : (!transform.any_op) -> !transform.any_op
      %i = transform.structured.interchange %g iterator_interchange = [0, 2, 1] : (!transform.any_op) -> !transform.any_op
    }
    %bmm = transform.structured.match ops{["linalg.batch_matmul"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %bmm : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %g = transform.structured.generalize %op : (!transform.any_op) -> !transform.any_op
      %i = transform.structured.interchange %g iterator_interchange = [0, 1, 3, 2] : (!transform.any_op) -> !transform.any_op
    }
    %r = transform.foreach_match in %root @match_scatter -> @interchange_scatter : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
"""
TRANSFORM_ENTRY = "kina_o2"
# Kernel outlining (the "@outline" slot, once the loops exist): every loop nest at the top
# level of a function body moves into an internal, never-inlined function of its own
# (`transform.loop.outline`; constants are cloned into it; "passthrough" and
# "llvm.linkage" are the attributes the LLVM lowering keeps).  LLVM's -O2 cost more than
# linear time in the size of one function (IndVarSimplify alone took 81% of `opt -O2` on
# the scaled train step: its scalar-evolution work grows with every loop of the function),
# so N kernels in one function took ~N^1.8 to optimise; N small functions take ~N.  The
# call per kernel costs nanoseconds.  The loops of an scf.forall's body are outlined too:
# the OpenMP lowering then outlines a body that only calls its kernel, and kernel merging
# (compiler/llvm_stage.py) compiles one copy of a matmul block shared by every function
# that has it (the scaled step: opt + llc 3.1 -> 1.9 s of CPU).  `rewrites.tag_outlined_loops` (a
# hook) picks the loops: every nest of at least OUTLINE_MIN_ITERATIONS iterations, and the
# small ones too in a function of more than OUTLINE_SMALL_LIMIT small nests.  A small nest
# left inline costs no call and LLVM may fuse it with its neighbours (StoryLM-0's step:
# 8.9 us with every nest outlined, 6.9 us without); a function of thousands of them is
# what made LLVM's time superlinear.
OUTLINE_ENTRY = "kina_outline"
OUTLINE_MIN_ITERATIONS = 4096
OUTLINE_SMALL_LIMIT = 256
OUTLINE_LIBRARY = """\
  transform.named_sequence @kina_outline(%root: !transform.any_op {transform.consumed}) {
    %loops = transform.structured.match ops{["scf.for"]} attributes{kina.outline} in %root : (!transform.any_op) -> !transform.any_op
    %fn, %call = transform.loop.outline %loops {func_name = "kina.kernel"} : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %private = transform.param.constant "private" -> !transform.any_param
    transform.annotate %fn "sym_visibility" = %private : !transform.any_op, !transform.any_param
    %internal = transform.param.constant #llvm.linkage<internal> -> !transform.any_param
    transform.annotate %fn "llvm.linkage" = %internal : !transform.any_op, !transform.any_param
    %noinline = transform.param.constant ["noinline"] -> !transform.any_param
    transform.annotate %fn "passthrough" = %noinline : !transform.any_op, !transform.any_param
    transform.yield
  }
"""


def _transpose_tiling(tiles: tuple[int, ...]) -> str:
    """Script lines tiling the transposes tagged `kina.transpose_tile = tiles`."""
    name = "%tt_" + "_".join(map(str, tiles))
    sizes = ", ".join(map(str, tiles))
    attr = f"array<i64: {sizes}>"
    n = len(tiles)
    loops = ", ".join(["!transform.any_op"] * (n + 1))
    return (f"    {name} = transform.structured.match ops{{[\"linalg.transpose\"]}} "
            f"attributes{{kina.transpose_tile = {attr}}} in %root : (!transform.any_op) -> !transform.any_op\n"
            f"    transform.foreach {name} : !transform.any_op {{\n"
            f"    ^bb0(%op: !transform.any_op):\n"
            f"      %t, %l:{n} = transform.structured.tile_using_for %op tile_sizes [{sizes}] : "
            f"(!transform.any_op) -> ({loops})\n"
            f"      transform.structured.vectorize %t : !transform.any_op\n"
            f"    }}")


def _parallel_matmul(op: str, blocks: tuple[int, ...]) -> str:
    """Script lines for the `op`s tagged `kina.parallel = blocks`: an scf.forall over
    blocks of the result (its fill fused in), each block register-tiled and vectorised
    like a serial matmul."""
    name = f"%par_{op[7:]}_" + "_".join(map(str, blocks))
    forall = ", ".join(map(str, blocks)) + ", 0"
    tiles = ", ".join(map(str, ([1] if op == "linalg.batch_matmul" else []) + [*MATMUL_TILE, 1]))
    n = len(blocks) + 1
    loops = ", ".join(["!transform.any_op"] * (n + 1))
    return (f"    {name} = transform.structured.match ops{{[\"{op}\"]}} "
            f"attributes{{kina.parallel = array<i64: {', '.join(map(str, blocks))}>}} in %root : "
            f"(!transform.any_op) -> !transform.any_op\n"
            f"    transform.foreach {name} : !transform.any_op {{\n"
            f"    ^bb0(%op: !transform.any_op):\n"
            f"      %fill = transform.get_producer_of_operand %op[2] : (!transform.any_op) -> !transform.any_op\n"
            f"      %b, %all = transform.structured.tile_using_forall %op tile_sizes [{forall}] : "
            f"(!transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
            f"      %ff, %fa = transform.structured.fuse_into_containing_op %fill into %all : "
            f"(!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
            f"      %t, %l:{n} = transform.structured.tile_using_for %b tile_sizes [{tiles}] : "
            f"(!transform.any_op) -> ({loops})\n"
            f"      transform.structured.vectorize %t : !transform.any_op\n"
            f"    }}")


TRANSFORM_LIBRARY = TRANSFORM_LIBRARY.replace(
    "  transform.named_sequence @kina_o2(", OUTLINE_LIBRARY + "  transform.named_sequence @kina_o2(").replace(
    "@TRANSPOSES@", "\n".join(_transpose_tiling(t) for t in TRANSPOSE_TILINGS)).replace(
    "@PARALLEL_MATMULS@", "\n".join(_parallel_matmul(op, b) for op, b in PARALLEL_MATMUL_BLOCKS))


def transform_flags(library: Path) -> list[str]:
    """The flags of the "@transforms" slot, with TRANSFORM_LIBRARY written at `library`."""
    return [f"--transform-preload-library=transform-library-paths={library}",
            f"--transform-interpreter=entry-point={TRANSFORM_ENTRY}"]


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


def uses_f8(mlir_text: str) -> bool:
    return bool(_F8_RE.search(mlir_text))


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
    slots = {"@low-precision": lambda: LOW_PRECISION + (F8_ONLY if uses_f8(mlir_text) else []),
             "@transforms": lambda: _transform_slot(work_dir),
             "@outline": lambda: [f"--transform-interpreter=entry-point={OUTLINE_ENTRY}"],
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
    from .rewrites import SLOTS
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


# ---- packed entry points ---------------------------------------------------------------
CIFACE_PREFIX = "_mlir_ciface_"
PACKED_PREFIX = "_kina_packed_"
_CIFACE_RE = re.compile(r"llvm\.func @(" + CIFACE_PREFIX + r"kina_[\w.$]*)\(([^)]*)\)")


def packed_symbol(ciface_symbol: str) -> str:
    """`_mlir_ciface_kina_f` -> `_kina_packed_kina_f` (the runtime derives it the same way)."""
    return PACKED_PREFIX + ciface_symbol[len(CIFACE_PREFIX):]


def packed_entry_point(ciface_symbol: str, n_args: int, declare: bool = False) -> str:
    """LLVM-dialect text of `void packed(void **a) { ciface(a[0], ..., a[n-1]); }`."""
    ptrs = ", ".join(["!llvm.ptr"] * n_args)
    lines = [f"llvm.func @{ciface_symbol}({ptrs})"] if declare else []
    lines.append(f"llvm.func @{packed_symbol(ciface_symbol)}(%args: !llvm.ptr) {{")
    for i in range(n_args):
        lines.append(f"  %p{i} = llvm.getelementptr %args[{i}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr")
        lines.append(f"  %a{i} = llvm.load %p{i} : !llvm.ptr -> !llvm.ptr")
    args = ", ".join(f"%a{i}" for i in range(n_args))
    lines += [f"  llvm.call @{ciface_symbol}({args}) : ({ptrs}) -> ()", "  llvm.return", "}"]
    return "\n".join(lines)


def add_packed_entry_points(llvm_mlir_text: str) -> str:
    """Append a packed entry point per exported function to a lowered (LLVM dialect) module."""
    wrappers = [packed_entry_point(m[1], m[2].count("!llvm.ptr"))
                for m in _CIFACE_RE.finditer(llvm_mlir_text)]
    body = llvm_mlir_text.rstrip()
    if not wrappers or not body.endswith("}"):
        return llvm_mlir_text
    return body[:-1] + "\n".join(wrappers) + "\n}\n"


def _dim0_extent(ir, op) -> int | None:
    """The trip count of a linalg op's loop d0: the size of an operand dim indexed by d0."""
    for m, v in zip(ir.ArrayAttr(op.attributes["indexing_maps"]), op.operands):
        t = v.type
        if not isinstance(t, ir.RankedTensorType):
            continue
        for k, e in enumerate(ir.AffineMapAttr(m).value.results):
            if isinstance(e, ir.AffineDimExpr) and e.position == 0:
                return ir.RankedTensorType(t).shape[k]
    return None


def tag_parallel_generics(ir, module) -> int:
    """Mark with `kina.parallel_rows` every static linalg.generic whose loop d0 is parallel,
    runs at least twice, and whose largest operand has PARALLEL_MIN_ELEMENTS elements
    (TRANSFORM_LIBRARY makes those scf.forall loops); returns the count."""
    tagged = 0

    def visit(op):
        nonlocal tagged
        if op.name != "linalg.generic" or len(op.results) < 1:
            return ir.WalkResult.ADVANCE
        iterators = ir.ArrayAttr(op.attributes["iterator_types"])
        if len(iterators) == 0:          # a rank-0 generic has no loop to split
            return ir.WalkResult.ADVANCE
        first = str(iterators[0])
        types = [ir.RankedTensorType(v.type) for v in [*op.operands, *op.results]
                 if isinstance(v.type, ir.RankedTensorType)]
        if "parallel" not in first or not all(t.has_static_shape for t in types):
            return ir.WalkResult.ADVANCE
        size = max(math.prod(t.shape) for t in types)
        extent = _dim0_extent(ir, op)
        if size >= PARALLEL_MIN_ELEMENTS and extent is not None and extent >= 2:
            op.attributes["kina.parallel_rows"] = ir.UnitAttr.get()
            tagged += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return tagged


def _filled(op) -> bool:
    """Whether the matmul's accumulator is a linalg.fill (the script fuses it into the forall)."""
    owner = op.operands[2].owner
    return getattr(owner, "name", None) == "linalg.fill"


def _matmul_flops(ir, op) -> int:
    a = ir.RankedTensorType(op.operands[0].type).shape
    c = ir.RankedTensorType(op.results[0].type).shape
    n = 1
    for d in c:
        n *= d
    return 2 * n * a[-1]


def tag_vectorizable(ir, module) -> int:
    """Mark with `kina.vectorize` every f32 matmul / batch_matmul whose result tiles
    exactly into MATMUL_TILE (TRANSFORM_LIBRARY vectorises those); returns the count."""
    tm, tn = MATMUL_TILE
    tagged = 0

    def visit(op):
        nonlocal tagged
        if op.name in ("linalg.matmul", "linalg.batch_matmul") and len(op.results) == 1:
            t = ir.RankedTensorType(op.results[0].type)
            # F8 operands excluded: an F8 matmul accumulates in f32 too, but vectors of F8 do
            # not lower (the APFloat conversions are scalar), so it stays a loop nest.
            inputs = {str(ir.RankedTensorType(v.type).element_type) for v in op.operands[:2]}
            if (t.has_static_shape and str(t.element_type) == "f32" and inputs <= VECTOR_ELEMENTS
                    and t.shape[-2] % tm == 0 and t.shape[-1] % tn == 0):
                op.attributes["kina.vectorize"] = ir.UnitAttr.get()
                if _matmul_flops(ir, op) >= PARALLEL_MIN_FLOPS and _filled(op):
                    blocks = parallel_blocks(op.name == "linalg.batch_matmul", *t.shape[-2:])
                    op.attributes["kina.parallel"] = ir.DenseI64ArrayAttr.get(list(blocks))
                tagged += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return tagged


# ---- -O2 rewrite of the scatter generic ------------------------------------------------------
# The scatter_add lowering of seed 000 §7.3 (compiler/emit_ops.py `lower_scatter_add`), as
# the emitter writes it at every level: maps and iterators of the (v, d, n) generic, and
# the ops of its body in order (arith.extf only for F16/BF16/F8 updates).
SCATTER_MAPS = ["affine_map<(d0, d1, d2) -> (d2)>", "affine_map<(d0, d1, d2) -> (d2, d1)>",
                "affine_map<(d0, d1, d2) -> (d0, d1)>"]
SCATTER_ITERATORS = ["parallel", "parallel", "reduction"]
SCATTER_BODY = ["arith.index_cast", "linalg.index", "arith.cmpi", "arith.extf", "arith.constant",
                "arith.select", "arith.addf", "linalg.yield"]


def _scatter_shape(ir, op):
    """(n, d, v, updates' element type, accumulator element type) if `op` is the §7.3
    scatter generic, else None."""
    if op.name != "linalg.generic" or len(op.operands) != 3 or len(op.results) != 1:
        return None
    maps = [str(m) for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    its = [str(i).rsplit("<", 1)[-1].rstrip(">") for i in ir.ArrayAttr(op.attributes["iterator_types"])]
    if maps != SCATTER_MAPS or its != SCATTER_ITERATORS:
        return None
    body = [o.name for o in op.regions[0].blocks[0].operations]
    if [b for b in SCATTER_BODY if b in body] != body or "arith.addf" not in body:
        return None
    index = next(o for o in op.regions[0].blocks[0].operations if o.name == "linalg.index")
    if ir.IntegerAttr(index.attributes["dim"]).value != 0:   # the hit compares idx[n] with v
        return None
    ti, tu, to = (ir.RankedTensorType(v.type) for v in op.operands)
    if str(ti.element_type) != "i64" or not all(t.has_static_shape for t in (ti, tu, to)):
        return None
    return ti.shape[0], tu.shape[1], to.shape[0], str(tu.element_type), str(to.element_type)


def rewrite_scatters(ir, module) -> int:
    """Replace every §7.3 scatter generic by a call to its O(N * D) row-update form
    (emit_ops.scatter_rows_function, a private function that --inline then inlines);
    returns the count.  -O0 keeps the generic: its FileCheck tests pin that form."""
    from .emit_ops import scatter_rows_function
    found = []

    def visit(op):
        shape = _scatter_shape(ir, op)
        if shape is not None:
            found.append((op, shape))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    helpers: set[str] = set()
    for op, shape in found:
        name = "kina.scatter_rows." + "_".join(str(x) for x in shape)
        if name not in helpers:
            text = scatter_rows_function(f'"{name}"', *shape)
            parsed = ir.Module.parse(text)   # must outlive the detach: it owns the op until then
            module.body.append(parsed.body.operations[0].detach_from_parent())
            helpers.add(name)
        with ir.InsertionPoint(op), op.location:
            call = ir.Operation.create("func.call", results=[op.results[0].type], operands=list(op.operands),
                                       attributes={"callee": ir.FlatSymbolRefAttr.get(name)})
        op.results[0].replace_all_uses_with(call.results[0])
        op.erase()
    return len(found)


def tag_transposes(ir, module) -> int:
    """Tag with `kina.transpose_tile` every static transpose that moves the input's
    innermost dim onto output dim j < rank - 1 and whose dims j and rank - 1 are multiples
    of TRANSPOSE_BLOCK (TRANSFORM_LIBRARY tiles those); returns the count."""
    tagged = 0

    def visit(op):
        nonlocal tagged
        if op.name == "linalg.transpose":
            perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
            shape = ir.RankedTensorType(op.results[0].type).shape if len(op.results) == 1 else None
            r = len(perm)
            j = perm.index(r - 1) if perm else 0
            if (shape and 2 <= r <= TRANSPOSE_MAX_RANK and j != r - 1
                    and shape[j] % TRANSPOSE_BLOCK == 0 and shape[-1] % TRANSPOSE_BLOCK == 0):
                op.attributes["kina.transpose_tile"] = ir.DenseI64ArrayAttr.get(list(transpose_tiles(r, j)))
                tagged += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return tagged
