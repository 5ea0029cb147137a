"""-O2's "@vector-copies" slot (after bufferization, before "@lower-copies"): strided copies
whose rows are contiguous become loops of vector loads and stores, and the fill of a buffer
that a copy then overwrites whole is dropped.

Why: a matmul tagged `kina.pack_b` (compiler/backend/parallelize.py) copies its [K, bn]
panel or [K, 32] strip of B into a buffer of its own (a `tensor.pad` by nothing in the
transform script).  Bufferized, that is a fill of the new buffer (the pad's padding value,
a memset that the copy then overwrites) and a memref.copy from a strided subview, which
"@lower-copies" makes a linalg.copy and convert-linalg-to-loops a scalar loop: LLVM fully
unrolls a 32-float row and cannot vectorise it afterwards (its SLP vectoriser may not
reorder loads and stores that could alias).  A C model of the strips ran at 258-277
GFLOP/s with that copy against 298-303 with a vector one (benchmarks/README.md).

Takes the bufferized module (memref level, before convert-linalg-to-loops); gives it with
each rewritten copy as an scf.for nest over the outer dims whose body moves one row with
vector.load / vector.store in ROW_CHUNK-float pieces (the rows' last piece narrower).  Only
copies with static shapes, a unit innermost stride on both sides and a plain element type;
every other memref.copy is left to "@lower-copies".  -O0 has no vector lowering and keeps
the scalar loops.  Entry point: `vectorize_row_copies(mlir_ir, module) -> count`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compiler.backend.bindings import view_root, walk_ops

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module, OpView, Type

SLOT = "@vector-copies"
ROW_CHUNK = 64        # floats a vector load takes (4 zmm); a row wider than UNROLLED_CHUNKS of them loops
UNROLLED_CHUNKS = 4
_ELEMENTS = ("f32", "f64", "i32", "i64")


def _row_copy(mlir_ir: ModuleType, op: OpView) -> bool:
    """A memref.copy that this rewrite takes: static, rank >= 1, rows contiguous on both sides."""
    types = [v.type for v in op.operands]
    if not all(isinstance(t, mlir_ir.MemRefType) for t in types):
        return False
    memrefs = [mlir_ir.MemRefType(t) for t in types]
    if any(not t.has_static_shape or t.rank < 1 or str(t.element_type) not in _ELEMENTS for t in memrefs):
        return False
    if all(contiguous(mlir_ir, t) for t in memrefs):      # finalize-memref-to-llvm: one memcpy
        return False
    return all(t.get_strides_and_offset()[0][-1] == 1 for t in memrefs) and memrefs[0].shape[-1] > 1


def contiguous(mlir_ir: ModuleType, t: Type) -> bool:
    """memref::isStaticShapeAndContiguousRowMajor, the test the memref.copy lowering applies
    to each operand (Kina shapes are static; an identity layout passes it)."""
    t = mlir_ir.MemRefType(t)
    if not t.has_static_shape:
        return False
    strides, _ = t.get_strides_and_offset()
    running, dim = 1, t.rank - 1
    while dim >= 0 and strides[dim] == running:
        running *= t.shape[dim]
        dim -= 1
    while dim >= 0 and t.shape[dim] == 1:
        dim -= 1
    return bool(dim < 0)


def _dead_fill(mlir_ir: ModuleType, fill: OpView, copy: OpView) -> bool:
    """Whether `fill` (a linalg.fill, or a linalg.map of no inputs whose body only yields)
    writes a buffer that the memref.copy `copy` overwrites whole, without reading it (its
    source is no view of that buffer)."""
    if fill.name not in ("linalg.fill", "linalg.map"):
        return False
    operands = list(fill.operands)
    if fill.name == "linalg.map" and (len(operands) != 1 or len(fill.regions[0].blocks[0].operations) != 1):
        return False
    filled = operands[-1]
    # (a copy out of a view of the filled buffer itself would read the fill)
    return bool(filled == copy.operands[1] and view_root(copy.operands[0]) != filled)


# Ops that may stand between a fill and the copy that overwrites its buffer: they neither
# read nor write a buffer's contents.
_NO_ACCESS = ("memref.subview", "memref.alloc", "arith.constant", "affine.apply")


def drop_overwritten_fills(mlir_ir: ModuleType, copies: list[OpView]) -> int:
    """Erase every fill whose buffer one of `copies` (memref.copy ops), later in the same
    block, overwrites whole, with only _NO_ACCESS ops between them; the count.  One pass
    over each block that holds such a copy."""
    blocks: list[Any] = []
    for copy in copies:
        if not any(copy.operation.block == b for b in blocks):
            blocks.append(copy.operation.block)
    dead = []
    for block in blocks:
        last = None          # the latest op that is not a _NO_ACCESS one
        for op in block.operations:
            op = op.operation
            if op.name == "memref.copy" and last is not None and _dead_fill(mlir_ir, last.opview, op.opview):
                dead.append(last)
            if op.name not in _NO_ACCESS:
                last = op
    for op in dead:
        op.erase()
    return len(dead)


def _move_row(mlir_ir: ModuleType, src: Any, dst: Any, outer: list[Any], width: int, element: Any) -> None:
    """vector.load / vector.store of one row (at the outer indices) in ROW_CHUNK pieces."""
    from mlir.dialects import arith, scf, vector
    index = mlir_ir.IndexType.get()

    def piece(at: Any, size: int) -> None:
        v = vector.load(mlir_ir.VectorType.get([size], element), src, [*outer, at])
        vector.store(v, dst, [*outer, at])

    full, rest = divmod(width, ROW_CHUNK)
    if full > UNROLLED_CHUNKS:
        loop = scf.ForOp(arith.constant(index, 0), arith.constant(index, full * ROW_CHUNK),
                         arith.constant(index, ROW_CHUNK))
        with mlir_ir.InsertionPoint(loop.body):
            piece(loop.induction_variable, ROW_CHUNK)
            scf.yield_([])
    else:
        for k in range(full):
            piece(arith.constant(index, k * ROW_CHUNK), ROW_CHUNK)
    if rest:
        piece(arith.constant(index, full * ROW_CHUNK), rest)


def _row_loops(mlir_ir: ModuleType, src: Any, dst: Any, shape: list[int], outer: list[Any], element: Any) -> None:
    """The scf.for nest over shape[:-1] (at the insertion point) around `_move_row`."""
    from mlir.dialects import arith, scf
    if len(outer) == len(shape) - 1:
        _move_row(mlir_ir, src, dst, outer, shape[-1], element)
        return
    index = mlir_ir.IndexType.get()
    loop = scf.ForOp(arith.constant(index, 0), arith.constant(index, shape[len(outer)]), arith.constant(index, 1))
    with mlir_ir.InsertionPoint(loop.body):
        _row_loops(mlir_ir, src, dst, shape, [*outer, loop.induction_variable], element)
        scf.yield_([])


def vectorize_row_copies(mlir_ir: ModuleType, module: Module) -> int:
    """The slot's rewrite: each copy of contiguous rows made vector loads and stores, and
    the fills those copies overwrite dropped; the count of both."""
    found = walk_ops(mlir_ir, module, lambda op: op.name == "memref.copy" and _row_copy(mlir_ir, op))
    count = drop_overwritten_fills(mlir_ir, found)
    for op in found:
        src, dst = op.operands
        t = mlir_ir.MemRefType(src.type)
        with mlir_ir.InsertionPoint(op), op.location:
            _row_loops(mlir_ir, src, dst, list(t.shape), [], t.element_type)
        op.erase()
    return count + len(found)
