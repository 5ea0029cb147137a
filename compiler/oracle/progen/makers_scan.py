"""The generator's rows for the scans (cumsum, cumprod), logsumexp and pow with a tensor
exponent (progen_ops.MAKERS merges `SCAN_MAKERS`).

cumprod multiplies values bounded away from 0 (sigmoid(x) + 0.5, in (0.5, 1.5)) along an
axis of at most 8 elements, so its products stay representable in every dtype (F8E4M3
included) and its VJP, which divides by x, stays finite.  pow's tensor exponent takes a
positive base (x^e is NaN for x < 0 and most e, and has a pole at 0).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

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


SCAN_MAKERS: dict[str, Row] = {
    "cumsum": Row(_cumsum), "cumprod": Row(_cumprod), "logsumexp": Row(_logsumexp), "pow_tensor": Row(_pow_tensor),
}
