"""-O2, after the transform script (the "@fuse-fills" slot): the fill of a parallel matmul
moves into its scf.forall, one fill per block.

The script's parallel matmuls (compiler/backend/transform_library.py) should zero each
result block inside their scf.forall, where the block is in cache when its k loop starts.
transform.structured.fuse_into_containing_op did that, but took time in proportion to the
whole function per fusion (a 1,000-op function: 50 ms for one matmul; the scaled train
step's 28 parallel products: 0.13 of its 0.21 s of transform script).
`fuse_fills_into_foralls` does the same rewrite in time proportional to the forall.

A product that accumulates into a copy of a weight (`bufferization.alloc_tensor copy(w)`,
compiler/backend/accumulate.py) is treated the same way: each block copies its part of `w`
(a bufferization.materialize_in_destination, vector moves at "@vector-copies") where a
whole copy before the loop would be one core's memcpy of the whole weight.
"""
from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from compiler.backend.bindings import walk_ops

if TYPE_CHECKING:
    from mlir.ir import Module, OpView


def _slice_args(op: OpView, first: int) -> tuple[list[str], list[object]]:
    """(static offsets/sizes/strides, dynamic operands) of an extract / parallel-insert slice."""
    static = [str(op.attributes[k]) for k in ("static_offsets", "static_sizes", "static_strides")]
    return static, list(op.operands)[first:]


def _block_slice(mlir_ir: ModuleType, forall: OpView, arg: object) -> OpView | None:
    """The tensor.extract_slice through which the forall body reads shared_out `arg`, when
    it reads exactly the block its parallel_insert_slice writes (and nothing else)."""
    extracts, inserts = [], []
    for use in arg.uses:   # type: ignore[attr-defined]
        user = use.owner
        if user.name == "tensor.extract_slice" and use.operand_number == 0 and user.parent == forall:
            extracts.append(user)
        elif user.name == "tensor.parallel_insert_slice" and use.operand_number == 1:
            inserts.append(user)
        else:
            return None
    if len(extracts) != 1 or len(inserts) != 1:
        return None
    (s_static, s_dyn), (i_static, i_dyn) = _slice_args(extracts[0], 1), _slice_args(inserts[0], 2)
    return extracts[0] if s_static == i_static and s_dyn == i_dyn else None


def copied(op: Any) -> bool:
    """Whether `op` is a `bufferization.alloc_tensor copy(x)`: a copy of x to accumulate into
    (compiler/backend/accumulate.py)."""
    if getattr(op, "name", None) != "bufferization.alloc_tensor":
        return False
    return getattr(op, "opview", op).copy is not None   # a walk hands out Operations, not OpViews


def _fill_block(mlir_ir: ModuleType, forall: OpView, block: OpView, init: Any) -> tuple[Any, Any]:
    """The block filled with the fill `init`'s value (in place, inside the forall); the
    forall's own init then becomes the fill's destination."""
    from mlir.dialects import linalg

    fill = init.owner
    with mlir_ir.InsertionPoint.after(block), forall.location:
        filled = linalg.fill(fill.operands[0], outs=[block.results[0]])
    return filled, fill.operands[1]


def _copy_block(mlir_ir: ModuleType, forall: OpView, block: OpView, init: Any) -> tuple[Any, Any]:
    """The block copied from the same block of the tensor that the alloc_tensor `init`
    copies (inside the forall; vector moves at "@vector-copies"); the forall's own init then
    becomes an empty tensor, so no whole copy is made before the loop."""
    from mlir.dialects import bufferization, tensor

    alloc = init.owner
    t = mlir_ir.RankedTensorType(init.type)
    with mlir_ir.InsertionPoint(forall), forall.location:
        empty = tensor.EmptyOp(t.shape, t.element_type)
    with mlir_ir.InsertionPoint.after(block), forall.location:
        part = block.operation.clone()
        part.operands[0] = alloc.copy
        done = bufferization.MaterializeInDestinationOp(block.results[0].type, part.results[0], block.results[0])
    return done.result, empty.result


def fuse_fills_into_foralls(mlir_ir: ModuleType, module: Module) -> int:
    """Each scf.forall whose shared_out is a linalg.fill, or the copy of a tensor, and
    whose body reads that out only as the block it writes: the fill (or a copy of the
    tensor's block) moves into the body, on the block.  Every forall here comes from the
    script's tile_using_forall, whose blocks cover the result (no Kina program writes a
    forall), so filling each block is filling the whole.  Returns how many moved."""
    moved = 0
    for forall in walk_ops(mlir_ir, module, lambda op: op.name == "scf.forall"):
        body = forall.regions[0].blocks[0]
        n_outs = len(forall.results)
        first_out = len(forall.operands) - n_outs
        for k in range(n_outs):
            init = forall.operands[first_out + k]
            fill = init.owner
            is_fill = isinstance(fill, mlir_ir.OpView) and fill.name == "linalg.fill"
            if not (is_fill or copied(fill)):
                continue
            arg = body.arguments[len(body.arguments) - n_outs + k]
            block = _block_slice(mlir_ir, forall, arg)
            if block is None:
                continue
            done, new_init = (_fill_block if is_fill else _copy_block)(mlir_ir, forall, block, init)
            block.results[0].replace_all_uses_except(done, done.owner.operation)
            forall.operands[first_out + k] = new_init
            if not list(fill.results[0].uses):
                fill.erase()
            moved += 1
    return moved
