"""Threads chosen at the call for a dynamic export's parallel loops (issue 25), and the tags of
its transposes (`tag_transpose`).

A static kernel is made parallel or not when it is built (compiler/backend/parallelize.py's
PARALLEL_MIN_FLOPS, loop_tags.py's PARALLEL_TRANSPOSE_MIN).  A dynamic export's sizes are known at the call
only: one library serves StoryLM-0's [4, 8] products, where a parallel loop would cost more
than the product, and the scaled model's [256, 2048] ones, where two cores halve the time.
So its matmuls and transposes are always tiled into an scf.forall, and the same size test is
made at the call: `scf.if %big { the forall } else { the same iterations as an scf.for nest }`.
Each iteration computes what it would on any thread, so the results are the same either way.
(An `if` operand on the omp.parallel did the same with one loop, but a false one still went
through libomp's serialized region and its loop dispatch: StoryLM-0's dynamic
step took 16.2 us against 9.2 before the foralls; with the serial twin 10.3.)

Two steps, because the forall exists only after the transform script, and the op's sizes
are simplest to read before it:

- `mark` (the "@tag-for-script" slot, tensor level): before the op, the size test as index
  arithmetic on its operands' dims, passed to a call of the declaration
  `@kina.parallel_if(i1)`: a call, so no pass removes or moves it, and the forall the script
  makes of the op takes the op's place right after it;
- `apply` (the "@parallel-if" slot, right before "@threads", after "@outline": a forall's
  body is then subviews and calls of its outlined kernels, cheap to have twice): each
  marker's value picks between the next scf.forall of its block and its serial twin; the
  calls and the declaration are erased.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compiler.backend.bindings import walk_ops
from compiler.backend.transform_dynamic import dynamic_transpose_block

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module, OpView, Value

MARKER = "kina.parallel_if"
SLOT = "@parallel-if"
_SGE = 5          # arith.cmpi predicate sge
_DYNAMIC = -9223372036854775808   # ShapedType::kDynamic in a forall's static bounds


def _index(mlir_ir: ModuleType, n: int) -> Value:
    t = mlir_ir.IndexType.get()
    return mlir_ir.Operation.create("arith.constant", results=[t],
                                    attributes={"value": mlir_ir.IntegerAttr.get(t, n)}).results[0]


def dim(mlir_ir: ModuleType, value: Value, d: int) -> Value:
    """Dim d of a ranked tensor as an index value (a constant when static)."""
    t = mlir_ir.RankedTensorType(value.type)
    if not t.is_dynamic_dim(d):
        return _index(mlir_ir, t.shape[d])
    return mlir_ir.Operation.create("tensor.dim", results=[mlir_ir.IndexType.get()],
                                    operands=[value, _index(mlir_ir, d)]).results[0]


def _binary(mlir_ir: ModuleType, name: str, a: Value, b: Value) -> Value:
    return mlir_ir.Operation.create(name, results=[a.type], operands=[a, b]).results[0]


def product(mlir_ir: ModuleType, factors: list[Value]) -> Value:
    out = factors[0]
    for f in factors[1:]:
        out = _binary(mlir_ir, "arith.muli", out, f)
    return out


def numel(mlir_ir: ModuleType, value: Value) -> Value:
    rank = mlir_ir.RankedTensorType(value.type).rank
    return product(mlir_ir, [dim(mlir_ir, value, d) for d in range(rank)] or [_index(mlir_ir, 1)])


def at_least(mlir_ir: ModuleType, value: Value, bound: int) -> Value:
    return mlir_ir.Operation.create("arith.cmpi", results=[mlir_ir.IntegerType.get_signless(1)],
                                    operands=[value, _index(mlir_ir, bound)],
                                    attributes={"predicate": mlir_ir.IntegerAttr.get(
                                        mlir_ir.IntegerType.get_signless(64), _SGE)}).results[0]


def both(mlir_ir: ModuleType, a: Value, b: Value) -> Value:
    return _binary(mlir_ir, "arith.andi", a, b)


def either(mlir_ir: ModuleType, a: Value, b: Value) -> Value:
    return _binary(mlir_ir, "arith.ori", a, b)


def matmul_test(mlir_ir: ModuleType, op: OpView, min_flops: int) -> Value:
    """At the call: 2 * (batch) * M * N * K >= min_flops (parallelize's static rule)."""
    c, a = op.operands[2], op.operands[0]   # the init has the result's shape (the result is not yet)
    rank = mlir_ir.RankedTensorType(c.type).rank
    factors = [dim(mlir_ir, c, d) for d in range(rank)] + [dim(mlir_ir, a, rank - 1)]
    return at_least(mlir_ir, product(mlir_ir, factors), (min_flops + 1) // 2)


def mark(mlir_ir: ModuleType, module: Module, op: OpView, test: Callable[[], Value]) -> None:
    """Before `op`: the call `@kina.parallel_if(test())`, `test` building its i1 there."""
    with mlir_ir.InsertionPoint(op), op.location:
        cond = test()
        mlir_ir.Operation.create("func.call", operands=[cond],
                                 attributes={"callee": mlir_ir.FlatSymbolRefAttr.get(MARKER)})
    _declare(mlir_ir, module)


def specialise(mlir_ir: ModuleType, op: OpView, test: Callable[[], Value]) -> OpView:
    """In `op`'s place: `scf.if test() { a copy of op } else { op }`, `test` building its i1
    before the if.  Returns the copy, for the caller to tag for the transform script: a body
    specialised for the sizes the test admits, picked at the call (as the foralls' serial
    twins are).  The two compute the same values: the script only tiles them differently."""
    with mlir_ir.InsertionPoint(op), op.location:
        cond = test()
        branch = mlir_ir.Operation.create("scf.if", results=[r.type for r in op.results],
                                          operands=[cond], regions=2)
    then_block, else_block = branch.regions[0].blocks.append(), branch.regions[1].blocks.append()
    with op.location:
        copy = op.operation.clone(ip=mlir_ir.InsertionPoint(then_block))
        mlir_ir.Operation.create("scf.yield", operands=list(copy.results), ip=mlir_ir.InsertionPoint(then_block))
        kept = mlir_ir.Operation.create("scf.yield", operands=list(op.results), ip=mlir_ir.InsertionPoint(else_block))
    for old, new in zip(op.results, branch.results):
        old.replace_all_uses_except(new, kept)
    op.operation.move_before(kept)
    return copy.opview


def _declare(mlir_ir: ModuleType, module: Module) -> None:
    body = module.body
    for f in body.operations:
        if f.operation.name == "func.func" and mlir_ir.StringAttr(f.attributes["sym_name"]).value == MARKER:
            return
    decl = mlir_ir.Module.parse(f'func.func private @"{MARKER}"(i1)', module.context)
    body.append(decl.body.operations[0].detach_from_parent())


def _is_marker(mlir_ir: ModuleType, op: OpView) -> bool:
    return (op.name == "func.call" and "callee" in op.attributes
            and mlir_ir.FlatSymbolRefAttr(op.attributes["callee"]).value == MARKER)


def apply(mlir_ir: ModuleType, module: Module) -> int:
    """Each marker's value picks, at the call, between the next scf.forall of its block and a
    serial copy of it: `scf.if %big { forall } else { scf.for nest }`.  The copy's body is the
    forall's (after "@outline": subviews and calls of the outlined kernels), so the kernels are
    not duplicated.  The markers and their declaration are erased.  Returns how many foralls
    got a serial twin."""
    markers = walk_ops(mlir_ir, module, lambda op: _is_marker(mlir_ir, op))
    blocks: list[Any] = []
    for m in markers:
        block = m.operation.block
        if all(block != b for b in blocks):
            blocks.append(block)
    made = 0
    for block in blocks:
        pending = None
        for op in list(block.operations):
            if _is_marker(mlir_ir, op.operation):
                pending = op.operands[0]
            elif op.operation.name == "scf.forall" and pending is not None:
                made += _with_serial_twin(mlir_ir, op.operation, pending)
                pending = None
    for m in markers:
        m.operation.erase()
    for f in list(module.body.operations):
        if f.operation.name == "func.func" and mlir_ir.StringAttr(f.attributes["sym_name"]).value == MARKER:
            f.operation.erase()
    return made


def _bounds(mlir_ir: ModuleType, forall: OpView) -> list[list[Value]]:
    """[lower bounds, upper bounds, steps] of a forall as index values (constants made here)."""
    segments = list(mlir_ir.DenseI32ArrayAttr(forall.attributes["operandSegmentSizes"]))
    operands = list(forall.operands)
    dynamic = [operands[sum(segments[:k]):sum(segments[:k + 1])] for k in range(3)]
    out = []
    for k, name in enumerate(("staticLowerBound", "staticUpperBound", "staticStep")):
        values, it = [], iter(dynamic[k])
        for x in mlir_ir.DenseI64ArrayAttr(forall.attributes[name]):
            values.append(next(it) if x == _DYNAMIC else _index(mlir_ir, x))
        out.append(values)
    return out


def _with_serial_twin(mlir_ir: ModuleType, forall: OpView, cond: Value) -> int:
    """`scf.if %cond { forall } else { its iterations as an scf.for nest, in order }`.
    Returns 1, or 0 (left alone) for a forall with results (not bufferized)."""
    from mlir.dialects import scf

    if len(forall.results):
        return 0
    loc = forall.location
    with mlir_ir.InsertionPoint(forall), loc:
        lbs, ubs, steps = _bounds(mlir_ir, forall)
        branch = scf.IfOp(cond, has_else=True)
    with mlir_ir.InsertionPoint(branch.then_block), loc:
        then_end = scf.YieldOp([])
    forall.move_before(then_end)
    twin = forall.clone(ip=mlir_ir.InsertionPoint(branch.else_block))
    ip, ivs, inner = mlir_ir.InsertionPoint(branch.else_block), [], None
    for lb, ub, step in zip(lbs, ubs, steps):
        with ip, loc:
            loop = scf.ForOp(lb, ub, step)
        with mlir_ir.InsertionPoint(loop.body), loc:
            scf.YieldOp([])
        ivs.append(loop.induction_variable)
        inner = loop.body
        ip = mlir_ir.InsertionPoint.at_block_begin(loop.body)
    with mlir_ir.InsertionPoint(branch.else_block), loc:
        scf.YieldOp([])
    body = twin.regions[0].blocks[0]
    for arg, iv in zip(body.arguments, ivs):
        arg.replace_all_uses_with(iv)
    for op in list(body.operations):
        if op.operation.name == "scf.forall.in_parallel":
            continue
        op.operation.detach_from_parent()
        mlir_ir.InsertionPoint.at_block_terminator(inner).insert(op.operation)
    twin.operation.erase()
    return 1


def tag_transpose(mlir_ir: ModuleType, module: Module, op: OpView, j: int, block: int, min_elements: int) -> None:
    """A dynamic export's transpose moving its input's innermost dim to output dim j
    (transform_dynamic.DYNAMIC_TRANSPOSES): tagged with its dims j and rank - 1 peeled unless
    static multiples of the tile `block`; threads at the call when it has `min_elements`
    elements and two blocks of dim 0."""
    out = op.operands[1]   # the init has the result's shape
    t = mlir_ir.RankedTensorType(out.type)
    r = t.rank
    peel = [int(t.is_dynamic_dim(d) or t.shape[d] % block != 0) for d in (j, r - 1)]
    op.attributes["kina.transpose_peeled"] = mlir_ir.DenseI64ArrayAttr.get([r, j, *peel])

    def test() -> Value:
        big = at_least(mlir_ir, numel(mlir_ir, out), min_elements)
        return both(mlir_ir, big, at_least(mlir_ir, dim(mlir_ir, out, 0), 2 * dynamic_transpose_block(j, block)))
    mark(mlir_ir, module, op, test)
