"""Per-op MLIR lowerings: LOWERINGS[op name] -> emitter, one row per row of ops.OPS.

An emitter is `fn(em, node, args, out) -> str`: `em` is the function's
FnEmitter (compiler/backend/emit/program.py), `node` the ir.OpApp (types and attributes),
`args` the SSA names of its operands, `out` the name its final op must define.

Float ops compute in f32 (em.load / em.store convert F16/BF16 storage), and
reductions and matmuls accumulate in f32 before converting back; an op touching F64
computes and accumulates in f64 instead (`em.F`, the op's compute type).  Index
operands are bounds-checked with one all-reduction linalg.generic and a
cf.assert (em.bounds_check) before they are used by `tensor.extract`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from compiler.backend.emit.builder import Body, Emitter, FnEmitter, Ty, identity, keep_axis, ty
from compiler.backend.emit.ops_ext import EXT_LOWERINGS, GELU, GELU_GRAD
from compiler.backend.emit.ops_random import RANDOM_LOWERINGS
from compiler.backend.emit.ops_scan import SCAN_LOWERINGS
from compiler.backend.emit.ops_sort import DESCENDING, SORT_LOWERINGS
from compiler.core.sizes import Dim, Size, SizeNumber
from compiler.core.types import TensorType
from compiler.ir import nodes as ir


def _t(e: ir.Expr) -> Ty:
    return ty(e.type)


def _acc(em: FnEmitter, t: Ty) -> Ty:
    """Accumulator type: the compute type for floats (f32, f64 for F64), the element type itself for integers."""
    return t if t.elem.startswith("i") else t.with_elem(em.F)


# ---- elementwise -------------------------------------------------------------
# Scalar bodies over f32 values: fn(em, operands) -> result.
def _f(name: str) -> Callable[[FnEmitter, str, str], str]:
    return lambda em, a, b: em.op(f"arith.{name} {a}, {b} : {em.F}")


def _math(name: str) -> Callable[[FnEmitter, str], str]:
    return lambda em, x: em.op(f"math.{name} {x} : {em.F}")


def _sigmoid(em: FnEmitter, x: str) -> str:
    # 1 / (1 + e^-x): exact at both tails (e^-x -> inf gives 0, -> 0 gives 1).
    e = em.op(f"math.exp {em.op(f'arith.negf {x} : {em.F}')} : {em.F}")
    one = em.scalar(1.0, em.F)
    return em.op(f"arith.divf {one}, {em.op(f'arith.addf {one}, {e} : {em.F}')} : {em.F}")


def _relu(em: FnEmitter, x: str) -> str:
    return em.op(f"arith.maximumf {x}, {em.scalar(0.0, em.F)} : {em.F}")


def _relu_grad(em: FnEmitter, g: str, x: str) -> str:
    # g where x > 0, else 0 (an ordered compare: NaN x gives 0, like numpy.where(x > 0, g, 0)).
    zero = em.scalar(0.0, em.F)
    return em.op(f"arith.select {em.op(f'arith.cmpf ogt, {x}, {zero} : {em.F}')}, {g}, {zero} : {em.F}")


def elementwise(scalar: Body) -> Emitter:
    """The lowering of an elementwise op whose f32 scalar body is `scalar(em, *operands)`."""
    def lower_elementwise(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
        """`linalg.generic` with an `arith` / `math` body: operands loaded to f32, the result stored in its dtype."""
        t = _t(node)

        def body(*xs: str) -> str:
            return em.store(scalar(em, *[em.load(x, t.elem) for x in xs]), t.elem)

        return em.map_elementwise([(a, _t(e)) for a, e in zip(args, node.args)], t, body, out)
    return lower_elementwise


# ---- matmul --------------------------------------------------------------------
def lower_matmul(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """Rank 2: linalg.matmul; rank 3: linalg.batch_matmul; rank >= 4: collapse the batch
    prefix σ (batch dimensions must match: no broadcasting), batch_matmul, expand back.
    Accumulates in f32."""
    (a, b), (ta, tb), t = args, [_t(e) for e in node.args], _t(node)
    r = t.rank
    if r >= 4:
        batch = list(range(r - 2))
        groups = [batch, [r - 2], [r - 1]]
        flat = t.with_shape((_vol(t.shape[:-2]),) + t.shape[-2:])
        a = em.collapse(a, ta, groups)
        b = em.collapse(b, tb, groups)
        ta, tb = ta.with_shape(flat.shape[:1] + ta.shape[-2:]), tb.with_shape(flat.shape[:1] + tb.shape[-2:])
        res = _matmul_core(em, a, b, ta, tb, flat, None)
        return em.expand(res, flat, groups, t.shape, out)
    return _matmul_core(em, a, b, ta, tb, t, out)


def _matmul_core(em: FnEmitter, a: str, b: str, ta: Ty, tb: Ty, t: Ty, out: str | None) -> str:
    acc = _acc(em, t)
    zero = em.filled(acc, 0)
    name = "linalg.matmul" if t.rank == 2 else "linalg.batch_matmul"
    direct = out if acc == t else None
    res = em.op(f"{name} ins({a}, {b} : {ta.mlir}, {tb.mlir}) outs({zero} : {acc.mlir}) -> {acc.mlir}", direct)
    return em.convert(res, acc, t.elem, out) if acc != t else res


def _vol(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# ---- data movement ---------------------------------------------------------------
def lower_transpose(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """linalg.transpose; the identity permutation (every rank-0 or rank-1 transpose) is the
    operand itself (MLIR asserts on the empty permutation of a rank-0 linalg.transpose)."""
    t = _t(node)
    if list(node.attrs["perm"]) == list(range(t.rank)):
        return args[0]
    perm = ", ".join(str(p) for p in node.attrs["perm"])
    return em.op(f"linalg.transpose ins({args[0]} : {_t(node.args[0]).mlir}) "
                 f"outs({em.empty(t)} : {t.mlir}) permutation = [{perm}]", out)


def lower_reshape(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """Row-major reshape as collapse-to-1-D then expand: both are views after bufferization.
    Rank 0 on either side (volume 1) uses the empty reassociation."""
    src, dst = _t(node.args[0]), _t(node)
    x = args[0]
    if src.shape == dst.shape:
        return em.op(f"tensor.cast {x} : {src.mlir} to {dst.mlir}", out)
    if dst.rank == 0:
        return em.collapse(x, src, [], out)
    if src.rank == 0:
        return em.expand(x, src, [], dst.shape, out)
    if src.rank != 1:
        x = em.collapse(x, src, [list(range(src.rank))], None if dst.rank != 1 else out)
        src = src.with_shape((_vol(src.shape),))
    if dst.rank == 1:
        return x
    return em.expand(x, src, [list(range(dst.rank))], dst.shape, out)


def lower_broadcast(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """Unit-axis expansion and prepended axes in one linalg.generic: the input map reads
    index 0 on expanded unit axes and ignores prepended ones. Elementwise ops read the input
    through that map instead, and a broadcast no other op reads is not written (emit/folded.py)."""
    src, dst = _t(node.args[0]), _t(node)
    lead = dst.rank - src.rank
    reads: list[int | str] = [0 if d == 1 and dst.shape[lead + i] != 1 else f"d{lead + i}"
                              for i, d in enumerate(src.shape)]
    start = len(em.lines)
    res = em.generic([(args[0], src, reads)], (em.empty(dst), dst, identity(dst.rank)),
                     ["parallel"] * dst.rank, lambda x, _o: x, out)
    em.folded.broadcast(res, args[0], src, reads, (start, len(em.lines)))   # elementwise readers read args[0]
    return res


def _slice_args(em: FnEmitter, axis: int, start: Dim, part: Ty) -> str:
    """`[offsets] [sizes] [strides]` of the window of `part` at `start` on `axis`: static
    where the numbers are known, SSA index values where they are sizes."""
    def d(x: Dim) -> str:
        return em.dim(x) if isinstance(x, Size) else str(x)

    offsets = ", ".join(d(start) if i == axis else "0" for i in range(part.rank))
    sizes = ", ".join(d(x) for x in part.shape)
    return f"[{offsets}] [{sizes}] [{', '.join('1' for _ in part.shape)}]"


def lower_slice(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """tensor.extract_slice, then linalg.copy into a fresh tensor: the slice is a strided
    view after bufferization, and copying it with memref.copy would call `memrefCopy`
    from the MLIR runner library, which a Kina .so does not link."""
    src, dst = _t(node.args[0]), _t(node)
    view = em.op(f"tensor.extract_slice {args[0]}{_slice_args(em, node.attrs['axis'], node.attrs['start'], dst)} : "
                 f"{src.mlir} to {dst.mlir}")
    return em.op(f"linalg.copy ins({view} : {dst.mlir}) outs({em.empty(dst)} : {dst.mlir}) -> {dst.mlir}", out)


def lower_concat(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """Each operand goes into a fresh destination at its running offset on axis: linalg.copy
    into the extract_slice of the destination, tensor.insert_slice back (bufferizes in place).
    The destination is a bufferization.alloc_tensor, not a tensor.empty: -O2's CSE merges
    equal tensor.empty ops, two concats then wrote into one tensor, and bufferization had to
    copy one of them aside through strided views."""
    dst, axis = _t(node), node.attrs["axis"]
    acc, offset = em.alloc(dst), 0
    for k, (x, e) in enumerate(zip(args, node.args)):
        part = _t(e)
        where = _slice_args(em, axis, offset, part)
        window = em.op(f"tensor.extract_slice {acc}{where} : {dst.mlir} to {part.mlir}")
        filled = em.op(f"linalg.copy ins({x} : {part.mlir}) outs({window} : {part.mlir}) -> {part.mlir}")
        acc = em.op(f"tensor.insert_slice {filled} into {acc}{where} : {part.mlir} into {dst.mlir}",
                    out if k == len(args) - 1 else None)
        offset += part.shape[axis]
    return acc


# ---- indexing ------------------------------------------------------------------
def lower_gather(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """y[i ++ [d]] = values[indices[i], d], after checking 0 <= indices < V."""
    (values, idx), (tv, ti), t = args, [_t(e) for e in node.args], _t(node)
    em.bounds_check(idx, ti, tv.shape[0], "gather index out of bounds")
    k = ti.rank

    def body(i: str, _o: str) -> str:
        row = em.to_index(i)
        col = em.op(f"linalg.index {k} : index")
        return em.op(f"tensor.extract {values}[{row}, {col}] : {tv.mlir}")

    return em.generic([(idx, ti, identity(k))], (em.empty(t), t, identity(t.rank)),
                      ["parallel"] * t.rank, body, out)


def lower_take_along_axis(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """y[i] = x[i with axis -> idx[i]], after checking 0 <= idx < x.shape[axis]."""
    (x, idx), (tx, ti), t = args, [_t(e) for e in node.args], _t(node)
    axis, r = node.attrs["axis"], t.rank
    em.bounds_check(idx, ti, tx.shape[axis], "take_along_axis index out of bounds")

    def body(i: str, _o: str) -> str:
        at = [em.to_index(i) if d == axis else em.op(f"linalg.index {d} : index") for d in range(r)]
        return em.op(f"tensor.extract {x}[{', '.join(at)}] : {tx.mlir}")

    return em.generic([(idx, ti, identity(r))], (em.empty(t), t, identity(r)), ["parallel"] * r, body, out)


def lower_scatter_add(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """ScatterAdd, the VJP of gather: a bounds generic + cf.assert; flatten σ (rank >= 2) with collapse_shape;
    zero-filled dest; generic over (v, d, n) = (parallel, parallel, reduction) with
    out[v, d] += (indices_flat[n] == v) ? updates_flat[n, d] : 0.  Duplicates accumulate
    because n is a reduction iterator (no atomics)."""
    (upd, idx), (tu, ti) = args, [_t(e) for e in node.args]
    dest: TensorType = node.attrs["dest_ty"]
    t = ty(dest)
    em.bounds_check(idx, ti, t.shape[0], "scatter_add index out of bounds")
    k = ti.rank
    if k >= 2:
        idx = em.collapse(idx, ti, [list(range(k))])
        upd = em.collapse(upd, tu, [list(range(k)), [k]])
        n = _vol(ti.shape)
        ti, tu = ti.with_shape((n,)), tu.with_shape((n, tu.shape[-1]))
    acc = _acc(em, t)
    zero = em.filled(acc, 0)

    def body(i: str, u: str, o: str) -> str:
        hit = em.op(f"arith.cmpi eq, {em.to_index(i)}, {em.op('linalg.index 0 : index')} : index")
        term = em.op(f"arith.select {hit}, {em.load(u, t.elem)}, {em.scalar(0.0, em.F)} : {em.F}")
        return em.op(f"arith.addf {o}, {term} : {em.F}")

    res = em.generic([(idx, ti, ["d2"]), (upd, tu, ["d2", "d1"])], (zero, acc, ["d0", "d1"]),
                     ["parallel", "parallel", "reduction"], body, out if acc == t else None)
    return em.convert(res, acc, t.elem, out) if acc != t else res


# The -O2 form of the scatter generic above (compiler/backend/rewrites.py `rewrite_scatters` swaps
# it in).  The (v, d, n) generic compares every index against every row: O(V * D * N).
# This one walks the N updates once and adds each row of updates into out[idx[n], :]:
# O(N * D).  Rows are added in increasing n, as the reduction iterator n adds them, and
# `o + u` is the generic's `o + select(hit, u, 0)` on a hit (a miss adds +0.0, which
# leaves o unchanged), so the results are bit-identical.  extract_slice / insert_slice
# of the loop-carried tensor bufferize in place: one buffer, no copies per row.
def scatter_rows_function(name: str, n: int | None, d: int | None, v: int | None, upd_elem: str,
                          acc_elem: str) -> str:
    """Text of `func.func private @name(idx: [n] i64, upd: [n, d], init: [v, d]) -> [v, d]`
    with out = init, then out[idx[k], :] += upd[k, :] for k = 0 .. n-1 in order.  A size
    None is dynamic (`?`: a dynamic export's scatter), read from the operands."""
    def dim(x: int | None) -> str:
        return "?" if x is None else str(x)
    ti, tu, to = f"tensor<{dim(n)}xi64>", f"tensor<{dim(n)}x{dim(d)}x{upd_elem}>", f"tensor<{dim(v)}x{dim(d)}x{acc_elem}>"
    row_u, row_o = f"tensor<{dim(d)}x{upd_elem}>", f"tensor<{dim(d)}x{acc_elem}>"
    ext = (f"      %x = arith.extf %a : {upd_elem} to {acc_elem}\n" if upd_elem != acc_elem else "")
    x = "%x" if ext else "%a"
    row_map = "affine_map<(d0) -> (d0)>"
    count = (f"  %cn = tensor.dim %idx, %c0 : {ti}\n" if n is None else f"  %cn = arith.constant {n} : index\n")
    width = f"  %cd = tensor.dim %upd, %c1 : {tu}\n" if d is None else ""
    cols = "%cd" if d is None else str(d)
    return (
        f"func.func private @{name}(%idx: {ti}, %upd: {tu}, %init: {to}) -> {to} {{\n"
        f"  %c0 = arith.constant 0 : index\n"
        f"  %c1 = arith.constant 1 : index\n"
        f"{count}{width}"
        f"  %r = scf.for %k = %c0 to %cn step %c1 iter_args(%acc = %init) -> ({to}) {{\n"
        f"    %i = tensor.extract %idx[%k] : {ti}\n"
        f"    %v = arith.index_cast %i : i64 to index\n"
        f"    %u = tensor.extract_slice %upd[%k, 0] [1, {cols}] [1, 1] : {tu} to {row_u}\n"
        f"    %row = tensor.extract_slice %acc[%v, 0] [1, {cols}] [1, 1] : {to} to {row_o}\n"
        f"    %sum = linalg.generic {{indexing_maps = [{row_map}, {row_map}], iterator_types = [\"parallel\"]}} "
        f"ins(%u : {row_u}) outs(%row : {row_o}) {{\n"
        f"    ^bb0(%a: {upd_elem}, %o: {acc_elem}):\n"
        f"{ext}"
        f"      %s = arith.addf %o, {x} : {acc_elem}\n"
        f"      linalg.yield %s : {acc_elem}\n"
        f"    }} -> {row_o}\n"
        f"    %new = tensor.insert_slice %sum into %acc[%v, 0] [1, {cols}] [1, 1] : {row_o} into {to}\n"
        f"    scf.yield %new : {to}\n"
        f"  }} {{kina.scatter_rows}}\n"   # accumulate.SCATTER_TAG (not imported: the front end stays light)
        f"  return %r : {to}\n"
        f"}}\n")


def lower_scatter_along_axis(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """zeros(dest) with updates added at idx along axis: a generic over dest's dims plus a
    reduction iterator k over idx.shape[axis]:
    out[i] += (idx[i with axis -> k] == i[axis]) ? updates[i with axis -> k] : 0
    (elementwise when that extent is 1)."""
    (upd, idx), (tu, ti) = args, [_t(e) for e in node.args]
    t = ty(node.attrs["dest_ty"])
    axis, r = node.attrs["axis"], t.rank
    em.bounds_check(idx, ti, t.shape[axis], "scatter_along_axis index out of bounds")
    acc = _acc(em, t)
    direct = out if acc == t else None

    def term(i: str, u: str) -> str:
        hit = em.op(f"arith.cmpi eq, {em.to_index(i)}, {em.op(f'linalg.index {axis} : index')} : index")
        return em.op(f"arith.select {hit}, {em.load(u, t.elem)}, {em.scalar(0.0, em.F)} : {em.F}")

    if ti.shape[axis] == 1:
        # One index per position (the VJP of picking one class per row): the k loop has one
        # trip, so out = 0 + term, elementwise.  The same value as below, with no zero-filled
        # accumulator written and read back; fusion.py can fold it into its readers.
        at0 = ["0" if d == axis else f"d{d}" for d in range(r)]
        res = em.generic([(idx, ti, at0), (upd, tu, at0)], (em.empty(acc), acc, identity(r)), ["parallel"] * r,
                         lambda i, u, _o: em.op(f"arith.addf {em.scalar(0.0, em.F)}, {term(i, u)} : {em.F}"),
                         direct)
    else:
        along = [f"d{r}" if d == axis else f"d{d}" for d in range(r)]
        res = em.generic([(idx, ti, along), (upd, tu, along)], (em.filled(acc, 0), acc, identity(r)),
                         ["parallel"] * r + ["reduction"], lambda i, u, o: em.op(f"arith.addf {o}, {term(i, u)} : {em.F}"),
                         direct)
    return em.convert(res, acc, t.elem, out) if acc != t else res


# ---- reductions and softmax ------------------------------------------------------
# reduce_keep's op: combiner and identity over f32 accumulators, and whether the result
# is divided by the axis length.
REDUCERS: dict[str, tuple[str, float, bool]] = {
    "sum": ("arith.addf", 0.0, False), "mean": ("arith.addf", 0.0, True),
    "max": ("arith.maximumf", float("-inf"), False), "min": ("arith.minimumf", float("inf"), False),
}


def _reduce(em: FnEmitter, x: str, t: Ty, axis: int, kind: str) -> tuple[str, Ty]:
    """Reduce `axis` of x into an f32 tensor without that axis."""
    combine, init, _mean = REDUCERS[kind]
    kept = [d for d in range(t.rank) if d != axis]
    acc = Ty(em.F, tuple(t.shape[d] for d in kept))
    its = ["reduction" if d == axis else "parallel" for d in range(t.rank)]

    def body(v: str, o: str) -> str:
        v = em.load(v, t.elem)
        return em.op(f"{combine} {o}, {v} : {em.F}")

    res = em.generic([(x, t, identity(t.rank))], (em.filled(acc, init), acc, [f"d{d}" for d in kept]),
                     its, body)
    return res, acc


def lower_reduce_keep(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """A reduction linalg.generic (f32 accumulator) then expand_shape for keepdims;
    mean divides the sum by the axis length."""
    src, t = _t(node.args[0]), _t(node)
    kind, axis = node.attrs["op"], node.attrs["axis"]
    res, acc = _reduce(em, args[0], src, axis, kind)
    if REDUCERS[kind][2]:   # a mean
        n = src.shape[axis]
        count = em.size_number(SizeNumber.of(n), em.F) if isinstance(n, Size) else None
        res = em.map_elementwise([(res, acc)], acc,
                                 lambda s: em.op(f"arith.divf {s}, {count or em.scalar(float(n), em.F)} : {em.F}"))
    direct = out if t.elem == em.F else None
    kept = keep_axis(em, res, acc, axis, direct)
    return em.convert(kept, t.with_elem(em.F), t.elem, out)


def _softmax_parts(em: FnEmitter, x: str, t: Ty, axis: int) -> tuple[str, str, str, Ty, list[str]]:
    """m = max over axis, e = exp(x - m) (f32), s = sum of e over axis.
    Returns (m, s, e, reduced f32 type, map reading the reduced tensor from the full loop)."""
    kept = [f"d{d}" for d in range(t.rank) if d != axis]
    m, acc = _reduce(em, x, t, axis, "max")
    full = t.with_elem(em.F)

    def shifted_exp(v: str, mx: str, _o: str) -> str:
        return em.op(f"math.exp {em.op(f'arith.subf {em.load(v, t.elem)}, {mx} : {em.F}')} : {em.F}")

    e = em.generic([(x, t, identity(t.rank)), (m, acc, kept)], (em.empty(full), full, identity(t.rank)),
                   ["parallel"] * t.rank, shifted_exp)
    s, _ = _reduce(em, e, full, axis, "sum")
    return m, s, e, acc, kept


def lower_softmax(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """exp(x - max) / sum(exp(x - max)) along axis."""
    t, axis = _t(node), node.attrs["axis"]
    _m, s, e, acc, kept = _softmax_parts(em, args[0], t, axis)
    full = t.with_elem(em.F)
    return em.generic([(e, full, identity(t.rank)), (s, acc, kept)], (em.empty(t), t, identity(t.rank)),
                      ["parallel"] * t.rank,
                      lambda v, sm, _o: em.store(em.op(f"arith.divf {v}, {sm} : {em.F}"), t.elem), out)


def lower_log_softmax(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """x - max - log(sum(exp(x - max))) along axis (the log: FnEmitter.own_log)."""
    t, axis = _t(node), node.attrs["axis"]
    m, s, _e, acc, kept = _softmax_parts(em, args[0], t, axis)
    # The row sums' logs, one per row: an f32 one Kina's own, the same bits at every level (a
    # loss is reproducible level to level); an f64 one (F64 logits) libm's.  Their own loop:
    # computed in the row's loop, LLVM could not hoist them (the loads of the sums may alias
    # the store), and a fused VJP computed one per element.
    logs = em.map_elementwise([(s, acc)], acc,
                              lambda sm: em.own_log(sm) if em.F == "f32" else em.op(f"math.log {sm} : {em.F}"))

    def body(v: str, mx: str, lg: str, _o: str) -> str:
        shifted = em.op(f"arith.subf {em.load(v, t.elem)}, {mx} : {em.F}")
        return em.store(em.op(f"arith.subf {shifted}, {lg} : {em.F}"), t.elem)

    return em.generic([(args[0], t, identity(t.rank)), (m, acc, kept), (logs, acc, kept)],
                      (em.empty(t), t, identity(t.rank)), ["parallel"] * t.rank, body, out)


# ---- the table -------------------------------------------------------------------
LOWERINGS: dict[str, Emitter] = {
    "add": elementwise(_f("addf")), "sub": elementwise(_f("subf")),
    "mul": elementwise(_f("mulf")), "div": elementwise(_f("divf")),
    "neg": elementwise(lambda em, x: em.op(f"arith.negf {x} : {em.F}")),
    "exp": elementwise(_math("exp")), "log": elementwise(_math("log")), "tanh": elementwise(_math("tanh")),
    "sqrt": elementwise(_math("sqrt")), "rsqrt": elementwise(_math("rsqrt")),
    "sigmoid": elementwise(_sigmoid), "relu": elementwise(_relu), "relu_grad": elementwise(_relu_grad),
    "matmul": lower_matmul,
    "transpose": lower_transpose,
    "reshape": lower_reshape,
    "broadcast": lower_broadcast,
    "slice": lower_slice,
    "concat": lower_concat,
    "gather": lower_gather,
    "reduce_keep": lower_reduce_keep,
    "softmax": lower_softmax,
    "log_softmax": lower_log_softmax,
    "take_along_axis": lower_take_along_axis,
    "scatter_add": lower_scatter_add,
    "scatter_along_axis": lower_scatter_along_axis,
    **EXT_LOWERINGS,   # elementwise math, casts, iota / tril, argmax (compiler/backend/emit/ops_ext.py)
    **SCAN_LOWERINGS,  # cumsum, cumprod, logsumexp, pow_tensor (compiler/backend/emit/ops_scan.py)
    **SORT_LOWERINGS,  # sort, argsort, topk, argtopk (compiler/backend/emit/ops_sort.py)
    **RANDOM_LOWERINGS,  # random_split .. categorical: Threefry-2x32 (compiler/backend/emit/ops_random.py)
}

# The rows of each enum attribute's choices (tests/test_tables.py: one per choice).
ATTR_CHOICES: dict[tuple[str, str], Mapping[str, object]] = {
    ("reduce_keep", "op"): REDUCERS,
    ("gelu", "approximate"): GELU,
    ("gelu_grad", "approximate"): GELU_GRAD,
    ("sort", "descending"): DESCENDING,
    ("argsort", "descending"): DESCENDING,
}
