"""The generator's per-op table (`MAKERS`, one row per surface op of ops.OPS), and the makers
its model-like chains (progen/motifs.py) build on; progen/driver.py's `build_case` draws from both.

A maker adds one op (and the lets its operands need) to a progen.Gen and returns the new
value, or None when it does not apply.  `ad=False` rows are never generated inside a
differentiated function; `ad_make` replaces `make` there (reduce_keep: no mean; broadcast:
same rank only), so every generated `handle` obeys the reverseMode restrictions.  The
IR-internal ops have no surface form: VIA_AD names the op whose VJP emits each of them.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from compiler.core.types import TensorType
from compiler.oracle.progen.base import Maker, Row, _axis, _lower_bound, _positive_operand, _ranked
from compiler.oracle.progen.case import Value
from compiler.oracle.progen.makers_math import MATH_ATTR_CHOICES, MATH_MAKERS, MATH_VIA_AD
from compiler.oracle.progen.makers_random import RANDOM_MAKERS
from compiler.oracle.progen.makers_scan import SCAN_ATTR_CHOICES, SCAN_MAKERS

if TYPE_CHECKING:
    from compiler.oracle.progen.generate import Gen


# ---- helpers ----------------------------------------------------------------------------
def _perm(g: Gen, rank: int) -> tuple[int, ...]:
    """A random permutation (choice 0 everywhere: swap the last two axes)."""
    perm = list(range(rank))
    for i in range(rank - 1, 0, -1):
        j = g.ch.below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    if perm == list(range(rank)) and rank >= 2:
        perm[-2], perm[-1] = perm[-1], perm[-2]
    return tuple(perm)


def _factor(n: int) -> list[int]:
    out: list[int] = []
    p = 2
    while n > 1 and p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def _regroup(g: Gen, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Another shape of the same volume: the prime factors dealt out to 0..max_rank dims."""
    factors = _factor(math.prod(shape))
    rank = g.ch.between(0 if not factors else 1, g.cfg.max_rank)
    dims = [1] * rank
    for f in factors:
        dims[g.ch.below(rank)] *= f
    return tuple(dims)


# ---- elementwise ----------------------------------------------------------------------
def _binary(op: str) -> Maker:
    def make(g: Gen) -> Value | None:
        a = g.float_operand()
        b = g.like(a.type)
        mag = a.mag * b.mag if op == "mul" else a.mag + b.mag
        lo = (a.pos_lo + b.pos_lo if op == "add" else a.pos_lo * b.pos_lo if op == "mul" else None) \
            if a.pos_lo and b.pos_lo else None
        return g.rescale(g.emit(op, [a, b], mag, lo))
    return make


def _div(g: Gen) -> Value | None:
    a = g.float_operand()
    d = g.positive(a.type)
    return g.rescale(g.emit("div", [a, d], a.mag / _lower_bound(d)))


def _unary(op: str) -> Maker:
    def make(g: Gen) -> Value | None:
        if op in ("log", "sqrt", "rsqrt"):
            x = _positive_operand(g, 0.3)
            lo = _lower_bound(x)
            mag, pos = {"log": (max(1.0, abs(math.log(lo))), None), "sqrt": (math.sqrt(x.mag), math.sqrt(lo)),
                        "rsqrt": (1 / math.sqrt(lo), 1 / math.sqrt(max(x.mag, lo) * 4))}[op]
            return g.emit(op, [x], mag, pos)
        x = g.float_operand()
        if op == "exp" and x.mag > 1.5:       # keep e^x O(1)
            c = g.literal(x.type, (2.0 ** -math.ceil(math.log2(x.mag)),))
            x = g.emit("mul", [x, c], 1.0)
        mag, pos = {"neg": (x.mag, None), "exp": (math.exp(x.mag), math.exp(-3 * x.mag)),
                    "tanh": (min(1.0, x.mag), None), "sigmoid": (0.6, None),
                    "relu": (x.mag, None)}[op]
        return g.emit(op, [x], mag, pos)
    return make


