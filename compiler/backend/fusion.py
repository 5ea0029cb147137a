"""Elementwise fusion at -O2: an elementwise linalg.generic whose only use is an input of
another linalg.generic moves into that consumer, so the pair is one loop nest and the
producer's tensor is never written to memory.

Why not upstream `linalg-fuse-elementwise-ops`: it also propagates reshapes by expanding
the ops around them, which turns the named matmuls next to a reshape into generics (no
longer the vectorised, threaded kernels of the transform script), and it fuses wherever
a producer has one use, recomputing a producer per iteration of consumer loops that do
not index it (the scaled step ran 40x slower with it).  This rewrite fuses only when no
work is repeated:

- the consumer's indexing map of the fused operand is a permutation of all its loops
  (each producer element is computed exactly once: chains of elementwise ops, and an
  elementwise op feeding a reduction over the same loops, e.g. exp before a sum), or
- the producer is a pure copy (its body yields one of its inputs: a broadcast, which
  becomes a broadcasting read in the consumer; nothing is recomputed but a load), or
- the producer is cheap and read by several consumers that could each fuse it: it reads
  no operand element by element (only broadcasts: a row's index and value) and has a short
  body without math calls; each reader gets its own clone (`_split_cheap_producers`), so
  the tensor is never written: the take_along_axis VJP's one-hot cotangent, read by a row
  sum and by the log_softmax VJP, costs no [B * T, V] pass of its own.

A producer with a math call (log, tanh, ...) is not fused into a reduction: LLVM vectorises
no float reduction loop (that would reassociate its adds), so the producer's libmvec vector
calls would become a scalar call per element (a [256, 2048] log_softmax: 1.6 -> 2.6 ms).
Nor into a consumer that has math ops of its own: with an exp and a log in one loop,
LLVM vectorised the threaded and the serial build of a kernel differently (libmvec's
vector logf and libm's scalar logf differ in the last bit), and those two builds must
agree bit for bit.  Each element is computed by the same scalar operations in the same order as before, so
results are bit-identical (no new fused multiply-adds: the ops stay separate arith ops).
Producers with a body that has regions, or an index op the new loop order would change,
stay as they are.  (math_lowering's exp is arithmetic by the time this runs: engine.py
lowers it first, so a sum of exps is one loop.)  It runs on the emitted tensor IR before
the -O2 tagging (fused ops are new ops, tagged like any other), after `rewrite_scatters`
(the scatter generic it matches must keep its exact form); consumers are visited in program order, so a whole
chain folds into its last consumer in one pass.  -O0 keeps every op: the differential
tests compare the two.  KINA_FUSE=0 turns it off (to measure what it gains).
"""
from __future__ import annotations

import os
from types import ModuleType
from typing import Any

Bindings = ModuleType   # the MLIR Python bindings' `ir` module (untyped: no stubs)


def enabled() -> bool:
    """Whether -O2 fuses (KINA_FUSE=0 turns it off; part of the build cache's key)."""
    return os.environ.get("KINA_FUSE", "").strip().lower() not in ("0", "off", "false", "no")


def _segments(op: Any) -> tuple[int, int]:
    """(number of inputs, number of inits) of a linalg.generic."""
    sizes = list(op.attributes["operandSegmentSizes"])
    return int(sizes[0]), int(sizes[1])


def indexing_maps(mlir_ir: Bindings, op: Any) -> list[Any]:
    """A linalg.generic's indexing maps (AffineMap values), inputs then inits."""
    return [mlir_ir.AffineMapAttr(m).value for m in mlir_ir.ArrayAttr(op.attributes["indexing_maps"])]


def _body(op: Any) -> Any:
    return op.regions[0].blocks[0]


def _all_parallel(mlir_ir: Bindings, op: Any) -> bool:
    return all(str(i).endswith("parallel>") for i in mlir_ir.ArrayAttr(op.attributes["iterator_types"]))


def _is_copy(mlir_ir: Bindings, op: Any) -> bool:
    """The body is `linalg.yield %in` of one of its input block arguments."""
    ops = list(_body(op).operations)
    if len(ops) != 1:
        return False
    v = ops[0].operands[0]
    n_in, _ = _segments(op)
    return isinstance(v, mlir_ir.BlockArgument) and v.owner == _body(op) and v.arg_number < n_in


def _compose(mlir_ir: Bindings, inner: Any, outer: Any) -> Any | None:
    """inner o outer for maps whose results are dims or constants (None otherwise)."""
    exprs = []
    for e in inner.results:
        if isinstance(e, mlir_ir.AffineDimExpr):
            exprs.append(outer.results[e.position])
        elif isinstance(e, mlir_ir.AffineConstantExpr):
            exprs.append(e)
        else:
            return None
    if not all(isinstance(x, mlir_ir.AffineDimExpr) or isinstance(x, mlir_ir.AffineConstantExpr) for x in exprs):
        return None
    return mlir_ir.AffineMap.get(outer.n_dims, 0, exprs)


