"""-O2: a matmul whose A operand is a transpose reads A through a transposed map instead.

The reverse pass writes the weight gradient of `x @ w` as `transpose(x) @ g`: a
linalg.transpose into a new tensor, then a linalg.matmul that reads it.  The transform
script's register tile (transform_library) reads A one element at a time and broadcasts it
across a row of the tile, so reading A^T[i, k] as A[k, i] costs nothing: the 8 rows of a
tile at one k are 8 consecutive floats of A.  `fold_transposed_lhs` gives such a matmul
the maps (d2, d0), (d2, d1), (d0, d1) and the transpose's input as its A, and erases the
transpose when nothing else reads it: one pass over a [256, 256] tensor less per weight
gradient (0.02 ms each in the scaled train step, benchmarks/README.md).  Each result
element adds the same products in the same order: results are bit-identical.

Only the matmuls the script vectorises whole are folded (static f32 shapes whose M and N
are multiples of parallelize.MATMUL_TILE): the other forms (peeled, dynamic, the
interchanged loop nest) keep reading a plain A.  A transposed B is not folded: B is read a
row of the tile at a time, which a transposed B would turn into a gather.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

TILE = (8, 32)   # parallelize.MATMUL_TILE (parallelize imports the script's module; this stays a leaf)


def _static_f32(mlir_ir: ModuleType, value: Any) -> Any:
    """The value's RankedTensorType when it is a static f32 tensor, else None."""
    t = value.type
    if not isinstance(t, mlir_ir.RankedTensorType):
        return None
    t = mlir_ir.RankedTensorType(t)
    return t if t.has_static_shape and str(t.element_type) == "f32" else None


def _default_maps(mlir_ir: ModuleType, op: Any) -> bool:
    if "indexing_maps" not in op.attributes:
        return True
    d = mlir_ir.AffineDimExpr.get
    want = [[d(0), d(2)], [d(2), d(1)], [d(0), d(1)]]
    got = [list(mlir_ir.AffineMapAttr(m).value.results) for m in mlir_ir.ArrayAttr(op.attributes["indexing_maps"])]
    return [[str(e) for e in r] for r in got] == [[str(e) for e in r] for r in want]


def _transposed_input(op: Any) -> Any:
    """The input of the 2-D linalg.transpose that defines operand 0 of `op`, or None."""
    owner = op.operands[0].owner
    if getattr(owner, "name", None) != "linalg.transpose":
        return None
    if [int(p) for p in owner.attributes["permutation"]] != [1, 0]:
        return None
    return owner.operands[0]


def _foldable(mlir_ir: ModuleType, op: Any) -> bool:
    if op.name != "linalg.matmul" or len(op.results) != 1 or not _default_maps(mlir_ir, op):
        return False
    types = [_static_f32(mlir_ir, v) for v in (op.operands[0], op.operands[1], op.results[0])]
    if any(t is None for t in types):
        return False
    m, n = types[2].shape
    return m % TILE[0] == 0 and n % TILE[1] == 0 and _transposed_input(op) is not None


def _lhs_transposed_maps(mlir_ir: ModuleType) -> Any:
    d = mlir_ir.AffineDimExpr.get
    return mlir_ir.ArrayAttr.get([mlir_ir.AffineMapAttr.get(mlir_ir.AffineMap.get(3, 0, dims))
                                  for dims in ([d(2), d(0)], [d(2), d(1)], [d(0), d(1)])])


def fold_transposed_lhs(mlir_ir: ModuleType, module: Any) -> int:
    """Fold the [1, 0] transposes that feed the A operand of the vectorised matmuls of every
    function into the matmuls' maps; returns the number of matmuls changed."""
    matmuls: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "linalg.matmul" and _foldable(mlir_ir, op):
            matmuls.append(op)
        return mlir_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    transposes: list[Any] = []
    for op in matmuls:
        transpose = op.operands[0].owner
        op.attributes["indexing_maps"] = _lhs_transposed_maps(mlir_ir)
        op.operands[0] = transpose.operands[0]
        if not any(transpose == t for t in transposes):   # wrappers of one op compare equal
            transposes.append(transpose)
    for t in transposes:
        if not list(t.results[0].uses):
            t.erase()
    return len(matmuls)
