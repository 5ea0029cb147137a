"""Tagging for the -O2 transform script's transposes and innermost reductions (the matmuls and
row-parallel generics are compiler/backend/parallelize.py's, whose `tag_for_script` runs
these too): which transposes it tiles (`kina.transpose_tile`) and threads
(`kina.parallel_transpose`), which reductions it vectorises (`kina.reduce_inner`, a dynamic
export's `kina.reduce_peeled`).  The tags are attributes set through the MLIR Python
bindings (`mlir_ir`, the bindings' `ir` module).

Entry points: `tag_transposes(mlir_ir, module)`, `tag_inner_reductions(mlir_ir, module)`;
each returns the count of ops it tagged.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from compiler.backend import parallel_if
from compiler.backend.transform_dynamic import DYNAMIC_TRANSPOSE_MAX_RANK
from compiler.backend.transform_library import (
    REDUCE_LANES,
    REDUCE_MAX_RANK,
    TRANSPOSE_BLOCK,
    TRANSPOSE_MAX_RANK,
    reduce_tiles,
    transpose_tiles,
)

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module, OpView, WalkResult


# - a transpose of at least PARALLEL_TRANSPOSE_MIN elements whose output dim 0 has at least
#   two blocks is tagged `kina.parallel_transpose` too: the script splits dim 0 among the
#   threads.  Transposes ran on one core while the other waited: 1.25 ms of the scaled step
#   (a [2048, 256] one 0.24 -> 0.11 ms on two threads).  65,536 elements (256 KiB of f32),
#   so that the [256, 256] ones of the weight gradients and the attention heads' splits and
#   merges ([4, 64, 8, 32] <-> [4, 8, 64, 32], 0.015-0.034 ms each on one core) are threaded
#   too: on a Zen 5 the scaled train step 4.37 -> 4.22 and 4.69 -> 4.51 ms (ab_step, two
#   runs; 3-4%).  (At 131,072, measured on a Zen 4 with a 10 ms step, those gained nothing:
#   10.41 vs 10.19 ms.)  Elementwise ops at 65,536 (PARALLEL_MIN_ELEMENTS) gained nothing more.
PARALLEL_TRANSPOSE_MIN = 65536


def _parallel_transpose_block(shape: list[int], tiles: tuple[int, ...] | None) -> int | None:
    """The dim-0 block of a transpose's forall (None: the transpose stays serial)."""
    block = tiles[0] if tiles else 1
    if math.prod(shape) < PARALLEL_TRANSPOSE_MIN or shape[0] < 2 * block:
        return None
    return block


def tag_transposes(mlir_ir: ModuleType, module: Module) -> int:
    """Tag with `kina.transpose_tile` every static transpose that moves the input's
    innermost dim onto output dim j < rank - 1 and whose dims j and rank - 1 are multiples
    of TRANSPOSE_BLOCK (TRANSFORM_LIBRARY tiles those), and with `kina.parallel_transpose`
    the large ones (`_parallel_transpose_block`); returns the count of tiled ones."""
    tagged = 0

    def visit(op: OpView) -> WalkResult:
        nonlocal tagged
        if op.name == "linalg.transpose":
            perm = list(mlir_ir.DenseI64ArrayAttr(op.attributes["permutation"]))
            t = mlir_ir.RankedTensorType(op.results[0].type) if len(op.results) == 1 else None
            # a dynamic dimension (a dynamic export) is a huge negative number, which `%` divides
            shape = t.shape if t is not None and t.has_static_shape else None
            r = len(perm)
            j = perm.index(r - 1) if perm else 0
            tiles = None
            if (shape and 2 <= r <= TRANSPOSE_MAX_RANK and j != r - 1
                    and shape[j] % TRANSPOSE_BLOCK == 0 and shape[-1] % TRANSPOSE_BLOCK == 0):
                tiles = transpose_tiles(r, j)
                op.attributes["kina.transpose_tile"] = mlir_ir.DenseI64ArrayAttr.get(list(tiles))
                tagged += 1
            block = _parallel_transpose_block(list(shape), tiles) if shape else None
            if block is not None:
                op.attributes["kina.parallel_transpose"] = mlir_ir.DenseI64ArrayAttr.get([block])
            if (t is not None and not shape and str(t.element_type) == "f32"
                    and 2 <= r <= DYNAMIC_TRANSPOSE_MAX_RANK and j != r - 1):
                parallel_if.tag_transpose(mlir_ir, module, op, j, TRANSPOSE_BLOCK, PARALLEL_TRANSPOSE_MIN)
                tagged += 1
        return mlir_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return tagged


