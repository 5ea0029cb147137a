"""MLIR lowerings of the elementwise math, comparison, selection, cast, mask/position
builders and argmax ops (maximum, minimum, abs, sign, square, erf, pow, clamp, gelu,
lt le gt ge eq ne, where, cast, iota, tril, argmax and the IR-internal maximum_grad,
clamp_grad, gelu_grad).  emit_ops.LOWERINGS takes
these rows from EXT_LOWERINGS; the emitter signature is the same,
`fn(em, node, args, out) -> str`.

Float math computes in f32 like every other op (load / store convert narrow storage),
or in f64 when the op touches F64 (`em.F`).  MLIR's math dialect has no LLVM lowering
for erf, so the f32 erf is a rational approximation on [-4, 4] (outside it erf is +-1
to float precision): the coefficients of Eigen's and XLA's float erf, accurate to a few
ulp in f32; the f64 erf calls libm's `erf` (LIBM_ERF).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from compiler.backend.emit.builder import Body, Emitter, FnEmitter, Ty, identity, keep_axis, ty
from compiler.core.types import DType
from compiler.ir import nodes as ir
from compiler.ir.nodes import as_tensor


def _c(em: FnEmitter, value: float) -> str:
    return em.scalar(float(value), em.F)


def _bin(em: FnEmitter, name: str, a: str, b: str) -> str:
    return em.op(f"arith.{name} {a}, {b} : {em.F}")


def _select(em: FnEmitter, cond: str, a: str, b: str) -> str:
    return em.op(f"arith.select {cond}, {a}, {b} : {em.F}")


def _cmp(em: FnEmitter, pred: str, a: str, b: str) -> str:
    return em.op(f"arith.cmpf {pred}, {a}, {b} : {em.F}")


# ---- scalar bodies: fn(em, node, *f32 operands) -> f32 -----------------------------------
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def _horner(em: FnEmitter, x2: str, coeffs: Sequence[float]) -> str:
    acc = _c(em, coeffs[0])
    for c in coeffs[1:]:
        acc = _bin(em, "addf", _bin(em, "mulf", acc, x2), _c(em, c))
    return acc


# f64 has no polynomial here: a call of libm's double erf (accurate to an ulp or so), declared
# once per module by emit_program when a function calls it.
LIBM_ERF = "func.func private @erf(f64) -> f64"


def erf(em: FnEmitter, x: str) -> str:
    """x * P(x^2) / Q(x^2) with x clamped to [-4, 4] (NaN stays NaN); f64: libm's erf."""
    if em.F == "f64":
        return em.op(f"func.call @erf({x}) : (f64) -> f64")
    x = _bin(em, "maximumf", _bin(em, "minimumf", x, _c(em, 4.0)), _c(em, -4.0))
    x2 = _bin(em, "mulf", x, x)
    return _bin(em, "divf", _bin(em, "mulf", x, _horner(em, x2, _ERF_P)), _horner(em, x2, _ERF_Q))


def _sign(em: FnEmitter, node: ir.OpApp, x: str) -> str:
    # 1 for x > 0, -1 for x < 0, x itself for +-0 and NaN (numpy.sign)
    zero = _c(em, 0.0)
    neg = _select(em, _cmp(em, "olt", x, zero), _c(em, -1.0), x)
    return _select(em, _cmp(em, "ogt", x, zero), _c(em, 1.0), neg)


def _pow(em: FnEmitter, node: ir.OpApp, x: str) -> str:
    p = node.attrs["p"]
    if not float(p).is_integer():
        return em.op(f"math.powf {x}, {_c(em, p)} : {em.F}")
    # An integral exponent is defined for negative x: |x|^p, negated for odd p and x < 0
    # (powf of a negative base is NaN on some libm paths; fpowi would need libgcc's __powisf2).
    mag = em.op(f"math.powf {em.op(f'math.absf {x} : {em.F}')}, {_c(em, p)} : {em.F}")
    if int(p) % 2 == 0:
        return mag
    return em.op(f"math.copysign {mag}, {x} : {em.F}")


