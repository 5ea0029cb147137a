"""The generator's model-like chains (`MOTIFS`): head split and merge, attention, transposed
weights, MLPs, a fused QKV, the centring of a norm, StoryLM-0's loss, embeddings, shards and
residuals, each a few lets as a model writes them; and `_wide_head`, the 2,048-column LM head
that half the big cases start with (progen/driver.py).  Built from makers.py's makers.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from compiler.core.types import TensorType
from compiler.oracle.progen.base import Maker, _ranked
from compiler.oracle.progen.makers import _concat_shape, _gather, _matmul

if TYPE_CHECKING:
    from compiler.oracle.progen.case import Value
    from compiler.oracle.progen.generate import Gen


def _heads(g: Gen) -> Value | None:
    """[B, T, H * Dh] -> reshape [B, T, H, Dh] -> transpose [B, H, T, Dh] -> attention -> merge."""
    b, t, h, dh = (g.ch.pick((1, 2)), g.dim(17), g.ch.pick((1, 2, 4)), g.dim(16))
    if not g.fits((b, h, t, t)) or not g.fits((b, t, h * dh)):
        return None
    x = g.like(TensorType(g.dtype, (b, t, h * dh)))
    q4 = g.emit("reshape", [x], x.mag, shape=(b, t, h, dh))
    q = g.emit("transpose", [q4], x.mag, perm=(0, 2, 1, 3))
    y = _attention(g, q, q)
    yt = g.emit("transpose", [y], y.mag, perm=(0, 2, 1, 3))
    return g.emit("reshape", [yt], y.mag, shape=(b, t, h * dh))


def _attention(g: Gen, q: Value | None = None, k: Value | None = None) -> Value:
    """softmax((q @ k^T) * scale) @ v over the last two axes."""
    q = q or g.float_operand(_ranked(2), lambda: g.shape(min_rank=2))
    k = k or g.like(q.type)
    r = q.type.rank
    kt = g.emit("transpose", [k], k.mag, perm=tuple(range(r - 2)) + (r - 1, r - 2))
    s = _matmul(g, q, kt)
    p = g.emit("softmax", [s], 1.0, axis=r - 1)
    v = g.like(q.type)
    return _matmul(g, p, v)


def _transposed_weight(g: Gen) -> Value | None:
    """y = x @ w^T + s @ v (issue 11's first program: a matmul against a transposed weight)."""
    x = g.float_operand(lambda t: t.rank == 2, lambda: g.shape(rank=2))
    m, k = x.type.shape
    n = g.dim(max(1, g.max_elements // max(m, k)))
    w = g.like(x.type.with_shape((n, k)))
    wt = g.emit("transpose", [w], w.mag, perm=(1, 0))
    y = _matmul(g, x, wt)
    return _matmul(g, y) if g.ch.coin(0.5) else y


# N of `_wide_head`'s products.  -O2 packs the B panels of a product this wide
# (parallelize.PACK_B_MIN_N; a transposed B by its own transpose, transposed_operands.py),
# starts its tiles from registers (zero_tiles.py), and under reverseMode its gradients are a
# product this deep (g @ w^T: k blocks) and another this wide (x^T @ g, which an SGD update
# may accumulate into its weight: accumulate.py).  Every other case's tensors stay far
# below it, so only hand-written tests reached those paths: a transposed B of K = 8 that
# the packing could not vectorise was found by hand.
WIDE_N = 2048
WIDE_ROWS = (32, 64)          # with K >= 16 (most): >= parallelize.PARALLEL_MIN_FLOPS
WIDE_K = (16, 17, 32, 64)


def _wide_head(g: Gen) -> Value | None:
    """x @ w with w [k, WIDE_N], or stored [WIDE_N, k] and transposed: an LM head over a
    vocabulary of WIDE_N.  Only where a tensor may hold 64 * WIDE_N elements (big cases)."""
    if g.max_elements < WIDE_ROWS[-1] * WIDE_N:
        return None
    def fits(t: TensorType) -> bool:
        return t.rank == 2 and 0 < t.shape[0] <= WIDE_ROWS[-1] and 0 < t.shape[1] <= WIDE_K[-1]

    x = g.float_operand(fits, lambda: (g.ch.pick(WIDE_ROWS), g.ch.pick(WIDE_K)))
    k = x.type.shape[1]
    if g.ch.coin(0.5):
        w = g.like(x.type.with_shape((WIDE_N, k)))
        w = g.emit("transpose", [w], w.mag, perm=(1, 0))
    else:
        w = g.like(x.type.with_shape((k, WIDE_N)))
    return _matmul(g, x, w)


def _mlp(g: Gen) -> Value | None:
    h = _matmul(g)
    a = g.emit(g.ch.pick(("relu", "tanh", "sigmoid")), [h], h.mag)
    return _matmul(g, a)


def _qkv(g: Gen) -> Value | None:
    """One matmul to [.., 3E], sliced into three along the last axis, recombined."""
    x = g.float_operand(_ranked(2), lambda: g.shape(min_rank=2))
    *batch, m, k = x.type.shape
    e = g.dim(max(1, g.max_elements // max(1, 3 * m * math.prod(batch), k * math.prod(batch))))
    w = g.like(x.type.with_shape((*batch, k, 3 * e)))
    y = _matmul(g, x, w)
    r = y.type.rank
    parts = [g.emit("slice", [y], y.mag, axis=r - 1, start=i * e, stop=(i + 1) * e) for i in range(3)]
    if g.ch.coin(0.5):
        return g.emit("concat", [parts[2], parts[0]], y.mag, axis=r - 1)
    s = g.emit("mul", [parts[0], parts[1]], y.mag ** 2)
    return g.rescale(g.emit("add", [s, parts[2]], y.mag ** 2 + y.mag))


def _norm(g: Gen) -> Value | None:
    """x - sum(x) / n (broadcast back): the centring of a layer norm, without mean (AD-safe)."""
    x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    axis = g.ch.below(x.type.rank)
    s = g.emit("reduce_keep", [x], x.mag, op="sum", axis=axis)
    c = g.literal(s.type, (2.0 ** -round(math.log2(x.type.shape[axis])),))
    m = g.emit("mul", [s, c], x.mag)
    mb = g.emit("broadcast", [m], x.mag, shape=x.type.shape)
    return g.emit("sub", [x, mb], 2 * x.mag)


def _nll(g: Gen) -> Value | None:
    """-take_along_axis(log_softmax(logits), targets), summed (StoryLM-0's loss)."""
    x = g.float_operand(lambda t: t.rank == 2, lambda: g.shape(rank=2))
    ls = g.emit("log_softmax", [x], x.mag + 2, axis=1)
    idx = g.index((x.type.shape[0], 1), x.type.shape[1])
    picked = g.emit("take_along_axis", [ls, idx], x.mag + 2, axis=1)
    neg = g.emit("neg", [picked], picked.mag)
    return g.rescale(g.emit("reduce_keep", [neg], neg.mag * math.sqrt(x.type.shape[0]), op="sum", axis=0))


def _embed(g: Gen) -> Value | None:
    """gather rows of an embedding, then a projection."""
    y = _gather(g)
    return _matmul(g, y) if y is not None and y.type.rank >= 2 else y


def _shards(g: Gen) -> Value | None:
    """concat(x @ w_a, x @ w_b) along the last axis (a column-parallel linear layer)."""
    x = g.float_operand(_ranked(2), lambda: g.shape(min_rank=2))
    ya, yb = _matmul(g, x), _matmul(g, x)
    if ya.type.shape[:-1] != yb.type.shape[:-1] or not g.fits(_concat_shape([ya, yb], ya.type.rank - 1)):
        return None
    return g.emit("concat", [ya, yb], max(ya.mag, yb.mag), axis=ya.type.rank - 1)


def _residual(g: Gen) -> Value | None:
    x = g.float_operand()
    f = g.emit(g.ch.pick(("tanh", "relu", "sigmoid", "neg")), [x], x.mag)
    return g.emit("add", [x, f], 2 * x.mag)


MOTIFS: dict[str, Maker] = {
    "heads": _heads, "attention": _attention, "transposed_weight": _transposed_weight, "mlp": _mlp,
    "qkv": _qkv, "norm": _norm, "nll": _nll, "embed": _embed, "shards": _shards, "residual": _residual,
}


