"""-O2, right after --inline (the start of the "@tag-for-script" slot): a weight update
`w - s * g` whose gradient `g` is a product or a scatter accumulated from zero becomes that
accumulation started from a copy of `w`, with `-s` folded into the product's smaller
operand or into the scattered rows (GEMM's beta = 1).

Why: an SGD step writes each gradient, then reads it back with the weight to write the new
weight.  For the large StoryLM's [512, 8192] head that is a 16 MiB gradient written and read
again (a 1.0 ms pass of a 70 ms step), and for its [8192, 512] embedding a zero fill of the
whole table, 512 rows scattered into it, and the update pass over the whole table (0.7 +
1.7 ms).  Now the product writes the new weight itself (each parallel block first copies its
part of `w`: compiler/backend/block_fills.py), and the scatter adds its rows to a copy of
the table made by a parallel loop.  `w` itself is never written: it is the caller's array.

Takes the inlined tensor module; gives it with each such pair rewritten:
- `u = generic(w, s, g) { w - s * g }` (the product in either order), every loop parallel,
  `w`, `g` and `u` read and written through identity maps, `s` a broadcast scalar (a map
  without dims), a literal the body reads (`w - g * 0.01`: `u = generic(w, g) { w - 0.01 * g }`)
  or a filled tensor, f32 throughout, static
  shapes (a dynamic export's updates stay);
- `g` used only there, and made by a linalg.matmul (plain or reading A transposed) whose
  accumulator is a fill of zero, or by the scatter loop that `rewrites.rewrite_scatters` puts
  in (an scf.for tagged `kina.scatter_rows`) starting from a fill of zero;
becomes the product `(-s * a) @ b` (or `a @ (-s * b)`, whichever operand is smaller) into
`bufferization.alloc_tensor() copy(w)`, or the scatter of `-s * rows` into a copy of `w`
(an elementwise generic the tagging then threads).  Each gradient element then carries a sum
of `-s * a * b` terms instead of `-s` times their sum: the same value to rounding (the -O2
and -O0 builds are compared with the tolerances of a reordered sum, as for every tiled
product).  -O0 keeps the update as written.  After bufferization, `forward_scatter_results`
(the "@product-results" slot) lets a returned scatter write the caller's buffer.
Entry points: `accumulate_updates(mlir_ir, module) -> count`, `forward_scatter_results`.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from compiler.backend.bindings import walk_ops
from compiler.backend.fusion import elementwise, indexing_maps

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module, OpView, Value

SCATTER_TAG = "kina.scatter_rows"   # set on the scatter loop by emit_ops.scatter_rows_function
_UPDATE_BODY = ["arith.mulf", "arith.subf", "linalg.yield"]
# (s, the constant indices at which the update reads the tensor s), or (the f32 value s,
# None) when s is a filled tensor: a literal learning rate, `w - g * 0.01`
Factor = tuple[Any, list[Any] | None]


def _f32(mlir_ir: ModuleType, value: Value) -> bool:
    t = value.type
    return isinstance(t, mlir_ir.RankedTensorType) and str(mlir_ir.RankedTensorType(t).element_type) == "f32"


def _defining_op(mlir_ir: ModuleType, value: Value) -> OpView | None:
    """The op whose result `value` is; None for a block argument."""
    owner = value.owner
    return None if isinstance(owner, mlir_ir.Block) else owner


def _available_at(mlir_ir: ModuleType, value: Value, at: OpView) -> bool:
    """Whether `value` may be used by a new op right before `at`: a block argument of an
    enclosing block, or a result of an op before `at` in its block."""
    op = _defining_op(mlir_ir, value)
    if op is None:
        block = at.operation.block
        while block != value.owner:
            parent = block.owner
            if parent.operation.name == "func.func":
                return False
            block = parent.operation.block
        return True
    return bool(op.operation.block == at.operation.block and op.operation.is_before_in_block(at.operation))


def _zero_fill(mlir_ir: ModuleType, value: Value) -> OpView | None:
    """The linalg.fill of 0.0 that makes `value`, when the accumulation is its only use."""
    fill = _defining_op(mlir_ir, value)
    if fill is None or fill.name != "linalg.fill" or len(list(value.uses)) != 1:
        return None
    const = _defining_op(mlir_ir, fill.operands[0])
    if const is None or const.name != "arith.constant":
        return None
    attr = const.attributes["value"]
    return fill if isinstance(attr, mlir_ir.FloatAttr) and attr.value == 0.0 else None


def _update(mlir_ir: ModuleType, op: OpView) -> tuple[Value, Value, Any, Value] | None:
    """(w, s, the map's constant results at which s is read, g) when `op` is the update
    generic `w - s * g` described above, else None; for a literal s, (w, its f32 value,
    None, g): the scalar the body reads, or a filled tensor's value."""
    n_in = len(op.operands) - 1
    if not elementwise(mlir_ir, op) or n_in not in (2, 3):
        return None
    block = op.regions[0].blocks[0]
    body = list(block.operations)
    if [o.name for o in body] != _UPDATE_BODY:
        return None
    mul, sub, ret = body
    args = list(block.arguments)[:n_in]       # the inputs' arguments (the last is the output's)
    if sub.operands[1] != mul.results[0] or ret.operands[0] != sub.results[0] or sub.operands[0] not in args:
        return None
    w_at = args.index(sub.operands[0])
    factors = [args.index(v) for v in mul.operands if v in args]
    if w_at in factors:
        return None
    # the body's other factor, a scalar from outside it: a literal (compiler/backend/emit:
    # an elementwise op reads a splat's value, not a filled tensor)
    captured = [v for v in mul.operands if v not in args]
    maps = indexing_maps(mlir_ir, op)
    if n_in == 2:
        if len(factors) != 1 or len(captured) != 1 or str(captured[0].type) != "f32":
            return None
        s: Any = captured[0]
        s_at, g_at, fill = None, factors[0], None
    else:
        picked = _factor(mlir_ir, op, maps, factors)
        if picked is None:
            return None
        s_at, g_at, fill = picked
        s = fill.operands[0] if fill is not None else op.operands[s_at]
    identity = str(mlir_ir.AffineMap.get_identity(maps[-1].n_dims))
    if any(str(maps[i]) != identity for i in (w_at, g_at, n_in)) or not all(_f32(mlir_ir, v) for v in op.operands):
        return None
    w, g = op.operands[w_at], op.operands[g_at]
    if w.type != op.results[0].type or g.type != w.type or len(list(g.uses)) != 1:
        return None
    if fill is not None or s_at is None:
        return w, s, None, g
    return w, s, list(maps[s_at].results), g


def _factor(mlir_ir: ModuleType, op: OpView, maps: list[Any], factors: list[int]) -> tuple[int, int, Any] | None:
    """Of the two factors of a three-input update, (s's input, g's input, s's fill or None):
    s is the one read as a broadcast scalar (a map without dims) or made by a linalg.fill."""
    if len(factors) != 2:
        return None
    fills: dict[int, Any] = {}
    for i in factors:
        producer = _defining_op(mlir_ir, op.operands[i])
        if producer is not None and producer.name == "linalg.fill":
            fills[i] = producer
    scalar = [i for i in factors
              if all(isinstance(r, mlir_ir.AffineConstantExpr) for r in maps[i].results) or i in fills]
    if len(scalar) != 1:
        return None
    s_at = scalar[0]
    return s_at, next(i for i in factors if i != s_at), fills.get(s_at)


def _scaled(mlir_ir: ModuleType, at: OpView, x: Value, factor: Factor) -> Value:
    """A new generic right before `at`: -(s * x) over x's shape, for the factor (s, the
    constant indices at which the update read s)."""
    from mlir.dialects import arith, linalg, tensor

    t = mlir_ir.RankedTensorType(x.type)
    identity = mlir_ir.AffineMap.get_identity(t.rank)
    s, s_at = factor
    ins, maps = [x], [identity]
    if s_at is not None:        # a tensor read at constant indices (else the body uses the value)
        ins.append(s)
        maps.append(mlir_ir.AffineMap.get(t.rank, 0, s_at))
    parallel = mlir_ir.Attribute.parse("#linalg.iterator_type<parallel>")
    with mlir_ir.InsertionPoint(at), at.location:
        empty = tensor.EmptyOp(t.shape, t.element_type)
        gen = linalg.GenericOp([t], ins, [empty.result],
                               mlir_ir.ArrayAttr.get([mlir_ir.AffineMapAttr.get(m) for m in (*maps, identity)]),
                               mlir_ir.ArrayAttr.get([parallel] * t.rank))
        block = gen.regions[0].blocks.append(*[t.element_type] * (len(ins) + 1))
        with mlir_ir.InsertionPoint(block):
            scale = block.arguments[1] if s_at is not None else s
            linalg.YieldOp([arith.NegFOp(arith.MulFOp(scale, block.arguments[0]).result).result])
    return gen.results[0]


def _copy_of(mlir_ir: ModuleType, at: OpView, w: Value) -> Value:
    """A new tensor holding a copy of `w`, made right before `at`: the accumulation writes
    it in place, and `w` (an argument of an exported function, most often) must not be
    written.  block_fills turns the copy of a parallel product's accumulator into a copy
    per block."""
    from mlir.dialects import bufferization

    with mlir_ir.InsertionPoint(at), at.location:
        return bufferization.AllocTensorOp(w.type, [], copy=w).result


def _rows_copy(mlir_ir: ModuleType, at: OpView, w: Value) -> Value:
    """A copy of `w` right before `at` (the scatter's start) as an scf.forall that copies one
    row per iteration into a new tensor: "@threads" makes it a parallel loop, where an
    alloc_tensor copy is a memcpy on one core (16 MiB into a new result buffer: 2.2 ms,
    against 1.7 ms for the whole two-thread update it replaces).  Not an identity generic:
    the canonicalizer folds one of those into `w` itself, and the scatter then wrote the
    caller's array."""
    from mlir.dialects import scf, tensor

    t = mlir_ir.RankedTensorType(w.type)
    rest = list(t.shape[1:])
    offsets = [mlir_ir.ShapedType.get_dynamic_stride_or_offset()] + [0] * len(rest)
    sizes, strides = [1, *rest], [1] * t.rank
    with mlir_ir.InsertionPoint(at), at.location:
        row = mlir_ir.RankedTensorType.get([1, *rest], t.element_type)
        empty = tensor.EmptyOp(t.shape, t.element_type)
        loop = scf.ForallOp([0], [t.shape[0]], [1], shared_outs=[empty.result])
        i, out = loop.induction_variables[0], loop.inner_iter_args[0]
        with mlir_ir.InsertionPoint(loop.body):
            part = tensor.ExtractSliceOp(row, w, [i], [], [], offsets, sizes, strides)
        with mlir_ir.InsertionPoint(loop.terminator().block):
            tensor.ParallelInsertSliceOp(part.result, out, [i], [], [], offsets, sizes, strides)
    return loop.results[0]


def _elements(mlir_ir: ModuleType, value: Value) -> int:
    return math.prod(mlir_ir.RankedTensorType(value.type).shape)


def _into_product(mlir_ir: ModuleType, w: Value, factor: Factor, product: OpView) -> OpView | None:
    """The product `a @ b` of `w - s * (a @ b)` as the product of its smaller operand scaled
    by -s, into w; returns the fill it no longer reads (None: not taken)."""
    if len(product.operands) != 3 or not all(_f32(mlir_ir, v) for v in product.operands):
        return None
    fill = _zero_fill(mlir_ir, product.operands[2])
    if fill is None:
        return None
    small = 0 if _elements(mlir_ir, product.operands[0]) <= _elements(mlir_ir, product.operands[1]) else 1
    product.operands[small] = _scaled(mlir_ir, product, product.operands[small], factor)
    product.operands[2] = _copy_of(mlir_ir, product, w)
    return fill


def _into_scatter(mlir_ir: ModuleType, w: Value, factor: Factor, loop: OpView) -> OpView | None:
    """The scatter loop of `w - s * scatter(rows)` as the scatter of -s * rows into w;
    returns the fill it no longer reads (None: not taken)."""
    if len(loop.results) != 1 or SCATTER_TAG not in loop.attributes:
        return None
    init_at = len(loop.operands) - 1
    fill = _zero_fill(mlir_ir, loop.operands[init_at])
    body = loop.regions[0].blocks[0]
    inner = list(body.arguments)
    reads = [o for o in body.operations if o.name == "tensor.extract_slice" and o.operands[0] not in inner]
    if fill is None or len(reads) != 1 or not _f32(mlir_ir, reads[0].operands[0]):
        return None
    reads[0].operands[0] = _scaled(mlir_ir, loop, reads[0].operands[0], factor)
    loop.operands[init_at] = _rows_copy(mlir_ir, loop, w)
    return fill


def accumulate_updates(mlir_ir: ModuleType, module: Module, min_elements: int) -> int:
    """Every update generic of the forms above rewritten where it pays; returns how many.
    Run after the matmuls are tagged (compiler/backend/parallelize.py): only a product tagged
    `kina.parallel` (a threaded tile loop, whose sum -O2 already orders its own way) and a
    scatter into a weight of `min_elements` or more (one a thread loop copies) are taken;
    a small step's updates stay as written, the same bits as at -O0 (docs/compiling.md
    "Numerics across levels")."""
    done = 0
    for op in walk_ops(mlir_ir, module, lambda o: o.name == "linalg.generic"):
        found = _update(mlir_ir, op)
        if found is None:
            continue
        w, s, s_at, g = found
        acc = _defining_op(mlir_ir, g)
        # a dynamic export's updates stay: their copies would need the sizes read at the call
        if (acc is None or not mlir_ir.RankedTensorType(w.type).has_static_shape
                or not (_available_at(mlir_ir, w, acc) and _available_at(mlir_ir, s, acc))):
            continue
        if acc.name == "linalg.matmul" and "kina.parallel" in acc.attributes:
            fill = _into_product(mlir_ir, w, (s, s_at), acc)
        elif acc.name == "scf.for" and _elements(mlir_ir, w) >= min_elements:
            fill = _into_scatter(mlir_ir, w, (s, s_at), acc)
        else:
            continue
        if fill is None:
            continue
        op.results[0].replace_all_uses_with(acc.results[0])
        op.erase()
        fill.erase()
        done += 1
    return done


def forward_scatter_results(mlir_ir: ModuleType, module: Module) -> int:
    """After one-shot bufferization ("@product-results"): each tagged scatter loop's memref
    result, which is its init buffer (the body yields its iteration argument), is replaced by
    that buffer.  A loop result cannot become the function's out-parameter (only a
    memref.alloc can), so a scatter whose result is returned (the updated embedding) was
    copied whole into the caller's buffer after the loop; returns how many results moved."""
    moved = 0
    for loop in walk_ops(mlir_ir, module, lambda o: o.name == "scf.for" and SCATTER_TAG in o.attributes):
        body = loop.regions[0].blocks[0]
        ret = list(body.operations)[-1]
        n_inits = len(loop.results)
        for k, result in enumerate(loop.results):
            init = loop.operands[len(loop.operands) - n_inits + k]
            if (isinstance(result.type, mlir_ir.MemRefType) and ret.operands[k] == body.arguments[1 + k]
                    and list(result.uses)):
                result.replace_all_uses_with(init)
                moved += 1
    return moved
