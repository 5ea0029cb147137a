"""-O2: a matmul whose A operand is a transpose reads A through a transposed map instead.

The reverse pass writes the weight gradient of `x @ w` as `transpose(x) @ g`: a
linalg.transpose into a new tensor, then a linalg.matmul that reads it.  The transform
script's register tile (transform_library) reads A one element at a time and broadcasts it
across a row of the tile, so reading A^T[i, k] as A[k, i] costs nothing: the 8 rows of a
tile at one k are 8 consecutive floats of A.  `fold_transposed_lhs` gives such a matmul
the maps (d2, d0), (d2, d1), (d0, d1) and the transpose's input as its A, and erases the
transpose when nothing else reads it: one pass over a [256, 256] tensor less per weight
gradient (0.02 ms each in the scaled train step, benchmarks/README.md).  A batch_matmul
likewise (maps (d0, d3, d1), ...), also through the collapse_shape with which the emitter
runs a [B, H, T, D] product as [B * H, T, D]: attention's VJP `transpose(q) @ g`.  Each result
element adds the same products in the same order: results are bit-identical.

Only the matmuls the script vectorises whole are folded (static f32 shapes whose M and N
are multiples of transform_library.MATMUL_TILE), and only narrow ones (N < FOLD_MAX_N,
which says why): the other forms (peeled, dynamic, the
interchanged loop nest) keep reading a plain A.  A transposed B is not folded: B is read a
row of the tile at a time, which a transposed B would turn into a gather.  But a B that the
script packs anyway is transposed into its packing buffers (`tag_packed_transposed_rhs`,
below): the transpose is then the packing's copy, not a pass of its own.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

from compiler.backend.bindings import walk_ops
from compiler.backend.transform_library import MATMUL_TILE as TILE
from compiler.backend.transform_library import transpose_tiles

# Only a product narrower than FOLD_MAX_N columns is folded.  The tile's 8 floats of A^T at
# one k are consecutive, but consecutive k are a row of x apart (1-2 KiB, a power of two):
# a k block's reads of A fall on a few cache sets and come from L2.  That costs in
# proportion to the product (its N columns reread A), the transpose pass saved is fixed.
# On an Intel Xeon (2 cores), the plain product after a transpose against the folded one:
# [512, 512]^T @ [512, 8192] 15.5 against 16.9 ms, [512, 512]^T @ [512, 512] 0.99 against
# 1.05 ms, [256, 256]^T @ [256, 2048] 1.05 against 1.09; at N = 256 (the scaled StoryLM's
# weight gradients, where the fold saved 0.02 ms each on a Zen 4) 0.117 against 0.127.
# The large train step 73.6 -> 72.1 ms, the scaled one unchanged (benchmarks/README.md).
FOLD_MAX_N = 512


def _static_f32(mlir_ir: ModuleType, value: Any) -> Any:
    """The value's RankedTensorType when it is a static f32 tensor, else None."""
    t = value.type
    if not isinstance(t, mlir_ir.RankedTensorType):
        return None
    t = mlir_ir.RankedTensorType(t)
    return t if t.has_static_shape and str(t.element_type) == "f32" else None


def _maps(mlir_ir: ModuleType, batch: bool, transposed: bool) -> list[Any]:
    """The maps of a matmul (batch: a batch_matmul) reading A plain or transposed."""
    d = mlir_ir.AffineDimExpr.get
    lead, first = ([d(0)], 1) if batch else ([], 0)
    m, n, k = d(first), d(first + 1), d(first + 2)
    dims = [lead + ([k, m] if transposed else [m, k]), lead + [k, n], lead + [m, n]]
    return [mlir_ir.AffineMap.get(first + 3, 0, r) for r in dims]


def _default_maps(mlir_ir: ModuleType, op: Any, batch: bool) -> bool:
    if "indexing_maps" not in op.attributes:
        return True
    got = [str(mlir_ir.AffineMapAttr(m).value) for m in mlir_ir.ArrayAttr(op.attributes["indexing_maps"])]
    return got == [str(m) for m in _maps(mlir_ir, batch, False)]


def _swaps_last_two(transpose: Any, rank: int) -> bool:
    perm = [int(p) for p in transpose.attributes["permutation"]]
    return len(perm) == rank and perm == [*range(rank - 2), rank - 1, rank - 2]


def _transposed_source(mlir_ir: ModuleType, op: Any, batch: bool) -> tuple[Any, Any] | None:
    """(the linalg.transpose that makes A, the tensor.collapse_shape between them or None):
    A is transpose(x) with its last two dims swapped, rank 2 (a matmul) or rank 3 (a
    batch_matmul); or, for a batch_matmul, a collapse of such a transpose of any rank that
    keeps the last two dims apart (the emitter's [B, H, T, D] products run as [B * H, T, D])."""
    owner, collapse = op.operands[0].owner, None
    if batch and getattr(owner, "name", None) == "tensor.collapse_shape":
        groups = [[int(i) for i in g] for g in owner.attributes["reassociation"]]
        rank = mlir_ir.RankedTensorType(owner.operands[0].type).rank
        if groups[-2:] != [[rank - 2], [rank - 1]]:
            return None
        owner, collapse = owner.operands[0].owner, owner
    if getattr(owner, "name", None) != "linalg.transpose":
        return None
    rank = mlir_ir.RankedTensorType(owner.operands[0].type).rank
    if not _swaps_last_two(owner, rank) or (collapse is None and rank != (3 if batch else 2)):
        return None
    return owner, collapse


