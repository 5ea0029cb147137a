"""-O2's "@zero-tiles" slot (after bufferization, before "@vector-copies"): a register tile
whose first read of its result block would read the block's fill starts from the fill's
value in registers instead, and the fill, which the tiles then overwrite whole, is dropped.
Likewise a block that a copy initialises (an SGD update accumulated into a copy of the
weight, compiler/backend/accumulate.py: GEMM's beta = 1): the tile's first read reads the
copy's source, and the copy is dropped.

Why: a vectorised matmul (transform_library.py) fills its result (or, threaded, each block
of it: block_fills.py) with zeros, and then each 8 x 32 register tile reads its part of
that block into registers before its k loop, accumulates, and writes it back.  The fill
is a memset of the whole result (16 MiB for the large StoryLM's [512, 8192] logits) that
the tiles read straight back.  GEMM kernels start the first k block from zero registers
instead (beta = 0): a C model of the K = 512 head product ran at 286-293 GFLOP/s with
the memset and the read, and at 298-314 without (benchmarks/README.md).

What: takes the bufferized module (memref level); for each `linalg.fill` of a constant (or
`memref.copy` of a source no op touches until the tiles have run) into a static buffer C,
the first op after it in its block that touches C must be an scf.for
nest L in which C is reached only through a chain of unit-stride memref.subview ops ending
in one view S, read whole by one vector.transfer_read R and written whole by one
vector.transfer_write W of the same vector, both in the body of the innermost loop around
R, under scf.for loops only (from L in).  Each dynamic offset of the chain must be the
induction variable of one of those loops, stepping by the subview's size along that dim
from 0 to the parent's size (so the loops' iterations give disjoint views that together
cover C); static offsets must be 0 with the parent's whole size.  The other loops (a
blocked k loop) revisit each view: R then reads the fill's value only on their first
iteration.  The rewrite:
- R becomes the fill's value splatted, or a read of the copy's source at the view's offsets
  (`scf.if` on the other loops being at their lower bound, else R as it was);
- the fill (copy) is erased: every element of C is written by W before anything reads it.
Anything else (another access to C, a mask, a conditional, a permuted read) leaves the
fill and its tiles as they were.  The values computed are the same, bit for bit: the
registers start from the value the memory held.

Entry point: `start_tiles_from_fills(mlir_ir, module) -> count of fills dropped`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compiler.backend.bindings import const_index, view_root, walk_ops

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module, OpView

SLOT = "@zero-tiles"
# Ops whose result is another view of their operand's buffer: an access through one is an
# access to the filled buffer.
_VIEWS = ("memref.subview", "memref.cast", "memref.expand_shape", "memref.collapse_shape",
          "memref.reinterpret_cast", "memref.transpose", "memref.view", "memref.memory_space_cast")


@dataclass
class _Tiles:
    """What one fill's tiles are: the read R and write W of the view S, the loops around R
    from L in (outermost first), and which of them revisit a view."""
    read: Any
    write: Any
    loops: list[Any]
    revisiting: list[Any]
    chain: list[Any]


def _initialising(mlir_ir: ModuleType, op: OpView) -> bool:
    """A linalg.fill of an arith.constant, or a memref.copy, into a static memref."""
    if op.name not in ("linalg.fill", "memref.copy") or len(op.operands) != 2:
        return False
    value, out = op.operands
    if not isinstance(out.type, mlir_ir.MemRefType) or not mlir_ir.MemRefType(out.type).has_static_shape:
        return False
    if op.name == "memref.copy":
        return bool(value.type == out.type or mlir_ir.MemRefType(value.type).shape == mlir_ir.MemRefType(out.type).shape)
    return getattr(value.owner, "name", None) == "arith.constant"


def _aliases(root: Any) -> set[Any]:
    """root and every view of it (views of views too)."""
    found, todo = {root}, [root]
    while todo:
        value = todo.pop()
        for use in value.uses:
            user = use.owner
            if user.name in _VIEWS and use.operand_number == 0:
                for r in user.results:
                    if r not in found:
                        found.add(r)
                        todo.append(r)
    return found


def _users(values: set[Any]) -> list[Any]:
    """Every op that has one of `values` (a buffer's aliases) as an operand, except the view
    ops that make those aliases (their results' users stand for them)."""
    found = []
    for value in values:
        for use in value.uses:
            op = use.owner.operation
            if not (op.name in _VIEWS and use.operand_number == 0):
                found.append(op)
    return found


def _in_block(op: Any, block: Any) -> Any:
    """op, or the ancestor of op, that is an op of `block`; None when op is not nested in it."""
    while op is not None and op.name != "builtin.module":
        if op.block == block:
            return op
        op = op.parent.operation if op.parent is not None else None
    return None


def _whole_transfer(mlir_ir: ModuleType, op: Any, view: Any) -> bool:
    """A transfer of `view` whole: indices all constant 0, in bounds, no mask, identity map,
    the vector's shape the view's."""
    t = mlir_ir.MemRefType(view.type)
    vector = op.results[0].type if op.name == "vector.transfer_read" else op.operands[0].type
    shape = list(mlir_ir.VectorType(vector).shape)
    n_idx = t.rank
    indices = list(op.operands)[1:1 + n_idx] if op.name == "vector.transfer_read" else list(op.operands)[2:2 + n_idx]
    extra = len(op.operands) - (1 + n_idx + 1 if op.name == "vector.transfer_read" else 2 + n_idx)
    identity = f"affine_map<({', '.join(f'd{i}' for i in range(t.rank))}) -> ({', '.join(f'd{i}' for i in range(t.rank))})>"
    in_bounds = str(op.attributes["in_bounds"]) if "in_bounds" in op.attributes else ""
    return (extra == 0 and shape == list(t.shape) and all(const_index(mlir_ir, i) == 0 for i in indices)
            and str(op.attributes["permutation_map"]) == identity
            and in_bounds == "[" + ", ".join(["true"] * t.rank) + "]")


def _loops_between(op: Any, outer: Any) -> list[Any] | None:
    """The scf.for loops from `outer` (included) down to op's block, outermost first; None
    when anything but an scf.for stands between."""
    loops = []
    parent = op.parent
    while True:
        if parent.name != "scf.for":
            return None
        loops.append(parent.opview)
        if parent == outer:
            return loops[::-1]
        parent = parent.parent


def _chain(view: Any, filled: Any) -> list[Any] | None:
    """The memref.subview ops from `filled` to `view`, outermost first; None when another op
    makes a link."""
    chain = []
    while view != filled:
        owner = view.owner
        if getattr(owner, "name", None) != "memref.subview":
            return None
        chain.append(owner)
        view = owner.operands[0]
    return chain[::-1]


def _covering(mlir_ir: ModuleType, chain: list[Any], loops: list[Any]) -> list[Any] | None:
    """The loops that revisit a view (their induction variable in no offset), when the chain's
    views over the other loops' iterations are disjoint and cover the filled buffer; else None."""
    ivs = {loop.induction_variable: loop for loop in loops}
    used: set[Any] = set()
    for sub in chain:
        parent = list(mlir_ir.MemRefType(sub.operands[0].type).shape)
        sizes, offsets, strides = (list(sub.attributes[k]) for k in ("static_sizes", "static_offsets",
                                                                        "static_strides"))
        dynamic = list(sub.operands)[1:]
        if len(sizes) != len(parent) or any(s != 1 for s in strides) or len(dynamic) != sum(
                o < -(1 << 62) for o in offsets) or any(s < 0 for s in sizes):
            return None           # rank-reducing, strided, dynamic sizes or strides
        for dim, offset in enumerate(offsets):
            if offset >= 0:
                if offset != 0 or sizes[dim] != parent[dim]:
                    return None
                continue
            iv = dynamic.pop(0)
            loop = ivs.get(iv)
            if loop is None or loop in used:
                return None
            lb, ub, step = (const_index(mlir_ir, v) for v in list(loop.operands)[:3])
            if sizes[dim] <= 0 or lb != 0 or step != sizes[dim] or ub != parent[dim] or parent[dim] % sizes[dim]:
                return None
            used.add(loop)
    revisiting = []
    for loop in loops:
        if loop in used:
            continue
        lb, ub, step = (const_index(mlir_ir, v) for v in list(loop.operands)[:3])
        if lb is None or ub is None or step is None or not lb < ub:
            return None           # a view written on no iteration
        if ub - lb > step:        # (a loop of one iteration revisits nothing)
            revisiting.append(loop)
    return revisiting


def _tiles(mlir_ir: ModuleType, fill: OpView, order: dict[Any, int]) -> _Tiles | None:
    """The tiles that overwrite the fill's (or copy's) buffer whole (see the module docstring),
    or None.  `order`: the position of each op of the fill's block (filled in on first use).
    Found from the buffer's uses, not by walking the ops after the fill: a function of
    thousands of ops has hundreds of fills."""
    filled = fill.operands[1]
    aliases = _aliases(view_root(filled, _VIEWS))
    # a copy's source: read by the tiles in the copy's stead, so nothing may touch it until
    # they have (nor may it be a view of the buffer it is copied into)
    source = _aliases(view_root(fill.operands[0], _VIEWS)) if fill.name == "memref.copy" else set()
    if source & aliases:
        return None
    block = fill.operation.block
    if not order:
        order.update((op.operation, k) for k, op in enumerate(block.operations))
    at = order[fill.operation]
    later = []          # (position in the block, the op of the block it is in, the user)
    for user in _users(aliases):
        top = _in_block(user, block)
        if top is not None and order[top] > at:
            later.append((order[top], top, user))
    if not later:
        return None
    first = min(k for k, _, _ in later)
    loop = next(top for k, top, _ in later if k == first)
    accesses = [user for k, _, user in later if k == first]
    if loop.name != "scf.for" or any(at < order[top] <= first for user in _users(source)
                                     if (top := _in_block(user, block)) is not None):
        return None
    reads = [a for a in accesses if a.name == "vector.transfer_read"]
    writes = [a for a in accesses if a.name == "vector.transfer_write"]
    subviews = [a for a in accesses if a.name == "memref.subview"]
    if len(reads) != 1 or len(writes) != 1 or len(reads) + len(writes) + len(subviews) != len(accesses):
        return None
    read, write = reads[0], writes[0]
    view = read.operands[0]
    if write.operands[1] != view or read.block != write.block or read.results[0].type != write.operands[0].type:
        return None
    if not (_whole_transfer(mlir_ir, read, view) and _whole_transfer(mlir_ir, write, view)):
        return None
    chain = _chain(view, filled)
    loops = _loops_between(read, loop)
    if chain is None or loops is None or any(s not in chain for s in subviews):
        return None
    if not _before(read, write):
        return None
    revisiting = _covering(mlir_ir, chain, loops)
    return None if revisiting is None else _Tiles(read, write, loops, revisiting, chain)


def _before(a: Any, b: Any) -> bool:
    """Whether op a comes before op b in their (common) block."""
    for op in a.block.operations:
        if op.operation == a:
            return True
        if op.operation == b:
            return False
    return False


def _offsets(mlir_ir: ModuleType, chain: list[Any]) -> list[Any]:
    """The view's offsets in the filled buffer, per dim: the chain's offsets summed (index
    values, made at the insertion point)."""
    from mlir.dialects import arith
    index = mlir_ir.IndexType.get()
    total: list[Any] = []
    for sub in chain:
        dynamic = list(sub.operands)[1:]
        for dim, offset in enumerate(sub.attributes["static_offsets"]):
            value = dynamic.pop(0) if offset < 0 else None
            if len(total) <= dim:
                total.append(value if value is not None else arith.constant(index, offset))
            elif value is not None:
                total[dim] = arith.addi(total[dim], value)
    return total


def _first_value(mlir_ir: ModuleType, fill: OpView, tiles: _Tiles) -> Any:
    """What R reads on its first visit: the fill's value splatted, or the copy's source at
    the view's offsets (a read of the same vector type, in bounds: the copy's source has
    the filled buffer's shape)."""
    from mlir.dialects import arith, vector
    read = tiles.read
    vtype = read.results[0].type
    if fill.name == "linalg.fill":
        return arith.constant(vtype, mlir_ir.DenseElementsAttr.get_splat(vtype, fill.operands[0].owner.attributes["value"]))
    source = fill.operands[0]
    rank = mlir_ir.MemRefType(source.type).rank
    pad = read.operands[1 + rank]
    return vector.transfer_read(vtype, source, _offsets(mlir_ir, tiles.chain), read.attributes["permutation_map"],
                                pad, read.attributes["in_bounds"])


def _splat_read(mlir_ir: ModuleType, fill: OpView, tiles: _Tiles) -> None:
    """R -> the fill's value splatted (or the copy's source read), on the revisiting loops'
    first iteration (else R)."""
    from mlir.dialects import arith, scf
    read = tiles.read
    vtype = read.results[0].type
    with mlir_ir.InsertionPoint(read), read.location:
        if not tiles.revisiting:
            first_value = _first_value(mlir_ir, fill, tiles)
            read.results[0].replace_all_uses_with(first_value)
            read.erase()
            return
        first = None
        for loop in tiles.revisiting:
            at_lb = arith.cmpi(arith.CmpIPredicate.eq, loop.induction_variable, loop.operands[0])
            first = at_lb if first is None else arith.andi(first, at_lb)
        branch = scf.IfOp(first, [vtype], has_else=True)
    with mlir_ir.InsertionPoint(branch.then_block), read.location:
        scf.yield_([_first_value(mlir_ir, fill, tiles)])
    with mlir_ir.InsertionPoint(branch.else_block), read.location:
        again = read.clone(ip=mlir_ir.InsertionPoint(branch.else_block))
        scf.yield_([again.results[0]])
    read.results[0].replace_all_uses_with(branch.results[0])
    read.erase()


def start_tiles_from_fills(mlir_ir: ModuleType, module: Module) -> int:
    """The slot's rewrite (module docstring); the count of fills dropped."""
    count = 0
    orders: list[tuple[Any, dict[Any, int]]] = []      # (block, its ops' positions)
    for fill in walk_ops(mlir_ir, module, lambda op: _initialising(mlir_ir, op)):
        block = fill.operation.block
        order = next((o for b, o in orders if b == block), None)
        if order is None:
            order = {}
            orders.append((block, order))
        tiles = _tiles(mlir_ir, fill, order)
        if tiles is None:
            continue
        _splat_read(mlir_ir, fill, tiles)
        fill.operation.erase()
        count += 1
    return count
