"""The generator's per-op table (`MAKERS`, one row per surface op of ops.OPS), its model-like
chains (`MOTIFS`), and `build_case`, the driver behind progen.generate.

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
from compiler.oracle.progen.case import Case, Value
from compiler.oracle.progen.generic_calls import add_generics
from compiler.oracle.progen.makers_math import MATH_ATTR_CHOICES, MATH_MAKERS, MATH_VIA_AD
from compiler.oracle.progen.makers_random import RANDOM_MAKERS
from compiler.oracle.progen.makers_scan import SCAN_ATTR_CHOICES, SCAN_MAKERS

if TYPE_CHECKING:
    from compiler.oracle.progen.generate import Choices, Gen, GenConfig


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


# ---- model-like chains ---------------------------------------------------------------------
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
    fits = lambda t: t.rank == 2 and 0 < t.shape[0] <= WIDE_ROWS[-1] and 0 < t.shape[1] <= WIDE_K[-1]  # noqa: E731
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


# ---- the driver ---------------------------------------------------------------------------
def build_case(gen_cls: type[Gen], ch: Choices, cfg: GenConfig) -> Case:
    ad = ch.coin(cfg.ad_fraction)
    dtype = ch.weighted([d for d, _ in cfg.dtypes], [w for _, w in cfg.dtypes])
    big = ch.coin(cfg.big_fraction)
    g = gen_cls(ch, cfg, ad, dtype, cfg.big_elements if big else cfg.max_elements)
    if big and cfg.ops is None and ch.coin(cfg.wide_fraction):   # a draw of big cases only
        _wide_head(g)
    ops = [op for op in (cfg.ops or MAKERS) if not ad or MAKERS[op].ad]
    n = ch.between(1, 4 if big else cfg.max_lets)
    for _ in range(4 * n):
        if len(g.lets) >= n:
            break
        if ch.coin(cfg.motif_fraction) and cfg.ops is None:
            MOTIFS[ch.pick(sorted(MOTIFS))](g)
        else:
            row = MAKERS[ch.pick(ops)]
            (row.ad_make if ad and row.ad_make else row.make)(g)
        if ch.coin(0.05) and g.pool:
            g.alias(g.pool[-1])
    results = _results(g, ch, ad)
    case = Case(g.params, g.lets, results, dtype, ad)
    _drop_unused_params(case)
    if len(case.lets) >= 3 and ch.coin(0.15):
        case.split = ch.between(1, len(case.lets) - 1)
    if ad:
        case.wrapper = ch.pick(("tuple", "destructure", "sgd"))
        n_out = 1 + len(case.float_params())
        case.picks = [ch.below(n_out) for _ in range(ch.between(1, min(4, n_out + 1)))]
    if cfg.ops is None and ch.coin(cfg.generic_fraction):   # drawn last: the other cases stay as they were
        add_generics(g, case)
    return case


def _results(g: Gen, ch: Choices, ad: bool) -> list[str]:
    if not g.pool:
        g.param(TensorType(g.dtype, g.shape()))
    floats = [v for v in g.pool]
    last = floats[-1].name
    if ad or not ch.coin(0.25):
        return [last]
    extra = [ch.pick(floats + g.index_pool).name for _ in range(ch.between(1, 2))]
    if ch.coin(0.3):
        extra[0] = last                      # (y, y): one value, two results
    return [last, *extra]


def _drop_unused_params(case: Case) -> None:
    """Parameters no let or result mentions are dropped (the programs stay readable);
    under reverseMode one unused float parameter is kept: its cotangent is zeros."""
    used = {a for l in case.lets for a in l.args} | set(case.results)
    keep = [p for p in case.params if p.name in used]
    unused = [p for p in case.params if p.name not in used and p.type.is_float]
    if case.ad and unused:
        keep.append(unused[0])
    case.params = keep