def _fold_source(mlir_ir: ModuleType, op: Any) -> tuple[Any, Any] | None:
    """`_transposed_source` of a matmul / batch_matmul the script vectorises whole (static f32,
    default maps, M and N multiples of the tile), else None."""
    batch = op.name == "linalg.batch_matmul"
    if op.name not in ("linalg.matmul", "linalg.batch_matmul") or len(op.results) != 1 \
            or not _default_maps(mlir_ir, op, batch):
        return None
    types = [_static_f32(mlir_ir, v) for v in (op.operands[0], op.operands[1], op.results[0])]
    if any(t is None for t in types):
        return None
    m, n = types[2].shape[-2:]
    if m % TILE[0] or n % TILE[1] or n >= FOLD_MAX_N:
        return None
    return _transposed_source(mlir_ir, op, batch)


def _new_a(mlir_ir: ModuleType, op: Any, transpose: Any, collapse: Any) -> Any:
    """A untransposed: the transpose's input, collapsed like A was when it was collapsed."""
    x = transpose.operands[0]
    if collapse is None:
        return x
    shape = list(mlir_ir.RankedTensorType(op.operands[0].type).shape)
    shape[-2:] = shape[-1], shape[-2]
    f32 = mlir_ir.RankedTensorType(x.type).element_type
    with op.location:
        new = mlir_ir.Operation.create("tensor.collapse_shape", results=[mlir_ir.RankedTensorType.get(shape, f32)],
                                       operands=[x], attributes={"reassociation": collapse.attributes["reassociation"]},
                                       ip=mlir_ir.InsertionPoint(op))
    return new.results[0]


def fold_transposed_lhs(mlir_ir: ModuleType, module: Any) -> int:
    """Fold the transposes (of the last two dims) that make the A operand of the vectorised
    matmuls and batch matmuls of every function into their maps; returns the number changed."""
    matmuls = [(op, _fold_source(mlir_ir, op)) for op in walk_ops(
        mlir_ir, module, lambda op: op.name in ("linalg.matmul", "linalg.batch_matmul"))]
    folds = [(op, found) for op, found in matmuls if found is not None]
    dead: list[Any] = []       # collapses, then transposes, erased once nothing reads them
    for op, (transpose, collapse) in folds:
        op.operands[0] = _new_a(mlir_ir, op, transpose, collapse)
        op.attributes["indexing_maps"] = mlir_ir.ArrayAttr.get(
            [mlir_ir.AffineMapAttr.get(m) for m in _maps(mlir_ir, op.name == "linalg.batch_matmul", True)])
        for candidate in (collapse, transpose):
            if candidate is not None and not any(candidate == d for d in dead):   # wrappers of one op compare equal
                dead.append(candidate)
    for candidate in sorted(dead, key=lambda o: o.name != "tensor.collapse_shape"):   # readers first
        if not list(candidate.results[0].uses):
            candidate.erase()
    return len(folds)


# ---- a packed B that is a transpose ----------------------------------------------------------
# A `kina.pack_b` matmul copies each [K, bn] panel of B into a buffer of its own (the script's
# tensor.pad).  When B is transpose(w) and nothing else reads it, the transpose wrote all of
# B once only for the packing to copy it again: the logits VJP's g @ transpose(lm_head)
# (the large StoryLM: a [8192, 512] transpose, 1.0 ms of a 46 ms step).  Such a matmul is
# tagged `kina.pack_b_t` instead: the script fuses the transpose into the matmul's forall,
# where each thread transposes its own panel straight into a fresh [K, bn] buffer, the
# packed panel (transform_library._parallel_matmul).  Each result element adds the same
# products in the same order: results are bit-identical.
PACK_T_TAGS = ("kina.transpose_tile", "kina.parallel_transpose")   # the transpose's own, dropped


def packable_transposed_rhs(mlir_ir: ModuleType, op: Any) -> bool:
    """Whether the B of a linalg.matmul is a single-use [1, 0] transpose of a static f32 tensor
    of a K that the packing's transpose tiles divide: packed, such a B is transposed into the
    packing buffers (`tag_packed_transposed_rhs`), in tiles of transpose_tiles(2, 0); a K of
    8 (`d @ w.transpose([1, 0])` with w [1024, 8], a regression head's input gradient) left a
    partial tile the vectoriser failed on, and the -O2 build with it."""
    owner = op.operands[1].owner
    if not (getattr(owner, "name", None) == "linalg.transpose" and _swaps_last_two(owner, 2)
            and len(list(owner.results[0].uses)) == 1):
        return False
    source = _static_f32(mlir_ir, owner.operands[0])
    return source is not None and source.shape[1] % transpose_tiles(2, 0)[0] == 0


def tag_packed_transposed_rhs(mlir_ir: ModuleType, module: Any) -> int:
    """Retag every `kina.pack_b` matmul whose B is a single-use [1, 0] transpose of a static f32
    tensor as `kina.pack_b_t`, and drop the transpose's own tags (the matmul's script
    transposes it); returns the count."""
    count = 0
    for op in walk_ops(mlir_ir, module, lambda op: op.name == "linalg.matmul" and "kina.pack_b" in op.attributes):
        if not packable_transposed_rhs(mlir_ir, op):
            continue
        owner = op.operands[1].owner
        del op.attributes["kina.pack_b"]
        op.attributes["kina.pack_b_t"] = mlir_ir.UnitAttr.get()
        for name in PACK_T_TAGS:
            if name in owner.attributes:
                del owner.attributes[name]
        count += 1
    return count