def _covers_loops(mlir_ir: Bindings, maps: list[Any], n_dims: int) -> bool:
    """Every loop still gets its size from some operand (a dim expr of some map)."""
    seen = {e.position for m in maps for e in m.results if isinstance(e, mlir_ir.AffineDimExpr)}
    return seen == set(range(n_dims))


def elementwise(mlir_ir: Bindings, op: Any) -> bool:
    """A linalg.generic of one result, parallel loops, an identity result map and a body that
    never reads its init (each element computed from its inputs alone)."""
    if op.name != "linalg.generic" or len(op.results) != 1 or not _all_parallel(mlir_ir, op):
        return False
    n_in, n_init = _segments(op)
    out = indexing_maps(mlir_ir, op)[-1]
    return (n_init == 1 and out == mlir_ir.AffineMap.get_identity(out.n_dims)
            and not list(_body(op).arguments[n_in].uses))


def _producer(mlir_ir: Bindings, consumer: Any, index: int, single_use: bool = True) -> Any | None:
    """The fusable producer of the consumer's input `index`, or None (`single_use`: only when
    the consumer is its one reader)."""
    value = consumer.operands[index]
    if not isinstance(value, mlir_ir.OpResult):
        return None
    producer = value.owner.operation
    if not elementwise(mlir_ir, producer) or producer.block != consumer.block:
        return None
    if single_use and len(list(value.uses)) != 1:
        return None
    n_in, _ = _segments(producer)
    maps = indexing_maps(mlir_ir, producer)
    body = _body(producer)
    cmap = indexing_maps(mlir_ir, consumer)[index]
    if cmap.n_dims == 0 or len(cmap.results) != maps[-1].n_dims:
        return None
    ops = list(body.operations)
    if any(len(o.regions) for o in ops):
        return None
    if any(math_call(o) for o in ops):
        if not _all_parallel(mlir_ir, consumer):
            return None   # a reduction loop stays scalar: its exp / log would lose their vector calls
        if any(math_call(o) for o in _body(consumer).operations):
            return None   # one loop, one source of math calls (see the module docstring)
    if _is_copy(mlir_ir, producer):
        return producer
    if not cmap.is_permutation:
        return None
    if any(o.name == "linalg.index" for o in ops) and cmap != mlir_ir.AffineMap.get_identity(cmap.n_dims):
        return None
    return producer


# math ops that are one instruction (or a few), never a libm / libmvec call: math_lowering's
# exp polynomial is made of these, and a producer of them fuses like plain arithmetic.
_INSTRUCTIONS = {"math.fma", "math.roundeven", "math.absf", "math.copysign", "math.floor", "math.ceil",
                 "math.trunc", "math.round", "math.sqrt"}


# A cheap producer's body has at most this many ops (the one-hot cotangent's has 7; a
# random_bits counter hash, which reads no operand either, has dozens).
CHEAP_OPS = 12


def math_call(op: Any) -> bool:
    """Whether the op becomes a libm / libmvec call (not one of _INSTRUCTIONS)."""
    return bool(op.name.startswith("math.") and op.name not in _INSTRUCTIONS)


def _cheap(mlir_ir: Bindings, producer: Any) -> bool:
    """Whether recomputing the producer in each reader costs less than writing and reading its
    result: it reads no operand element by element (each input is read through a map over
    fewer loops, a broadcast: a row's index and value) and calls no math function."""
    n_in, _ = _segments(producer)
    maps = indexing_maps(mlir_ir, producer)
    reads_all = any(m.is_permutation and m.n_dims == maps[-1].n_dims for m in maps[:n_in])
    ops = list(_body(producer).operations)
    return not reads_all and len(ops) <= CHEAP_OPS and not any(math_call(o) for o in ops)


def _split_cheap_producers(mlir_ir: Bindings, block: Any) -> int:
    """A cheap producer (`_cheap`) read by several generics gets a clone for each reader that
    can fuse it, so that reader computes it instead of reading it back; the original stays
    for one fusing reader, or is still written for readers that cannot fuse it (a row sum
    of the take_along_axis VJP's one-hot [B * T, V] cotangent: no operand sizes its loop
    over V once the one-hot is fused; the log_softmax VJP fuses its clone).  A clone
    computes the same scalar ops: results are unchanged.  Returns the count of clones."""
    count = 0
    for op in list(block.operations):
        op = op.operation
        if op.name != "linalg.generic" or len(op.results) != 1:
            continue
        uses = [(getattr(u.owner, "operation", u.owner), u.operand_number) for u in op.results[0].uses]
        if len(uses) < 2 or not _cheap(mlir_ir, op):
            continue
        fusing = [(c, i) for c, i in uses if getattr(c, "name", None) == "linalg.generic" and i < _segments(c)[0]
                  and _producer(mlir_ir, c, i, single_use=False) is not None
                  and _fused_maps(mlir_ir, c, i, op) is not None]
        # every reader fuses: the first takes the original; else the original stays for the others
        for consumer, index in fusing[1:] if len(fusing) == len(uses) else fusing:
            clone = op.clone(ip=mlir_ir.InsertionPoint(op))
            consumer.operands[index] = clone.results[0]
            count += 1
    return count