def _clamp(em: FnEmitter, node: ir.OpApp, x: str) -> str:
    lo, hi = node.attrs["min"], node.attrs["max"]
    if lo is not None:
        x = _bin(em, "maximumf", x, _c(em, lo))
    if hi is not None:
        x = _bin(em, "minimumf", x, _c(em, hi))
    return x


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _tanh_inner(em: FnEmitter, x: str) -> tuple[str, str]:
    """sqrt(2/pi) (x + 0.044715 x^3) and x^2."""
    x2 = _bin(em, "mulf", x, x)
    cube = _bin(em, "mulf", x2, x)
    u = _bin(em, "mulf", _c(em, _SQRT_2_OVER_PI), _bin(em, "addf", x, _bin(em, "mulf", _c(em, 0.044715), cube)))
    return u, x2


def _phi_cdf(em: FnEmitter, x: str) -> str:
    """0.5 (1 + erf(x / sqrt 2))."""
    e = erf(em, _bin(em, "mulf", x, _c(em, 1 / math.sqrt(2))))
    return _bin(em, "mulf", _c(em, 0.5), _bin(em, "addf", _c(em, 1.0), e))


def _gelu_tanh(em: FnEmitter, x: str) -> str:
    u, _ = _tanh_inner(em, x)
    t = em.op(f"math.tanh {u} : {em.F}")
    return _bin(em, "mulf", _bin(em, "mulf", _c(em, 0.5), x), _bin(em, "addf", _c(em, 1.0), t))


def _gelu_tanh_grad(em: FnEmitter, x: str) -> str:
    # 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u)
    u, x2 = _tanh_inner(em, x)
    t = em.op(f"math.tanh {u} : {em.F}")
    one = _c(em, 1.0)
    left = _bin(em, "mulf", _c(em, 0.5), _bin(em, "addf", one, t))
    du = _bin(em, "mulf", _c(em, _SQRT_2_OVER_PI),
              _bin(em, "addf", one, _bin(em, "mulf", _c(em, 3 * 0.044715), x2)))
    right = _bin(em, "mulf", _bin(em, "mulf", _c(em, 0.5), x),
                 _bin(em, "mulf", _bin(em, "subf", one, _bin(em, "mulf", t, t)), du))
    return _bin(em, "addf", left, right)


def _gelu_erf_grad(em: FnEmitter, x: str) -> str:
    # Phi(x) + x phi(x), phi(x) = e^(-x^2 / 2) / sqrt(2 pi)
    pdf = _bin(em, "mulf", em.op(f"math.exp {_bin(em, 'mulf', _c(em, -0.5), _bin(em, 'mulf', x, x))} : {em.F}"),
               _c(em, 1 / math.sqrt(2 * math.pi)))
    return _bin(em, "addf", _phi_cdf(em, x), _bin(em, "mulf", x, pdf))


# gelu's and gelu_grad's `approximate`: the scalar body of gelu(x), and of gelu'(x)
# (em, x) -> the f32 result
GELU: dict[str, Callable[[FnEmitter, str], str]] = {"none": lambda em, x: _bin(em, "mulf", x, _phi_cdf(em, x)), "tanh": _gelu_tanh}
GELU_GRAD: dict[str, Callable[[FnEmitter, str], str]] = {"none": _gelu_erf_grad, "tanh": _gelu_tanh_grad}


def _gelu(em: FnEmitter, node: ir.OpApp, x: str) -> str:
    return GELU[node.attrs["approximate"]](em, x)


def _gelu_grad(em: FnEmitter, node: ir.OpApp, g: str, x: str) -> str:
    return _bin(em, "mulf", g, GELU_GRAD[node.attrs["approximate"]](em, x))


def _maximum_grad(em: FnEmitter, node: ir.OpApp, g: str, x: str, y: str) -> str:
    # ordered compares: a NaN operand gives 0, like numpy.where(x > y, ...)
    half = _select(em, _cmp(em, "oeq", x, y), _bin(em, "mulf", g, _c(em, 0.5)), _c(em, 0.0))
    return _select(em, _cmp(em, "ogt", x, y), g, half)


def _clamp_grad(em: FnEmitter, node: ir.OpApp, g: str, x: str) -> str:
    lo, hi = node.attrs["min"], node.attrs["max"]
    keep = None
    for pred, bound in (("oge", lo), ("ole", hi)):
        if bound is not None:
            c = _cmp(em, pred, x, _c(em, bound))
            keep = c if keep is None else em.op(f"arith.andi {keep}, {c} : i1")
    assert keep is not None   # clamp has at least one bound (infer_clamp), and so its VJP
    return _select(em, keep, g, _c(em, 0.0))


