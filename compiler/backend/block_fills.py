"""-O2, after the transform script (the "@fuse-fills" slot): the fill of a parallel matmul
moves into its scf.forall, one fill per block.

The script's parallel matmuls (compiler/backend/transform_library.py) should zero each
result block inside their scf.forall, where the block is in cache when its k loop starts.
transform.structured.fuse_into_containing_op did that, but took time in proportion to the
whole function per fusion (a 1,000-op function: 50 ms for one matmul; the scaled train
step's 28 parallel products: 0.13 of its 0.21 s of transform script).
`fuse_fills_into_foralls` does the same rewrite in time proportional to the forall.
"""
from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

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


def fuse_fills_into_foralls(mlir_ir: ModuleType, module: Module) -> int:
    """Each scf.forall whose shared_out is a linalg.fill and whose body reads that
    out only as the block it writes: the fill moves into the body, on the block.  Every
    forall here comes from the script's tile_using_forall, whose blocks cover the result
    (no Kina program writes a forall), so filling each block is filling the whole.
    Returns how many fills moved."""
    from mlir.dialects import linalg

    moved = 0
    for forall in walk_ops(mlir_ir, module, lambda op: op.name == "scf.forall"):
        body = forall.regions[0].blocks[0]
        n_outs = len(forall.results)
        first_out = len(forall.operands) - n_outs
        for k in range(n_outs):
            init = forall.operands[first_out + k]
            fill = init.owner
            if not isinstance(fill, mlir_ir.OpView) or fill.name != "linalg.fill":
                continue
            arg = body.arguments[len(body.arguments) - n_outs + k]
            block = _block_slice(mlir_ir, forall, arg)
            if block is None:
                continue
            with mlir_ir.InsertionPoint.after(block), forall.location:
                filled = linalg.fill(fill.operands[0], outs=[block.results[0]])
            block.results[0].replace_all_uses_except(filled, filled.owner.operation)
            forall.operands[first_out + k] = fill.operands[1]
            if not list(fill.results[0].uses):
                fill.erase()
            moved += 1
    return moved