# - a linalg.generic that reduces its innermost loop (iterators parallel..., reduction), of
#   f32 values, whose innermost extent is a multiple of REDUCE_LANES, whose result is indexed
#   by the other loops in order, and whose body combines the accumulator with one
#   arith.addf / mulf / maximumf / minimumf, is tagged `kina.reduce_inner` (with its
#   tiling, `transform_library.reduce_tiles`) by `tag_inner_reductions`: the script reduces
#   each row into REDUCE_LANES partial results held in one vector and combines them at
#   the end of the row.  LLVM vectorises no such loop itself (the accumulator is stored
#   every iteration, and an ordered float reduction cannot be reassociated): the log-softmax
#   row maxima and sums of [256, 2048] took 0.22-0.45 ms each as scalar loops.  Sums are
#   reassociated (16 interleaved partial sums, then those in order): -O2 agrees with -O0
#   within float tolerance, not bit for bit; max and min are exact in any order.  A body that
#   computes an F8 value (an F8 rounding fused into it) stays scalar: see `_computes_f8`; so
#   does one that reads linalg.index: see `_reads_index`.
_F8_TYPE = "f8E"   # f8E4M3FN, f8E5M2 (the F8 types Kina has)
REDUCE_COMBINERS = {"arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf"}


def _inner_reduction(mlir_ir: ModuleType, op: OpView) -> tuple[int, int] | None:
    """(rank, peel) of a linalg.generic that `tag_inner_reductions` may tag, else None; peel 1:
    a dynamic export's, whose reduced extent 16 may not divide (transform_dynamic's peeled form)."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    its = [str(i) for i in mlir_ir.ArrayAttr(op.attributes["iterator_types"])]
    rank = len(its)
    if not 2 <= rank <= REDUCE_MAX_RANK or "reduction" not in its[-1] or any("reduction" in i for i in its[:-1]):
        return None
    values = [*op.operands, *op.results]
    if not all(isinstance(v.type, mlir_ir.RankedTensorType)
               and str(mlir_ir.RankedTensorType(v.type).element_type) == "f32" for v in values):
        return None
    dynamic = not all(mlir_ir.RankedTensorType(v.type).has_static_shape for v in values)
    maps = [mlir_ir.AffineMapAttr(m).value for m in mlir_ir.ArrayAttr(op.attributes["indexing_maps"])]
    last = rank - 1
    dims = [[e.position if isinstance(e, mlir_ir.AffineDimExpr) else -1 for e in m.results] for m in maps]
    if dims[-1] != list(range(last)) or any(-1 in d or (last in d and d[-1] != last) for d in dims[:-1]):
        return None
    row_t = next((mlir_ir.RankedTensorType(v.type) for v, d in zip(op.operands, dims) if d and d[-1] == last), None)
    if row_t is None:
        return None
    peel = int(row_t.is_dynamic_dim(row_t.rank - 1) or row_t.shape[-1] % REDUCE_LANES != 0)
    if peel and not (dynamic and (row_t.is_dynamic_dim(row_t.rank - 1) or row_t.shape[-1] > REDUCE_LANES)):
        return None
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if not ops or len(ops[-1].operands) != 1 or _computes_f8(ops) or _reads_index(ops):
        return None
    combiner = ops[-1].operands[0].owner
    acc = block.arguments[len(block.arguments) - 1]
    if getattr(combiner, "name", None) not in REDUCE_COMBINERS or acc not in list(combiner.operands):
        return None
    return (rank, peel) if len(list(acc.uses)) == 1 else None


def _reads_index(ops: list[OpView]) -> bool:
    """Whether a body reads linalg.index (random_bits fused into a sum: each value's counter).
    MLIR 22's tile_reduction_using_for does not offset linalg.index by the tile's position
    (llvm/llvm-project#188261, fixed after 22.1): every 16-lane tile of the row read the
    indices of the first, so a row's sum drew its first 16 random values in every tile
    (tests/regressions/random_bits_fused_inner_reduction.kina).  Such a body stays scalar."""
    return any(o.operation.name == "linalg.index" for o in ops)


def _computes_f8(ops: list[OpView]) -> bool:
    """Whether a body makes an F8 value.  Operands of f32 do not rule it out: fusion.py folds
    the F8 rounding of a producer into its consumer (`a = v.reduce_keep(...)` of F8, then
    `a.reduce_keep(...)`: an f32 -> f8 truncf and f8 -> f32 extf inside the f32 sum).  Vectorised,
    those become vector<16xf8> conversions, which convert-arith-to-apfloat (scalar only) leaves
    behind an unrealized_conversion_cast that LLVM translation rejects; scalar, they lower."""
    return any(_F8_TYPE in str(r.type) for o in ops for r in o.results)


def tag_inner_reductions(mlir_ir: ModuleType, module: Module) -> int:
    """Tag with `kina.reduce_inner` (its tile sizes) every generic `_inner_reduction`
    accepts (TRANSFORM_LIBRARY vectorises those), `kina.reduce_peeled` a dynamic one whose
    reduced extent REDUCE_LANES may not divide; returns the count."""
    tagged = 0

    def visit(op: OpView) -> WalkResult:
        nonlocal tagged
        found = _inner_reduction(mlir_ir, op)
        if found is not None:
            rank, peel = found
            tag = "kina.reduce_peeled" if peel else "kina.reduce_inner"
            op.attributes[tag] = mlir_ir.DenseI64ArrayAttr.get(list(reduce_tiles(rank)[0]))
            tagged += 1
        return mlir_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return tagged