def math_op(scalar: Body) -> Emitter:
    """The lowering of an elementwise op whose f32 scalar body `scalar(em, node, *operands)`
    reads the node's attributes."""
    def lower_math(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
        """`linalg.generic` with an `arith` / `math` body that reads the op's attributes: operands loaded to f32, the result stored in its dtype."""
        t = ty(node.type)

        def body(*xs: str) -> str:
            return em.store(scalar(em, node, *[em.load(x, t.elem) for x in xs]), t.elem)

        return em.map_elementwise([(a, ty(e.type)) for a, e in zip(args, node.args)], t, body, out)
    return lower_math


# ---- casts -----------------------------------------------------------------------------
def lower_cast(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """float -> float through f32 (extf / truncf); I64 -> float by sitofp to f32, then the
    store's rounding; Bool -> I64 by extui of its truth bit (-> float through that I64);
    to the operand's own dtype, a copy of the stored values."""
    src, dst = ty(node.args[0].type), ty(node.type)
    from_bool = _is_bool(node.args[0])
    same = as_tensor(node.args[0].type).dtype is as_tensor(node.type).dtype

    def body(x: str) -> str:
        if same:
            return x
        if from_bool:   # 0 / 1 whatever the stored byte (nonzero is true)
            x = em.op(f"arith.extui {_truth(em, x)} : i1 to i64")
            if dst.elem == "i64":
                return x
        if src.elem == "i64" or from_bool:
            x = em.op(f"arith.sitofp {x} : i64 to {em.F}")
        else:
            x = em.load(x, src.elem)
        return em.store(x, dst.elem)

    return em.map_elementwise([(args[0], src)], dst, body, out)


# ---- comparisons and where ---------------------------------------------------------------


def _is_bool(e: ir.Expr) -> bool:
    return as_tensor(e.type).dtype is DType.Bool


def _truth(em: FnEmitter, c: str) -> str:
    """A stored Bool (i8 0 / 1) as the i1 that select and andi take."""
    return em.op(f"arith.cmpi ne, {c}, {em.scalar(0, 'i8')} : i8")


def compare(floats: str, ints: str, bools: str) -> Emitter:
    """The lowering of a comparison with these `arith.cmpf` / `arith.cmpi` predicates for
    float, I64 and Bool operands."""
    def lower_compare(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
        """`linalg.generic` computing the predicate in i1 (`arith.cmpf`, ordered but for `ne`; `arith.cmpi`, signed for I64, unsigned for Bool), stored as a Bool byte."""
        src, t = ty(node.args[0].type), ty(node.type)

        def body(a: str, b: str) -> str:
            if as_tensor(node.args[0].type).is_float:
                bit = _cmp(em, floats, em.load(a, src.elem), em.load(b, src.elem))
            else:
                pred = bools if _is_bool(node.args[0]) else ints
                bit = em.op(f"arith.cmpi {pred}, {a}, {b} : {src.elem}")
            return em.op(f"arith.extui {bit} : i1 to {t.elem}")

        return em.map_elementwise([(a, ty(e.type)) for a, e in zip(args, node.args)], t, body, out)
    return lower_compare


def lower_where(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """arith.select per element; floats select in f32 (narrow storage is converted like
    every other op), integers and Bool in their own type."""
    t = ty(node.type)

    def body(c: str, a: str, b: str) -> str:
        c = _truth(em, c)
        if as_tensor(node.type).is_float:
            return em.store(_select(em, c, em.load(a, t.elem), em.load(b, t.elem)), t.elem)
        return em.op(f"arith.select {c}, {a}, {b} : {t.elem}")

    return em.map_elementwise([(a, ty(e.type)) for a, e in zip(args, node.args)], t, body, out)


# ---- positions and masks ------------------------------------------------------------------
def lower_iota(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """A generic with no inputs: each element is its index along `axis`."""
    t = ty(node.type)

    axis = node.attrs["axis"]

    def body(_o: str) -> str:
        return em.op(f"arith.index_cast {em.op(f'linalg.index {axis} : index')} : index to i64")

    return em.generic([], (em.empty(t), t, identity(t.rank)), ["parallel"] * t.rank, body, out)


def lower_tril(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """x where j - i <= k on the last two axes (i, j), zero (false) elsewhere."""
    t = ty(node.type)
    r, k = t.rank, node.attrs["k"]
    is_float = as_tensor(node.type).is_float

    def body(x: str, _o: str) -> str:
        i = em.op(f"linalg.index {r - 2} : index")
        j = em.op(f"linalg.index {r - 1} : index")
        keep = em.op(f"arith.cmpi sle, {em.op(f'arith.subi {j}, {i} : index')}, {em.scalar(k, 'index')} : index")
        if is_float:
            v = em.load(x, t.elem)
            return em.store(_select(em, keep, v, _c(em, 0.0)), t.elem)
        return em.op(f"arith.select {keep}, {x}, {em.scalar(0, t.elem)} : {t.elem}")

    return em.generic([(args[0], t, identity(r))], (em.empty(t), t, identity(r)), ["parallel"] * r, body, out)


# ---- argmax -------------------------------------------------------------------------------
def lower_argmax(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """One reduction linalg.generic with two outputs (the running max in f32, its index in
    i64), then expand_shape to keep the axis.  An element wins when it is greater than
    the max so far, or NaN when the max so far is not (numpy.argmax: the first NaN, else
    the first maximum)."""

    src = ty(node.args[0].type)
    axis, r = node.attrs["axis"], src.rank
    kept = [d for d in range(r) if d != axis]
    best_t = Ty(em.F, tuple(src.shape[d] for d in kept))
    idx_t = best_t.with_elem("i64")
    best0, idx0 = em.filled(best_t, float("-inf")), em.filled(idx_t, 0)
    maps = ", ".join(f"affine_map<({', '.join(identity(r))}) -> ({', '.join(m)})>"
                     for m in (identity(r), [f"d{d}" for d in kept], [f"d{d}" for d in kept]))
    its = ", ".join('"reduction"' if d == axis else '"parallel"' for d in range(r))
    res = em.fresh()
    em.line(f"{res}:2 = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}} "
            f"ins({args[0]} : {src.mlir}) outs({best0}, {idx0} : {best_t.mlir}, {idx_t.mlir}) {{")
    v, best, bi = em.fresh(), em.fresh(), em.fresh()
    em.line(f"^bb0({v}: {src.elem}, {best}: {em.F}, {bi}: i64):")
    em.indent += 2
    x = em.load(v, src.elem)
    here = em.op(f"arith.index_cast {em.op(f'linalg.index {axis} : index')} : index to i64")
    nan_wins = em.op(f"arith.andi {_cmp(em, 'uno', x, x)}, {_cmp(em, 'ord', best, best)} : i1")
    wins = em.op(f"arith.ori {_cmp(em, 'ogt', x, best)}, {nan_wins} : i1")
    em.stmt(f"linalg.yield {_select(em, wins, x, best)}, "
            f"{em.op(f'arith.select {wins}, {here}, {bi} : i64')} : {em.F}, i64")
    em.indent -= 2
    em.line(f"}} -> ({best_t.mlir}, {idx_t.mlir}){em.loc}")
    return keep_axis(em, f"{res}#1", idx_t, axis, out)


EXT_LOWERINGS: dict[str, Emitter] = {
    "maximum": math_op(lambda em, node, a, b: _bin(em, "maximumf", a, b)),
    "minimum": math_op(lambda em, node, a, b: _bin(em, "minimumf", a, b)),
    "abs": math_op(lambda em, node, x: em.op(f"math.absf {x} : {em.F}")),
    "sign": math_op(_sign),
    "square": math_op(lambda em, node, x: _bin(em, "mulf", x, x)),
    "erf": math_op(lambda em, node, x: erf(em, x)),
    "pow": math_op(_pow),
    "clamp": math_op(_clamp),
    "gelu": math_op(_gelu),
    "maximum_grad": math_op(_maximum_grad),
    "clamp_grad": math_op(_clamp_grad),
    "gelu_grad": math_op(_gelu_grad),
    "cast": lower_cast,
    "iota": lower_iota,
    "tril": lower_tril,
    "argmax": lower_argmax,
    # Float predicates are ordered (false when either side is NaN) except `ne` (true), as
    # in NumPy; integers compare signed, Bool as unsigned i1.
    "lt": compare("olt", "slt", "ult"), "le": compare("ole", "sle", "ule"),
    "gt": compare("ogt", "sgt", "ugt"), "ge": compare("oge", "sge", "uge"),
    "eq": compare("oeq", "eq", "eq"), "ne": compare("une", "ne", "ne"),
    "where": lower_where,
}
