"""The generator's rows for the elementwise math, comparison, mask, cast and index ops
(maximum .. argmax; progen_ops.MAKERS merges `MATH_MAKERS`).

Discrete results (comparisons, sign, argmax) are taken of parameters only: every
implementation holds a parameter exactly, so a flipped comparison is a bug, never a
rounding difference between float64 and the declared dtype.  Bool values are always
consumed (by `where` or a cast to the case's float dtype), as masks are in models.
Under reverseMode a mask compares positions (iota), as a causal mask does, and sign sees
a positive value: a mask of the parameters makes the function discontinuous, and finite
differences across a jump check nothing.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from compiler.core.types import DType, TensorType
from compiler.oracle.progen.base import Maker, Row, _axis, _positive_operand, _ranked

if TYPE_CHECKING:
    from compiler.oracle.progen.case import Value
    from compiler.oracle.progen.generate import Gen

COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")


def _other_dtype(g: Gen) -> DType:
    """A float dtype to round-trip through (mixed precision): F32 <-> F16 / BF16 / F8 / F64."""
    if g.dtype is not DType.F32:
        return DType.F32
    return g.ch.pick((DType.F16, DType.BF16, DType.F8E4M3, DType.F8E5M2, DType.F64))


def _binary_math(op: str) -> Maker:
    def make(g: Gen) -> Value | None:
        a = g.float_operand()
        b = g.like(a.type)
        lo = a.pos_lo if op == "maximum" else (min(a.pos_lo, b.pos_lo) if a.pos_lo and b.pos_lo else None)
        return g.emit(op, [a, b], max(a.mag, b.mag), lo)
    return make


def _unary_math(op: str) -> Maker:
    def make(g: Gen) -> Value | None:
        x = g.float_operand()
        mag = {"abs": x.mag, "square": x.mag * x.mag, "erf": min(1.0, x.mag)}[op]
        return g.rescale(g.emit(op, [x], mag, None))
    return make


def _fresh_param(g: Gen, want: Callable[[TensorType], bool] | None = None, rank: int | None = None) -> Value:
    """A parameter (held exactly everywhere) of the case's dtype."""
    cands = [p for p in g.params if p.type.is_float and p.pos_lo is None and (want is None or want(p.type))]
    if cands and g.ch.coin(0.5):
        return g.ch.pick(cands)
    return g.param(TensorType(g.dtype, g.shape() if rank is None else g.shape(rank=rank)))


def _sign(g: Gen) -> Value | None:
    x = _fresh_param(g)
    return g.emit("sign", [x], 1.0)


def _sign_ad(g: Gen) -> Value | None:
    x = g.positive(g.float_operand().type, 0.3)
    return g.emit("sign", [x], 1.0)


def _pow(g: Gen) -> Value | None:
    p = g.ch.pick((2.0, 3.0, 0.5, -1.0, 1.5, -0.5))
    if p > 0 and p.is_integer():
        x = g.float_operand()
        return g.rescale(g.emit("pow", [x], x.mag ** p, None, p=p))
    if p.is_integer():                      # x^-1: bounded away from 0 by construction
        x = g.positive(g.float_operand().type, 0.5)
    else:                                   # fractional: positive parameters are drawn in [0.5, 2)
        x = _positive_operand(g, 0.3)
    lo = x.pos_lo or 0.5
    mag = max(x.mag, 1.0) ** p if p > 0 else lo ** p
    return g.rescale(g.emit("pow", [x], mag, None, p=p))


def _clamp(g: Gen) -> Value | None:
    x = g.float_operand()
    lo, hi = g.ch.pick(((-0.5, 0.5), (0.0, None), (None, 0.25), (-1.0, 2.0)))
    bounds = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
    mag = min(x.mag, max(abs(b) for b in bounds.values())) if len(bounds) == 2 else x.mag
    return g.emit("clamp", [x], mag, None, min=lo, max=hi)


_GELU_APPROXIMATE = {"none": "exact erf form", "tanh": "tanh approximation"}


def _gelu(g: Gen) -> Value | None:
    x = g.float_operand()
    return g.emit("gelu", [x], x.mag, None, approximate=g.ch.pick(tuple(_GELU_APPROXIMATE)))


def _cast(g: Gen) -> Value | None:
    """x.cast(D).cast(back): a value computed at lower (or higher) precision."""
    x = g.float_operand()
    y = g.emit("cast", [x], x.mag, x.pos_lo, dtype=_other_dtype(g).value)
    g.pool.remove(y)                 # one float dtype per case: only the round trip is usable
    return g.emit("cast", [y], x.mag, x.pos_lo, dtype=g.dtype.value)


def _mask(g: Gen, shape: tuple[int, ...]) -> Value:
    """A Bool value of this shape: an existing one, or a comparison of two parameters."""
    cands = [v for v in g.bool_pool if v.type.shape == tuple(shape)]
    if cands and g.ch.coin(0.5):
        return g.ch.pick(cands)
    if g.ch.coin(0.3):               # a mask from the host (a padding mask): a Bool parameter
        return g.param(TensorType(DType.Bool, tuple(shape)))
    return _compare_params(g, g.ch.pick(COMPARISONS), tuple(shape))