def _recomputable(mlir_ir: Bindings, producer: Any) -> bool:
    """An elementwise generic whose element at (i, ...) can be computed where it is read:
    parallel loops, an identity result map its body never reads, tensor inputs read through
    maps of loop dims and constants, and a body of plain ops (no regions, no linalg.index,
    no math call)."""
    if not elementwise(mlir_ir, producer):
        return False
    n_in, _ = _segments(producer)
    maps = indexing_maps(mlir_ir, producer)
    body = _body(producer)
    if not all(isinstance(v.type, mlir_ir.RankedTensorType) for v in list(producer.operands)[:n_in]):
        return False
    if any(len(o.regions) or o.name == "linalg.index" or math_call(o) for o in body.operations):
        return False
    return all(isinstance(e, (mlir_ir.AffineDimExpr, mlir_ir.AffineConstantExpr))
               for m in maps[:n_in] for e in m.results)


def _trip_count(mlir_ir: Bindings, op: Any) -> int | None:
    """How many iterations a static linalg.generic runs (None: a loop of dynamic size)."""
    extents: dict[int, int] = {}
    maps = indexing_maps(mlir_ir, op)
    for m, v in zip(maps, op.operands):
        if not isinstance(v.type, mlir_ir.RankedTensorType):
            continue
        shape = mlir_ir.RankedTensorType(v.type).shape
        for r, e in enumerate(m.results):
            if isinstance(e, mlir_ir.AffineDimExpr) and shape[r] >= 0:
                extents.setdefault(e.position, shape[r])
    if len(extents) != maps[0].n_dims:
        return None
    count = 1
    for x in extents.values():
        count *= x
    return count


def _recompute_at(mlir_ir: Bindings, extract: Any, producer: Any) -> None:
    """Replace `tensor.extract %producer[idx]` by the producer's body on its inputs' elements
    at idx (each read through its map)."""
    from mlir.dialects import arith, tensor

    idx = list(extract.operands)[1:]
    n_in, _ = _segments(producer)
    pbody = _body(producer)
    values: dict[Any, Any] = {}
    with mlir_ir.InsertionPoint(extract), extract.location:
        for k, m in enumerate(indexing_maps(mlir_ir, producer)[:n_in]):
            at = [idx[e.position] if isinstance(e, mlir_ir.AffineDimExpr)
                  else arith.ConstantOp(mlir_ir.IndexType.get(), e.value).result for e in m.results]
            values[pbody.arguments[k]] = tensor.ExtractOp(producer.operands[k], at).result
        *ops, yielded = list(pbody.operations)
        for op in ops:
            clone = op.operation.clone(ip=mlir_ir.InsertionPoint(extract))
            for i, operand in enumerate(clone.operands):
                if operand in values:
                    clone.operands[i] = values[operand]
            values.update(zip(op.results, clone.results))
    result = yielded.operands[0]
    extract.results[0].replace_all_uses_with(values.get(result, result))
    extract.erase()


def _fuse_into_extracts(mlir_ir: Bindings, block: Any) -> int:
    """A generic that reads single elements of an elementwise generic's result (`tensor.extract`
    in its body: a gather, the picked log-probabilities of a cross-entropy) computes them
    there instead, when it reads no more elements than the producer has; a producer left
    without readers is erased.  Then the log_softmax output that the loss picks from and
    its VJP reads is never written: the VJP fuses it (one use left).  The same scalar ops
    on the same inputs: results are unchanged.  Returns how many reads were replaced."""
    count = 0
    for consumer in list(block.operations):
        consumer = consumer.operation
        if consumer.name != "linalg.generic":
            continue
        reads = _trip_count(mlir_ir, consumer)
        while reads is not None:    # again: a recomputed element may read another producer's
            found = _recomputable_extract(mlir_ir, consumer, reads)
            if found is None:
                break
            ext, producer = found
            _recompute_at(mlir_ir, ext, producer)
            count += 1
            if not list(producer.results[0].uses):
                producer.erase()
    return count


