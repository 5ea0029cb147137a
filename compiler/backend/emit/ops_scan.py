"""MLIR lowerings of the scans (cumsum, cumprod), the stable logsumexp and pow with a
tensor exponent.  emit_ops.LOWERINGS takes these rows from SCAN_LOWERINGS; the emitter
signature is the same, `fn(em, node, args, out) -> str`.

A scan is an scf.for over the scanned axis carrying the result tensor and the running
row (f32): each step extracts row j of x, combines it with the running row in one
elementwise linalg.generic over the other axes, and inserts it at j.  O(n) work along the
axis, in the interpreter's order (numpy.cumsum adds left to right too).
"""
from __future__ import annotations

from compiler.backend.emit.builder import Emitter, FnEmitter, MapResults, Ty, identity, keep_axis, ty
from compiler.core.sizes import Size
from compiler.ir import nodes as ir


def _window(em: FnEmitter, axis: int, at: str, row: Ty) -> str:
    """The offsets, sizes and strides of row `at` (an SSA index or a literal) along axis
    (a size of a dynamic function is its SSA value)."""
    offsets = ", ".join(at if d == axis else "0" for d in range(row.rank))
    sizes = ", ".join(em.dim(n) if isinstance(n, Size) else str(n) for n in row.shape)
    return f"[{offsets}] [{sizes}] [{', '.join('1' for _ in row.shape)}]"


