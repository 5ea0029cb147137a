"""The generator's rows for the scans (cumsum, cumprod), logsumexp, pow with a tensor
exponent and the sorts (sort, argsort, topk, argtopk) (progen_ops.MAKERS merges `SCAN_MAKERS`).

argsort and argtopk are taken of parameters only, as argmax is (makers_math.py): every
implementation holds a parameter exactly, so a different order is a bug, never rounding.

cumprod multiplies values bounded away from 0 (sigmoid(x) + 0.5, in (0.5, 1.5)) along an
axis of at most 8 elements, so its products stay representable in every dtype (F8E4M3
included) and its VJP, which divides by x, stays finite.  pow's tensor exponent takes a
positive base (x^e is NaN for x < 0 and most e, and has a pole at 0).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from compiler.core.types import TensorType
from compiler.oracle.progen.base import Row, _axis, _positive_operand, _ranked

if TYPE_CHECKING:
    from compiler.oracle.progen.case import Value
    from compiler.oracle.progen.generate import Gen

_CUMPROD_MAX_LEN = 8


def _cumsum(g: Gen) -> Value | None:
    x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    axis = g.ch.below(x.type.rank)
    return g.rescale(g.emit("cumsum", [x], x.mag * math.sqrt(x.type.shape[axis]), None, axis=axis))


def _cumprod(g: Gen) -> Value | None:
    t = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1)).type
    axis = _axis(g, t, lambda d: d <= _CUMPROD_MAX_LEN)
    if axis is None:
        return None
    x = g.positive(t, 0.5)
    n = t.shape[axis]
    return g.rescale(g.emit("cumprod", [x], 1.5 ** n, 0.5 ** n, axis=axis))


def _logsumexp(g: Gen) -> Value | None:
    x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    axis = g.ch.below(x.type.rank)
    return g.rescale(g.emit("logsumexp", [x], x.mag + math.log(x.type.shape[axis] + 1), None, axis=axis))


def _pow_tensor(g: Gen) -> Value | None:
    x = _positive_operand(g, 0.3)
    e = g.like(x.type)
    lo = x.pos_lo or 0.5
    mag = max(x.mag, 1 / lo) ** min(e.mag, 4.0)
    return g.rescale(g.emit("pow_tensor", [x, e], mag, None))


# sort's and argsort's `descending`, as the generator draws it
_DESCENDING = {"false": "ascending", "true": "descending"}


def _sort(g: Gen) -> Value | None:
    x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    axis = g.ch.below(x.type.rank)
    return g.emit("sort", [x], x.mag, x.pos_lo, axis=axis, descending=g.ch.pick(tuple(_DESCENDING)))


def _topk(g: Gen) -> Value | None:
    x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    axis = g.ch.below(x.type.rank)
    return g.emit("topk", [x], x.mag, x.pos_lo, k=g.ch.between(1, x.type.shape[axis]), axis=axis)


def _positions(op: str) -> Callable[[Gen], Value | None]:
    """argsort / argtopk of a parameter; the positions then pick its values (take_along_axis)."""
    def make(g: Gen) -> Value | None:
        cands = [p for p in g.params if p.type.is_float and p.pos_lo is None and p.type.rank >= 1]
        x = g.ch.pick(cands) if cands and g.ch.coin(0.5) else g.param(TensorType(g.dtype, g.shape(min_rank=1)))
        axis = g.ch.below(x.type.rank)
        n = x.type.shape[axis]
        attrs = {"descending": g.ch.pick(tuple(_DESCENDING))} if op == "argsort" else {"k": g.ch.between(1, n)}
        idx = g.emit(op, [x], 1.0, None, n - 1, axis=axis, **attrs)
        if g.ch.coin(0.5):
            return g.emit("take_along_axis", [x, idx], x.mag, None, axis=axis)
        return idx
    return make


SCAN_MAKERS: dict[str, Row] = {
    "cumsum": Row(_cumsum), "cumprod": Row(_cumprod), "logsumexp": Row(_logsumexp), "pow_tensor": Row(_pow_tensor),
    "sort": Row(_sort), "argsort": Row(_positions("argsort")), "topk": Row(_topk), "argtopk": Row(_positions("argtopk")),
}
SCAN_ATTR_CHOICES: dict[tuple[str, str], Mapping[str, object]] = {
    ("sort", "descending"): _DESCENDING, ("argsort", "descending"): _DESCENDING}