def _compare_positions(g: Gen, op: str, shape: tuple[int, ...] | None) -> Value:
    """iota(shape, axis=i) op iota(shape, axis=j) (a causal mask when op is ge), or op a splat."""
    shape = tuple(shape) if shape is not None else g.shape(min_rank=1)
    if not shape:                    # rank 0: two constants
        t = TensorType(DType.I64, ())
        return g.emit(op, [g.literal(t, (0,)), g.literal(t, (g.ch.below(2),))])
    i = g.ch.below(len(shape))
    a = g.emit("iota", [], 1.0, None, shape[i] - 1, shape=shape, axis=i)
    if len(shape) >= 2 and g.ch.coin(0.7):
        j = g.ch.below(len(shape))
        b = g.emit("iota", [], 1.0, None, shape[j] - 1, shape=shape, axis=j)
    else:
        b = g.literal(TensorType(DType.I64, shape), (g.ch.below(shape[i]),))
    return g.emit(op, [a, b])


def _compare_params(g: Gen, op: str, shape: tuple[int, ...] | None) -> Value:
    if g.ad:
        return _compare_positions(g, op, shape)
    a = _fresh_param(g, lambda t: t.shape == shape) if shape is not None else _fresh_param(g)
    if a.type.shape != shape and shape is not None:
        a = g.param(TensorType(g.dtype, shape))
    b = a if op in ("eq", "ne", "le", "ge") and g.ch.coin(0.2) else \
        _fresh_param(g, lambda t: t == a.type) if g.ch.coin(0.5) else g.param(a.type)
    if b.type != a.type:
        b = g.param(a.type)
    return g.emit(op, [a, b])


def _comparison(op: str) -> Maker:
    """lt(a, b) used as a model uses a mask: where(mask, x, y) or x * mask.cast(dtype)."""
    def make(g: Gen) -> Value | None:
        c = _compare_params(g, op, None)
        x = g.like(TensorType(g.dtype, c.type.shape))
        if g.ch.coin(0.5):
            y = g.like(x.type)
            return g.emit("where", [c, x, y], max(x.mag, y.mag))
        m = g.emit("cast", [c], 1.0, None, dtype=g.dtype.value)
        return g.emit("mul", [x, m], x.mag)
    return make


def _where(g: Gen) -> Value | None:
    x = g.float_operand()
    c = _mask(g, x.type.shape)
    y = g.like(x.type)
    return g.emit("where", [c, x, y], max(x.mag, y.mag))


def _iota(g: Gen) -> Value | None:
    """Positions: x + iota(shape of x, axis).cast(dtype) * 2^-k (a position encoding)."""
    x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    axis = g.ch.below(x.type.rank)
    n = x.type.shape[axis]
    pos = g.emit("iota", [], 1.0, None, n - 1, shape=tuple(x.type.shape), axis=axis)
    f = g.emit("cast", [pos], float(n), None, dtype=x.type.dtype.value)
    c = g.literal(f.type, (2.0 ** -max(0, (n - 1).bit_length()),))
    s = g.emit("mul", [f, c], 1.0)
    return g.emit("add", [x, s], x.mag + 1.0)


def _tril(g: Gen) -> Value | None:
    x = g.float_operand(_ranked(2), lambda: g.shape(min_rank=2))
    return g.emit("tril", [x], x.mag, None, k=g.ch.pick((0, -1, 1, 2)))


def _argmax(g: Gen) -> Value | None:
    """argmax of a parameter; its index then picks values (greedy decoding's pattern)."""
    x = _fresh_param(g, _ranked(1))
    if x.type.rank < 1:
        x = g.param(TensorType(g.dtype, g.shape(min_rank=1)))
    axis = _axis(g, x.type)
    assert axis is not None     # rank >= 1: every axis qualifies
    n = x.type.shape[axis]
    idx = g.emit("argmax", [x], 1.0, None, n - 1, axis=axis)
    if g.ch.coin(0.5):
        return g.emit("take_along_axis", [x, idx], x.mag, None, axis=axis)
    return idx


MATH_MAKERS: dict[str, Row] = {
    "maximum": Row(_binary_math("maximum")), "minimum": Row(_binary_math("minimum")),
    **{op: Row(_unary_math(op)) for op in ("abs", "square", "erf")},
    "sign": Row(_sign, ad_make=_sign_ad), "pow": Row(_pow), "clamp": Row(_clamp), "gelu": Row(_gelu), "cast": Row(_cast),
    **{op: Row(_comparison(op)) for op in COMPARISONS},
    "where": Row(_where), "iota": Row(_iota), "tril": Row(_tril), "argmax": Row(_argmax),
}
MATH_ATTR_CHOICES: dict[tuple[str, str], Mapping[str, object]] = {("gelu", "approximate"): _GELU_APPROXIMATE}
# IR-internal ops: generated by the VJP of this surface op (inside `handle`).
MATH_VIA_AD = {"maximum_grad": "maximum", "clamp_grad": "clamp", "gelu_grad": "gelu"}