# ---- contractions and layout -----------------------------------------------------------
def _matmul(g: Gen, a: Value | None = None, b: Value | None = None) -> Value:
    a = a or g.float_operand(_ranked(2), lambda: g.shape(min_rank=2))
    *batch, m, k = a.type.shape
    if b is None:
        n = g.dim(max(1, g.max_elements // max(k * math.prod(batch), m * math.prod(batch), 1)))
        b = g.like(a.type.with_shape((*batch, k, n)))
    y = g.emit("matmul", [a, b], a.mag * b.mag * math.sqrt(k))
    return g.rescale(y)


def _transpose(g: Gen) -> Value | None:
    x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    return g.emit("transpose", [x], x.mag, x.pos_lo, perm=_perm(g, x.type.rank))


def _reshape(g: Gen) -> Value | None:
    x = g.ch.pick(g.index_pool) if g.index_pool and g.ch.coin(0.15) else g.float_operand()
    return g.emit("reshape", [x], x.mag, x.pos_lo, x.index_hi, shape=_regroup(g, x.type.shape))


def _with_unit_dims(g: Gen) -> Value:
    """A value with at least one axis of size 1: an existing one, or a keepdims sum, or a parameter."""
    cands = [v for v in g.pool if 1 in v.type.shape]
    if cands and g.ch.coin(0.5):
        return g.ch.pick(cands)
    if g.ch.coin(0.5):
        x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
        return _reduce(g, x, "sum")
    shape = list(g.shape(min_rank=1))
    shape[g.ch.below(len(shape))] = 1
    return g.param(TensorType(g.dtype, tuple(shape)))


def _broadcast(g: Gen, same_rank: bool = False) -> Value:
    x = _with_unit_dims(g)
    shape = list(x.type.shape)
    units = [i for i, d in enumerate(shape) if d == 1]
    for i in units:
        if g.ch.coin(0.7) or i == units[-1]:
            shape[i] = g.dim(max(1, g.max_elements // math.prod(shape)))
    if not same_rank and g.ch.coin(0.3) and len(shape) < g.cfg.max_rank:
        shape.insert(0, g.dim(max(1, g.max_elements // math.prod(shape))))
    return g.emit("broadcast", [x], x.mag, x.pos_lo, shape=tuple(shape))


def _slice(g: Gen) -> Value | None:
    pool = g.index_pool if g.index_pool and g.ch.coin(0.15) else None
    x = g.ch.pick([v for v in pool if max(v.type.shape, default=1) > 1] or pool) if pool else \
        g.float_operand(lambda t: any(d > 1 for d in t.shape), lambda: g.shape(min_rank=1))
    axis = _axis(g, x.type, lambda d: d > 1)
    if axis is None:
        return None
    n = x.type.shape[axis]
    start = g.ch.below(n - 1)
    stop = g.ch.between(start + 1, n)
    return g.emit("slice", [x], x.mag, x.pos_lo, x.index_hi, axis=axis, start=start, stop=stop)


def _concat(g: Gen) -> Value | None:
    x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    axis = g.ch.below(x.type.rank)
    parts = [x]
    for _ in range(g.ch.between(1, 2)):
        if g.ch.coin(0.3):
            parts.append(g.ch.pick(parts))              # concat(a, a)
            continue
        shape = list(x.type.shape)
        shape[axis] = g.dim(max(1, g.max_elements // max(1, math.prod(shape) // shape[axis])))
        parts.append(g.like(x.type.with_shape(tuple(shape))))
    if not g.fits(_concat_shape(parts, axis)):
        return None
    return g.emit("concat", parts, max(p.mag for p in parts), None, axis=axis)


def _concat_shape(parts: Sequence[Value], axis: int) -> list[int]:
    s = list(parts[0].type.shape)
    s[axis] = sum(p.type.shape[axis] for p in parts)
    return s


def _gather(g: Gen) -> Value | None:
    values = g.float_operand(lambda t: t.rank == 2, lambda: g.shape(rank=2))
    v, d = values.type.shape
    sigma = g.shape(rank=g.ch.weighted([0, 1, 2, 3], [2, 4, 3, 1]))
    if not g.fits(sigma + (d,)):
        return None
    idx = g.index(sigma, v)
    return g.emit("gather", [values, idx], values.mag, values.pos_lo)


# Each reduce_keep choice the generator draws, with the magnitude of its result
# (x's magnitude, the reduced length n).
_REDUCE_MAG = {"sum": lambda mag, n: mag * math.sqrt(n), "mean": lambda mag, n: mag, "max": lambda mag, n: 2 * mag,
               "min": lambda mag, n: 2 * mag}
_AD_REDUCE = ("sum", "max", "min")   # reverseMode rejects op=mean


def _reduce(g: Gen, x: Value | None = None, op: str | None = None) -> Value:
    x = x or g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    op = op or g.ch.pick(tuple(_REDUCE_MAG))
    axis = g.ch.below(x.type.rank)
    n = x.type.shape[axis]
    mag = _REDUCE_MAG[op](x.mag, n)
    lo = x.pos_lo * (n if op == "sum" else 1) if x.pos_lo else None
    return g.rescale(g.emit("reduce_keep", [x], mag, lo, op=op, axis=axis))


def _ad_reduce_op(g: Gen) -> str:
    return g.ch.pick(_AD_REDUCE)


def _softmax(op: str) -> Maker:
    def make(g: Gen) -> Value | None:
        x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
        axis = g.ch.below(x.type.rank)
        mag = 1.0 if op == "softmax" else x.mag + math.log(x.type.shape[axis] + 1)
        return g.rescale(g.emit(op, [x], mag, None, axis=axis))
    return make


def _take_along_axis(g: Gen) -> Value | None:
    x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    axis = g.ch.below(x.type.rank)
    shape = list(x.type.shape)
    shape[axis] = g.dim(max(1, g.max_elements // max(1, math.prod(shape) // shape[axis])))
    idx = g.index(tuple(shape), x.type.shape[axis])
    return g.emit("take_along_axis", [x, idx], x.mag, x.pos_lo, axis=axis)


MAKERS: dict[str, Row] = {
    "add": Row(_binary("add")), "sub": Row(_binary("sub")), "mul": Row(_binary("mul")), "div": Row(_div),
    **{op: Row(_unary(op)) for op in ("neg", "exp", "log", "tanh", "sqrt", "rsqrt", "sigmoid", "relu")},
    "matmul": Row(_matmul),
    "transpose": Row(_transpose),
    "reshape": Row(_reshape),
    "broadcast": Row(_broadcast, ad_make=lambda g: _broadcast(g, same_rank=True)),
    "slice": Row(_slice),
    "concat": Row(_concat),
    "gather": Row(_gather),
    "reduce_keep": Row(_reduce, ad_make=lambda g: _reduce(g, op=_ad_reduce_op(g))),
    "softmax": Row(_softmax("softmax")),
    "log_softmax": Row(_softmax("log_softmax")),
    "take_along_axis": Row(_take_along_axis),
}
# IR-internal ops: generated by the VJP of this surface op (inside `handle`).
VIA_AD = {"scatter_add": "gather", "scatter_along_axis": "take_along_axis", "relu_grad": "relu"}

MAKERS.update(MATH_MAKERS)     # the math, comparison, mask, cast and index ops
MAKERS.update(SCAN_MAKERS)     # cumsum, cumprod, logsumexp, pow with a tensor exponent, the sorts
MAKERS.update(RANDOM_MAKERS)   # the random ops, on key parameters
# The choices of each enum attribute the generator draws (tests/test_tables.py: one row per choice).
ATTR_CHOICES: dict[tuple[str, str], Mapping[str, object]] = {("reduce_keep", "op"): _REDUCE_MAG, **MATH_ATTR_CHOICES,
                                                             **SCAN_ATTR_CHOICES}
VIA_AD.update(MATH_VIA_AD)