def _recomputable_extract(mlir_ir: Bindings, consumer: Any, reads: int) -> tuple[Any, Any] | None:
    """(a tensor.extract of the consumer's body, its producer) that `_fuse_into_extracts` may
    replace: a recomputable producer in the consumer's block with at least `reads` elements."""
    for ext in _body(consumer).operations:
        src = ext.operands[0] if ext.name == "tensor.extract" else None
        if not isinstance(src, mlir_ir.OpResult):
            continue
        producer = getattr(src.owner, "operation", src.owner)
        if producer.block != consumer.block or not _recomputable(mlir_ir, producer):
            continue
        size = _trip_count(mlir_ir, producer)
        if size is not None and reads <= size:
            return ext.operation, producer
    return None


def _fused_maps(mlir_ir: Bindings, consumer: Any, index: int, producer: Any) -> list[Any] | None:
    """The indexing maps of the consumer with the producer of its input `index` fused in, or
    None when they cannot be composed or leave a loop that no operand sizes."""
    p_in, _ = _segments(producer)
    cmaps, pmaps = indexing_maps(mlir_ir, consumer), indexing_maps(mlir_ir, producer)
    composed = [_compose(mlir_ir, m, cmaps[index]) for m in pmaps[:p_in]]
    if any(m is None for m in composed):
        return None
    maps = cmaps[:index] + composed + cmaps[index + 1:]
    return maps if _covers_loops(mlir_ir, maps, cmaps[index].n_dims) else None


def _fuse(mlir_ir: Bindings, consumer: Any, index: int, producer: Any) -> Any | None:
    """The consumer with the producer of its input `index` fused in (a new op), or None."""
    n_in, n_init = _segments(consumer)
    p_in, _ = _segments(producer)
    maps = _fused_maps(mlir_ir, consumer, index, producer)
    if maps is None:
        return None
    c_ops, p_ops = list(consumer.operands), list(producer.operands)
    operands = c_ops[:index] + p_ops[:p_in] + c_ops[index + 1:]
    cbody, pbody = _body(consumer), _body(producer)
    cargs, pargs = list(cbody.arguments), list(pbody.arguments)
    attrs = {name: consumer.attributes[name] for name in consumer.attributes}
    attrs["indexing_maps"] = mlir_ir.ArrayAttr.get([mlir_ir.AffineMapAttr.get(m) for m in maps])
    attrs["operandSegmentSizes"] = mlir_ir.DenseI32ArrayAttr.get([n_in - 1 + p_in, n_init])
    with consumer.location:
        fused = mlir_ir.Operation.create("linalg.generic", results=[r.type for r in consumer.results],
                                    operands=operands, attributes=attrs, regions=1,
                                    ip=mlir_ir.InsertionPoint(consumer))
        types = [a.type for a in cargs[:index]] + [a.type for a in pargs[:p_in]] + [a.type for a in cargs[index + 1:]]
        block = fused.regions[0].blocks.append(*types)
    fargs = list(block.arguments)
    *p_body, p_yield = list(pbody.operations)
    value = p_yield.operands[0]
    if isinstance(value, mlir_ir.BlockArgument) and value.owner == pbody:
        value = fargs[index + value.arg_number]
    for op in p_body:
        block.append(op.operation)
    for op in list(cbody.operations):
        block.append(op.operation)
    for k, arg in enumerate(pargs[:p_in]):
        arg.replace_all_uses_with(fargs[index + k])
    for k, arg in enumerate(cargs):
        if k == index:
            arg.replace_all_uses_with(value)
        else:
            arg.replace_all_uses_with(fargs[k if k < index else k - 1 + p_in])
    for old, new in zip(consumer.results, fused.results):
        old.replace_all_uses_with(new)
    consumer.erase()
    producer.erase()
    return fused


def _fuse_into(mlir_ir: Bindings, consumer: Any) -> int:
    """Fuse producers into `consumer` (and into the op that replaces it) until none is left."""
    count = 0
    changed = True
    while changed:
        changed = False
        n_in, _ = _segments(consumer)
        for index in range(n_in):
            producer = _producer(mlir_ir, consumer, index)
            fused = _fuse(mlir_ir, consumer, index, producer) if producer is not None else None
            if fused is not None:
                consumer, changed = fused, True
                count += 1
                break
    return count


def fuse_elementwise(mlir_ir: Bindings, module: Any) -> int:
    """Fuse elementwise producers into their consumers in every function; returns the count."""
    count = 0
    for fn in module.body.operations:
        if fn.operation.name != "func.func" or not len(fn.regions[0].blocks):
            continue
        _fuse_into_extracts(mlir_ir, fn.regions[0].blocks[0])
        _split_cheap_producers(mlir_ir, fn.regions[0].blocks[0])
        for op in list(fn.regions[0].blocks[0].operations):
            if op.operation.name == "linalg.generic":
                count += _fuse_into(mlir_ir, op.operation)
    return count