def scan(combine: str) -> Emitter:
    """The lowering of a scan whose f32 combiner is `combine` (arith.addf, arith.mulf)."""
    def lower_scan(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
        """scf.for over the axis: row j = combine(row j - 1, x[j]) in a linalg.generic,
        tensor.insert_slice into an f32 result, converted to the dtype at the end."""
        src, t, axis = ty(node.args[0].type), ty(node.type), node.attrs["axis"]
        n, r = src.shape[axis], src.rank
        row_src = src.with_shape(1 if d == axis else s for d, s in enumerate(src.shape))
        row = row_src.with_elem(em.F)
        whole = t.with_elem(em.F)
        first = em.op(f"tensor.extract_slice {args[0]}{_window(em, axis, '0', row_src)} : {src.mlir} to {row_src.mlir}")
        acc0 = em.map_elementwise([(first, row_src)], row, lambda v: em.load(v, src.elem))
        init = em.alloc(whole)
        res = em.op(f"tensor.insert_slice {acc0} into {init}{_window(em, axis, '0', row)} : {row.mlir} into {whole.mlir}")
        if isinstance(n, Size) or n > 1:     # a dynamic axis of 1 runs the loop zero times
            c1, cn = em.scalar(1, "index"), em.dim(n)
            loop, j, o, a = em.fresh(), em.fresh(), em.fresh(), em.fresh()
            em.line(f"{loop}:2 = scf.for {j} = {c1} to {cn} step {c1} iter_args({o} = {res}, {a} = {acc0}) "
                    f"-> ({whole.mlir}, {row.mlir}) {{")
            em.indent += 2
            x = em.op(f"tensor.extract_slice {args[0]}{_window(em, axis, j, row_src)} : {src.mlir} to {row_src.mlir}")
            # the running row is updated in place (outs = the loop-carried row): scf.for's
            # bufferization wants each yielded value to be its own iteration argument's buffer
            new = em.generic([(x, row_src, identity(r))], (a, row, identity(r)), ["parallel"] * r,
                             lambda v, p: em.op(f"{combine} {p}, {em.load(v, src.elem)} : {em.F}"))
            o2 = em.op(f"tensor.insert_slice {new} into {o}{_window(em, axis, j, row)} : {row.mlir} into {whole.mlir}")
            em.stmt(f"scf.yield {o2}, {new} : {whole.mlir}, {row.mlir}")
            em.indent -= 2
            em.line(f"}}{em.loc}")
            res = f"{loop}#0"
        return em.convert(res, whole, t.elem, out)
    return lower_scan


def _reduce(em: FnEmitter, x: str, t: Ty, axis: int, combine: str, init: float,
            shift: str | None = None, acc: Ty | None = None) -> str:
    """x (f32 values, exp(x - shift) when a shift is given) reduced over axis by combine."""
    kept = [f"d{d}" for d in range(t.rank) if d != axis]
    out_t = Ty(em.F, tuple(s for d, s in enumerate(t.shape) if d != axis))
    ins: list[tuple[str, Ty, MapResults]] = [(x, t, identity(t.rank))]
    ins += ([(shift, acc, kept)] if shift is not None and acc is not None else [])
    its = ["reduction" if d == axis else "parallel" for d in range(t.rank)]

    def body(*a: str) -> str:
        v = em.load(a[0], t.elem)
        if shift is not None:
            v = em.op(f"math.exp {em.op(f'arith.subf {v}, {a[1]} : {em.F}')} : {em.F}")
        return em.op(f"{combine} {a[-1]}, {v} : {em.F}")

    return em.generic(ins, (em.filled(out_t, init), out_t, kept), its, body)


def lower_logsumexp(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """m = max over axis; shift = m where m is finite, else 0; log(sum(exp(x - shift))) + shift,
    then expand_shape to keep the axis (the interpreter's formula: +-inf rows stay +-inf)."""
    src, t, axis = ty(node.args[0].type), ty(node.type), node.attrs["axis"]
    acc = Ty(em.F, tuple(s for d, s in enumerate(src.shape) if d != axis))
    m = _reduce(em, args[0], src, axis, "arith.maximumf", float("-inf"))

    def finite(v: str) -> str:
        inf = em.scalar(float("inf"), em.F)
        ok = em.op(f"arith.cmpf olt, {em.op(f'math.absf {v} : {em.F}')}, {inf} : {em.F}")
        return em.op(f"arith.select {ok}, {v}, {em.scalar(0.0, em.F)} : {em.F}")

    shift = em.map_elementwise([(m, acc)], acc, finite)
    s = _reduce(em, args[0], src, axis, "arith.addf", 0.0, shift, acc)
    y = em.map_elementwise([(s, acc), (shift, acc)], acc,
                           lambda v, c: em.op(f"arith.addf {em.op(f'math.log {v} : {em.F}')}, {c} : {em.F}"))
    direct = out if t.elem == em.F else None
    kept = keep_axis(em, y, acc, axis, direct)
    return em.convert(kept, t.with_elem(em.F), t.elem, out)


def _pow_tensor(em: FnEmitter, x: str, e: str) -> str:
    """|x|^e, negated where x < 0 and e is an odd integer, NaN where -inf < x < 0 and e is
    not an integer (numpy.power; powf of a negative base is NaN on some libm paths)."""
    mag = em.op(f"math.powf {em.op(f'math.absf {x} : {em.F}')}, {e} : {em.F}")
    whole = em.op(f"arith.cmpf oeq, {em.op(f'math.floor {e} : {em.F}')}, {e} : {em.F}")
    half = em.op(f"arith.mulf {e}, {em.scalar(0.5, em.F)} : {em.F}")
    even = em.op(f"arith.cmpf oeq, {em.op(f'math.floor {half} : {em.F}')}, {half} : {em.F}")
    signed = em.op(f"arith.select {even}, {mag}, {em.op(f'arith.negf {mag} : {em.F}')} : {em.F}")
    # a fractional power of a negative base is NaN, but (-inf)^e is |x|^e (IEEE pow, numpy)
    minus_inf = em.op(f"arith.cmpf oeq, {x}, {em.scalar(float('-inf'), em.F)} : {em.F}")
    nan = em.op(f"arith.select {minus_inf}, {mag}, {em.scalar(float('nan'), em.F)} : {em.F}")
    negative = em.op(f"arith.select {whole}, {signed}, {nan} : {em.F}")
    below = em.op(f"arith.cmpf olt, {x}, {em.scalar(0.0, em.F)} : {em.F}")
    return em.op(f"arith.select {below}, {negative}, {mag} : {em.F}")


def lower_pow_tensor(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """`linalg.generic` with math.powf of |x| and the sign rule of an integral exponent."""
    t = ty(node.type)

    def body(x: str, e: str) -> str:
        return em.store(_pow_tensor(em, em.load(x, t.elem), em.load(e, t.elem)), t.elem)

    return em.map_elementwise([(a, ty(n.type)) for a, n in zip(args, node.args)], t, body, out)


SCAN_LOWERINGS: dict[str, Emitter] = {
    "cumsum": scan("arith.addf"),
    "cumprod": scan("arith.mulf"),
    "logsumexp": lower_logsumexp,
    "pow_tensor": lower_pow_tensor,
}
