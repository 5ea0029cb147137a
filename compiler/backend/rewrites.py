"""IR rewrites inside the pass pipelines that no upstream pass does, one row per slot of
compiler/backend/pipelines.py (`SLOTS`).  Each runs on a module through the MLIR Python bindings:
in the -O2 worker process between its passes, and between two mlir-opt processes in the
"tools" back end (in a worker process too: the bindings may abort), only when a cheap
look at the text says the module needs it.

- "@distinct-results" (between one-shot bufferization and buffer-results-to-out-params):
  a buffer returned twice gets a copy for each later use (`distinct_results` says why).
- "@lower-copies" (after bufferization): one-shot bufferization copies a buffer where an
  in-place write would clobber a value still needed, and those copies may go between
  strided subviews.  finalize-memref-to-llvm lowers a memref.copy whose operands are both
  contiguous to llvm.memcpy, and any other to a call of `memrefCopy` from the MLIR runner
  library, which a Kina library does not link (the -O2 JIT aborted on "Symbols not found:
  [ memrefCopy ]").  Those copies become linalg.copy, which convert-linalg-to-loops
  lowers to plain loops.
- "@vector-copies" (-O2, just before "@lower-copies"): compiler/backend/row_copies.py: a
  strided copy of contiguous rows (a packed panel or strip of B) becomes vector loads and
  stores, and the fill of a buffer such a copy then overwrites whole is dropped.
- "@zero-tiles" (-O2, right before "@vector-copies"): compiler/backend/zero_tiles.py: a
  register tile whose first read of its block would read the block's fill starts from the
  fill's value in registers (or reads the source of the copy that initialised the block),
  and the fill (copy), which the tiles overwrite whole, is dropped.
- "@bf16-as-i16" (in the LLVM dialect): bf16 values are only ever loaded, stored and
  bit-cast (arith-expand turns bf16 conversions into integer code), but LLVM's instcombine
  rewrites `store (bitcast (select i1, i16 a, i16 b))` into a select of bfloat values, and
  its vectorisers then make vectors of them.  The x86 back end of the bindings' LLVM cannot
  legalise those (an assertion in SelectionDAG, killing the -O2 build of a BF16 matmul
  against a transposed operand), and one without native bf16 instructions promotes them
  through a `__truncsfbf2` call the JIT cannot resolve.  Loads and stores of bf16 become
  i16 loads and stores, the bit-casts cancel (canonicalize), and no bf16 value is left.
- -O2's build-time and threading rewrites: "@unshare-empties" (bufferization's analysis
  was quadratic in the uses of one tensor.empty), "@tag-outline" (which loop nests become
  kernels), "@merge-kernels" (llvm_stage.dedupe_kernels right after outlining: a train
  step's kernels repeat the forward's, and the lowering passes then see each distinct one
  once), "@parallel-if" (compiler/backend/parallel_if.py: a dynamic export's parallel loops
  run on threads only when the call's sizes make them big enough), "@inline-alloca-scopes"
  (the OpenMP bodies' scopes, which convert-scf-to-cf broke), "@tag-for-script"
  (compiler/backend/parallelize.py: what the transform script vectorises, threads and tiles) and
  "@fuse-fills" (block_fills.fuse_fills_into_foralls: each parallel matmul block zeroes
  its own part of the result).
- not a slot: `rewrite_scatters`, which compiler/backend/engine.py runs on the emitted -O2 module
  before the pipeline, swaps the O(V * D * N) scatter_add generic for a loop over the N
  update rows (emit_ops.scatter_rows_function; static or dynamic sizes).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compiler.backend import parallel_if, shared_products
from compiler.backend.accumulate import SCATTER_TAG, forward_scatter_results
from compiler.backend.bindings import const_index, walk_ops
from compiler.backend.block_fills import fuse_fills_into_foralls
from compiler.backend.llvm_stage import KERNEL_PREFIX, dedupe_kernels
from compiler.backend.parallelize import tag_for_script
from compiler.backend.row_copies import SLOT as ROW_COPIES_SLOT
from compiler.backend.row_copies import contiguous, vectorize_row_copies
from compiler.backend.transform_library import OUTLINE_MIN_ITERATIONS, OUTLINE_SMALL_LIMIT
from compiler.backend.zero_tiles import SLOT as ZERO_TILES_SLOT
from compiler.backend.zero_tiles import start_tiles_from_fills

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module, Operation, OpView, Type, WalkResult

# `mlir_ir` (a ModuleType) is the MLIR Python bindings' `ir` module (engine.engine_module());
# the bindings' classes below (Module, OpView, Type, ...) are names mypy cannot look into: the
# wheel's `mlir` package has no py.typed marker.


@dataclass(frozen=True)
class Rewrite:
    run: Callable[..., int]                  # run(mlir_ir, module) -> number of ops rewritten
    needed: Callable[[str], bool]            # a cheap test on the module's text at the slot
    maybe: Callable[[str], bool] = lambda emitted: True   # the same test on the emitted text
    tags_only: bool = False                  # it only sets discardable attributes (kina.*)


# ---- strided copies ------------------------------------------------------------------------
def lower_strided_copies(mlir_ir: ModuleType, module: Module) -> int:
    """memref.copy between buffers that are not both contiguous -> linalg.copy; the count."""
    from mlir.dialects import linalg
    found = walk_ops(mlir_ir, module, lambda op: op.name == "memref.copy"
                  and not all(contiguous(mlir_ir, v.type) for v in op.operands))
    for op in found:
        src, dst = op.operands
        with mlir_ir.InsertionPoint(op), op.location:
            linalg.copy(src, outs=[dst])
        op.erase()
    return len(found)


# ---- results returned twice ----------------------------------------------------------------
_RETURN_RE = re.compile(r"^\s*(?:func\.)?return\s+(%[^:\n]*?)\s*:", re.M)


def returns_a_value_twice(text: str) -> bool:
    """Whether some func.return of the module text names one value twice."""
    for m in _RETURN_RE.finditer(text):
        names = [v.strip() for v in m.group(1).split(",")]
        if len(set(names)) < len(names):
            return True
    return False


def distinct_results(mlir_ir: ModuleType, module: Module) -> int:
    """A buffer a func.return names twice: each later use becomes a copy in a new buffer;
    the count.  buffer-results-to-out-params (hoist-static-allocs) crashes on a buffer
    returned twice (mlir-opt segfaulted, or ran for minutes).  The emitter copies a value
    it returns twice (emit_mlir._distinct_results), but folding makes new twins: the
    inliner's canonicalisation folds an identity reshape, broadcast or full slice into its
    operand, CSE merges two equal lets, and bufferization folds a same-type cast."""
    from mlir.dialects import memref
    count = 0
    for ret in walk_ops(mlir_ir, module, lambda op: op.name == "func.return"):
        seen: list[Any] = []
        for i, v in enumerate(list(ret.operands)):
            if isinstance(v.type, mlir_ir.MemRefType) and any(v == w for w in seen):
                with mlir_ir.InsertionPoint(ret), ret.location:
                    fresh = memref.alloc(v.type, _dynamic_sizes(mlir_ir, v), [])
                    memref.copy(v, fresh)
                ret.operands[i] = fresh
                count += 1
            seen.append(v)
    return count


def _dynamic_sizes(mlir_ir: ModuleType, buffer: Any) -> list[Any]:
    """The sizes of `buffer`'s dynamic dims (memref.dim ops at the insertion point), which an
    alloc of its type takes as operands: a dynamic export's gradients can be returned twice
    too (`d[A](x1, x2, x4)` of `x1 - x2 - x4`: the cotangents of x2 and x4 are one value)."""
    from mlir.dialects import arith, memref
    t = mlir_ir.MemRefType(buffer.type)
    index = mlir_ir.IndexType.get()
    return [memref.dim(buffer, arith.constant(index, d)) for d in range(t.rank) if t.is_dynamic_dim(d)]


# ---- bf16 memory as i16 -----------------------------------------------------------------------
def _as_i16(mlir_ir: ModuleType, t: Type) -> Type | None:
    """bf16 -> i16, vector<.. x bf16> -> vector<.. x i16>; None for any other type."""
    i16 = mlir_ir.IntegerType.get_signless(16)
    if isinstance(t, mlir_ir.BF16Type):
        return i16
    if isinstance(t, mlir_ir.VectorType) and isinstance(t.element_type, mlir_ir.BF16Type):
        return mlir_ir.VectorType.get(t.shape, i16, scalable=t.scalable_dims, loc=mlir_ir.Location.unknown())
    return None


def _attrs(op: OpView) -> dict[str, Any]:
    named = (op.attributes[i] for i in range(len(op.attributes)))   # by index: NamedAttribute
    return {a.name: a.attr for a in named}


def bf16_memory_as_i16(mlir_ir: ModuleType, module: Module) -> int:
    """Every llvm.load / llvm.store of bf16 (or vectors of it) becomes one of i16 with an
    llvm.bitcast next to it, and so does every bf16 parameter of a function defined here
    (an outlined kernel given a bf16 scalar) at its calls; the caller's canonicalize
    folds the bit-cast pairs."""
    count = _bf16_params_as_i16(mlir_ir, module)
    loads = walk_ops(mlir_ir, module, lambda op: op.name == "llvm.load" and _as_i16(mlir_ir, op.results[0].type) is not None)
    stores = walk_ops(mlir_ir, module, lambda op: op.name == "llvm.store" and _as_i16(mlir_ir, op.operands[0].type) is not None)
    for op in loads:
        old = op.results[0]
        with mlir_ir.InsertionPoint(op), op.location:
            new = mlir_ir.Operation.create("llvm.load", results=[_as_i16(mlir_ir, old.type)], operands=list(op.operands),
                                      attributes=_attrs(op))
            cast = mlir_ir.Operation.create("llvm.bitcast", results=[old.type], operands=[new.results[0]])
        old.replace_all_uses_with(cast.results[0])
        op.erase()
    for op in stores:
        value, ptr = op.operands[0], op.operands[1]
        with mlir_ir.InsertionPoint(op), op.location:
            cast = mlir_ir.Operation.create("llvm.bitcast", results=[_as_i16(mlir_ir, value.type)], operands=[value])
            mlir_ir.Operation.create("llvm.store", results=[], operands=[cast.results[0], ptr], attributes=_attrs(op))
        op.erase()
    return count + len(loads) + len(stores)


def _bf16_params_as_i16(mlir_ir: ModuleType, module: Module) -> int:
    """bf16 parameters of the functions defined in the module -> i16 (a bit-cast back at the
    entry, one to i16 before each call): a bf16 passed by value is promoted through
    `__truncsfbf2` on a target without bf16 registers (a BF16 value times a size number,
    `1.0 / (A + 1)`, captured by an outlined -O2 kernel)."""
    funcs = {str(op.attributes["sym_name"]).strip('"'): op for op in walk_ops(
        mlir_ir, module, lambda op: op.name == "llvm.func" and len(op.regions[0].blocks) > 0
        and "bf16" in str(op.attributes["function_type"]))}
    count = 0
    for f in funcs.values():
        entry = f.regions[0].blocks[0]
        for arg in entry.arguments:
            new_type = _as_i16(mlir_ir, arg.type)
            if new_type is None:
                continue
            old_type = arg.type
            arg.set_type(new_type)
            with mlir_ir.InsertionPoint.at_block_begin(entry), f.location:
                cast = mlir_ir.Operation.create("llvm.bitcast", results=[old_type], operands=[arg])
            arg.replace_all_uses_except(cast.results[0], cast)
            count += 1
        ft = str(f.attributes["function_type"]).replace("bf16", "i16")
        f.attributes["function_type"] = mlir_ir.TypeAttr.get(mlir_ir.Type.parse(ft))
    calls = walk_ops(mlir_ir, module, lambda op: op.name == "llvm.call" and "callee" in op.attributes
                     and str(op.attributes["callee"]).lstrip("@").strip('"') in funcs)
    for call in calls:
        for i, value in enumerate(list(call.operands)):
            new_type = _as_i16(mlir_ir, value.type)
            if new_type is not None:
                with mlir_ir.InsertionPoint(call), call.location:
                    cast = mlir_ir.Operation.create("llvm.bitcast", results=[new_type], operands=[value])
                call.operands[i] = cast.results[0]
    return count


# ---- the -O2 build's own rewrites (compiler/backend/pipelines.py says where each runs) ------------
# Uses of one tensor.empty that keep sharing it.  Sharing is what lets bufferization write
# into one buffer again once its last reader is done (the scaled step ran 31 ms with shared
# empties, 46 ms with one per use); its analysis costs ~(uses)^2, so groups stay small.
EMPTY_GROUP = 64


def unshare_empty_tensors(mlir_ir: ModuleType, module: Module) -> int:
    """Split the uses of every tensor.empty with more than EMPTY_GROUP uses into groups
    of EMPTY_GROUP, each with its own clone (static shapes: no operands; the clones sit
    with the original, which dominates every use); returns how many clones were made."""
    empties = []

    def visit(op: OpView) -> WalkResult:
        if op.name == "tensor.empty" and len(op.operands) == 0:
            empties.append(op)
        return mlir_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    made = 0
    for e in empties:
        uses = [(u.owner, u.operand_number) for u in e.results[0].uses]
        for start in range(EMPTY_GROUP, len(uses), EMPTY_GROUP):
            clone = e.clone(ip=mlir_ir.InsertionPoint(e))
            for owner, number in uses[start:start + EMPTY_GROUP]:
                owner.operands[number] = clone.results[0]
            made += 1
    return made


def _trip_count(mlir_ir: ModuleType, loop: Operation) -> int:
    """Constant trip count of an scf.for (unknown bounds count as large)."""
    lb, ub, step = (const_index(mlir_ir, v) for v in list(loop.operands)[:3])
    if lb is None or ub is None or step is None:   # a bound that is not an arith.constant
        return 1 << 30
    return max(0, -(-(ub - lb) // step)) if step > 0 else 1 << 30


def _iterations(mlir_ir: ModuleType, op: Operation) -> int:
    """Innermost iterations of a loop nest: trips x the iterations of the loops in its body."""
    inner = 0
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                if child.operation.name == "scf.for":
                    inner += _iterations(mlir_ir, child.operation)
    return _trip_count(mlir_ir, op) * max(inner, 1)


def tag_outlined_loops(mlir_ir: ModuleType, module: Module) -> int:
    """Tag `kina.outline` on the top-level scf.for nests of each function and forall body
    that "@outline" moves into kernels (see transform_library.OUTLINE_MIN_ITERATIONS); returns the count."""
    tagged = 0
    bodies = []

    def visit(op: OpView) -> WalkResult:
        if op.name in ("func.func", "scf.forall") and op.regions and op.regions[0].blocks:
            bodies.append(op)
        return mlir_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for body in bodies:
        loops = [o.operation for o in body.regions[0].blocks[0].operations if o.operation.name == "scf.for"]
        sizes = [_iterations(mlir_ir, lp) for lp in loops]
        small = sum(1 for n in sizes if n < OUTLINE_MIN_ITERATIONS)
        for lp, n in zip(loops, sizes):
            if n >= OUTLINE_MIN_ITERATIONS or small > OUTLINE_SMALL_LIMIT:
                lp.attributes["kina.outline"] = mlir_ir.UnitAttr.get()
                tagged += 1
    return tagged


def tag_innermost_loops(mlir_ir: ModuleType, module: Module) -> int:
    """Tag `kina.hoist` on every scf.for with no scf.for nested in it (what the "@hoist"
    script visits: transform_library.HOIST_LIBRARY says why); returns the count."""
    loops = walk_ops(mlir_ir, module, lambda op: op.name == "scf.for")
    outer = {_enclosing_loop(lp) for lp in loops}
    inner = [lp for lp in loops if lp.operation not in outer]
    for lp in inner:
        lp.attributes["kina.hoist"] = mlir_ir.UnitAttr.get()
    return len(inner)


def _enclosing_loop(op: OpView) -> object:
    """The nearest scf.for around `op` inside its function, or None."""
    parent = op.operation.parent
    while parent is not None and parent.name not in ("scf.for", "func.func"):
        parent = parent.parent
    return parent if parent is not None and parent.name == "scf.for" else None


def _scope_allocates(mlir_ir: ModuleType, scope: OpView) -> bool:
    """Whether a memref.alloca sits anywhere inside `scope` (conservative: nested too)."""
    found = []

    def visit(op: OpView) -> WalkResult:
        if op.name == "memref.alloca":
            found.append(op)
            return mlir_ir.WalkResult.INTERRUPT
        return mlir_ir.WalkResult.ADVANCE

    for block in scope.regions[0].blocks:
        for op in block.operations:
            op.operation.walk(visit)
    return bool(found)


def inline_alloca_scopes(mlir_ir: ModuleType, module: Module) -> int:
    """Replace every memref.alloca_scope by its body (innermost first); returns the count.

    convert-scf-to-openmp puts each parallel loop's body in an alloca_scope, whose region
    must stay one block.  MLIR's canonicalizer inlines a scope only when nothing in it may
    allocate, and a func.call (an outlined kernel) counts as maybe allocating, so a body
    with a kernel call and a loop left inline (the fill of a batch_matmul block, below
    OUTLINE_MIN_ITERATIONS) kept its scope, and convert-scf-to-cf split the loop into
    blocks inside it: an invalid module.  A body without memref.alloca is inlined as is
    (its callees free their own stack frames); one with allocations is bracketed by
    llvm.intr.stacksave / stackrestore, which is what lowering the scope would emit, so
    each iteration still frees its stack buffers."""
    # post-order: inner scopes before the scopes holding them
    scopes = walk_ops(mlir_ir, module, lambda op: op.name == "memref.alloca_scope")
    ptr = mlir_ir.Type.parse("!llvm.ptr")
    for scope in scopes:
        saved = None
        if _scope_allocates(mlir_ir, scope):
            with mlir_ir.InsertionPoint(scope), scope.location:
                saved = mlir_ir.Operation.create("llvm.intr.stacksave", results=[ptr])
        block = scope.regions[0].blocks[0]
        *body, ret = list(block.operations)
        for op in body:
            op.operation.move_before(scope)
        if saved is not None:
            with mlir_ir.InsertionPoint(scope), scope.location:
                mlir_ir.Operation.create("llvm.intr.stackrestore", operands=[saved.results[0]])
        for result, value in zip(scope.results, ret.operands):
            result.replace_all_uses_with(value)
        scope.erase()
    return len(scopes)


# ---- -O2 rewrite of the scatter generic ------------------------------------------------------
# The host lowering of scatter_add (compiler/backend/emit/ops.py `lower_scatter_add`), as
# the emitter writes it at every level: maps and iterators of the (v, d, n) generic, and
# the ops of its body in order (arith.extf only for F16/BF16/F8 updates).
SCATTER_MAPS = ["affine_map<(d0, d1, d2) -> (d2)>", "affine_map<(d0, d1, d2) -> (d2, d1)>",
                "affine_map<(d0, d1, d2) -> (d0, d1)>"]
SCATTER_ITERATORS = ["parallel", "parallel", "reduction"]
# n, d, v (None: a dynamic export's `?`), updates' and accumulator's element types
ScatterShape = tuple[int | None, int | None, int | None, str, str]
SCATTER_BODY = ["arith.index_cast", "linalg.index", "arith.cmpi", "arith.extf", "arith.constant",
                "arith.select", "arith.addf", "linalg.yield"]


def _scatter_shape(mlir_ir: ModuleType, op: OpView) -> ScatterShape | None:
    """(n, d, v, updates' element type, accumulator element type) if `op` is that
    scatter generic, else None."""
    if op.name != "linalg.generic" or len(op.operands) != 3 or len(op.results) != 1:
        return None
    maps = [str(m) for m in mlir_ir.ArrayAttr(op.attributes["indexing_maps"])]
    its = [str(i).rsplit("<", 1)[-1].rstrip(">") for i in mlir_ir.ArrayAttr(op.attributes["iterator_types"])]
    if maps != SCATTER_MAPS or its != SCATTER_ITERATORS:
        return None
    body = [o.name for o in op.regions[0].blocks[0].operations]
    if [b for b in SCATTER_BODY if b in body] != body or "arith.addf" not in body:
        return None
    index = next(o for o in op.regions[0].blocks[0].operations if o.name == "linalg.index")
    if mlir_ir.IntegerAttr(index.attributes["dim"]).value != 0:   # the hit compares idx[n] with v
        return None
    ti, tu, to = (mlir_ir.RankedTensorType(v.type) for v in op.operands)
    if str(ti.element_type) != "i64":
        return None

    def size(t: object, d: int) -> int | None:
        return None if t.is_dynamic_dim(d) else int(t.shape[d])   # type: ignore[attr-defined]
    return size(ti, 0), size(tu, 1), size(to, 0), str(tu.element_type), str(to.element_type)


def rewrite_scatters(mlir_ir: ModuleType, module: Module) -> int:
    """Replace every such scatter generic by a call to its O(N * D) row-update form
    (emit_ops.scatter_rows_function, a private function that --inline then inlines);
    returns the count.  -O0 keeps the generic: its FileCheck tests pin that form."""
    found = []

    def visit(op: OpView) -> WalkResult:
        shape = _scatter_shape(mlir_ir, op)
        if shape is not None:
            found.append((op, shape))
        return mlir_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if not found:
        return 0
    # The emitter's modules (0.05 s of the worker's start) only for a module with a scatter.
    from compiler.backend.emit.ops import scatter_rows_function

    helpers: set[str] = set()
    for op, shape in found:
        name = "kina.scatter_rows." + "_".join("d" if x is None else str(x) for x in shape)
        if name not in helpers:
            text = scatter_rows_function(f'"{name}"', *shape)
            parsed = mlir_ir.Module.parse(text)   # must outlive the detach: it owns the op until then
            module.body.append(parsed.body.operations[0].detach_from_parent())
            helpers.add(name)
        with mlir_ir.InsertionPoint(op), op.location:
            call = mlir_ir.Operation.create("func.call", results=[op.results[0].type], operands=list(op.operands),
                                            attributes={"callee": mlir_ir.FlatSymbolRefAttr.get(name)})
        op.results[0].replace_all_uses_with(call.results[0])
        op.erase()
    return len(found)


def _returned_accumulators(mlir_ir: ModuleType, module: Module) -> int:
    """"@product-results": a shared product's function returns its accumulator argument, and a
    scatter loop's result is its init buffer (both: so that no copy is made of them)."""
    return shared_products.return_accumulators(mlir_ir, module) + forward_scatter_results(mlir_ir, module)


SLOTS: dict[str, Rewrite] = {
    "@distinct-results": Rewrite(distinct_results, returns_a_value_twice),
    ROW_COPIES_SLOT: Rewrite(vectorize_row_copies, lambda text: "memref.copy" in text),
    ZERO_TILES_SLOT: Rewrite(start_tiles_from_fills, lambda text: "vector.transfer_read" in text and (
        "linalg.fill" in text or "memref.copy" in text)),
    "@lower-copies": Rewrite(lower_strided_copies, lambda text: "memref.copy" in text),
    "@bf16-as-i16": Rewrite(bf16_memory_as_i16, lambda text: "bf16" in text, lambda emitted: "bf16" in emitted),
    "@unshare-empties": Rewrite(unshare_empty_tensors, lambda text: "tensor.empty" in text),
    "@tag-outline": Rewrite(tag_outlined_loops, lambda text: "scf.for" in text, tags_only=True),
    "@tag-hoist": Rewrite(tag_innermost_loops, lambda text: "scf.for" in text, tags_only=True),
    parallel_if.SLOT: Rewrite(parallel_if.apply, lambda text: parallel_if.MARKER in text),
    "@inline-alloca-scopes": Rewrite(inline_alloca_scopes, lambda text: "memref.alloca_scope" in text),
    "@merge-kernels": Rewrite(dedupe_kernels, lambda text: KERNEL_PREFIX in text),
    "@tag-for-script": Rewrite(tag_for_script, lambda text: "linalg." in text),
    "@product-results": Rewrite(_returned_accumulators,
                                lambda text: shared_products.PREFIX in text or SCATTER_TAG in text),
    "@fuse-fills": Rewrite(fuse_fills_into_foralls,
                           lambda text: "scf.forall" in text and ("linalg.fill" in text or "alloc_tensor" in text)),
}
