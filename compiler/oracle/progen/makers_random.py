"""The generator's rows for the random ops (progen_ops.MAKERS merges `RANDOM_MAKERS`).

Keys are I64 [2] parameters (interp.random_inputs draws small words for them; any two
words are a key) or rows of a random_split; every draw is consumed as a model consumes it:
uniforms and normals scale a value, a Bernoulli mask drops elements (dropout), a
categorical draw picks logits, bits become floats in [0, 1).  The differential run then
holds the compiled draws to the interpreter's at every level.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from compiler.core.types import DType, TensorType
from compiler.oracle.progen.base import Row, _ranked

if TYPE_CHECKING:
    from compiler.oracle.progen.case import Value
    from compiler.oracle.progen.generate import Gen

KEY = TensorType(DType.I64, (2,))


def _key(g: Gen, how: int | None = None) -> Value:
    """A key: a key parameter (how 0), a row of random_split (1) or random_fold_in of a step
    parameter (2); drawn when `how` is None."""
    base = g.param(KEY)
    g.index_pool.remove(base)          # its words are no index
    how = g.ch.below(3) if how is None else how
    if how == 0:
        return base
    if how == 1:
        n = g.ch.between(1, 4)
        keys = g.emit("random_split", [base], 1.0, None, n=n)
        g.index_pool.remove(keys)
        j = g.ch.below(n)
        row = g.emit("slice", [keys], 1.0, None, axis=0, start=j, stop=j + 1)
        g.index_pool.remove(row)
        key = g.emit("reshape", [row], 1.0, None, shape=(2,))
    else:
        step = g.param(TensorType(DType.I64, ()))
        key = g.emit("random_fold_in", [base, step], 1.0, None)
    g.index_pool.remove(key)
    return key


def _in_dtype(g: Gen, v: Value, mag: float) -> Value:
    """An F32 draw in the case's float dtype (one float dtype per case)."""
    if g.dtype is DType.F32:
        return v
    g.pool.remove(v)
    return g.emit("cast", [v], mag, None, dtype=g.dtype.value)


def _draw(op: str, how: int | None = None) -> Callable[[Gen], Value | None]:
    """x * random_uniform or x + random_normal of x's shape and dtype."""
    def make(g: Gen) -> Value | None:
        x = g.float_operand()
        d = g.emit(op, [_key(g, how)], 1.0 if op == "random_uniform" else 4.0, None, shape=x.type.shape,
                   dtype=g.dtype.value)
        if op == "random_uniform":
            return g.emit("mul", [x, d], x.mag)
        return g.rescale(g.emit("add", [x, d], x.mag + 4.0))
    return make


def _bits(g: Gen) -> Value | None:
    """random_bits as floats in [0, 1): cast to F32, times 2^-32."""
    shape = g.shape()
    b = g.emit("random_bits", [_key(g)], 1.0, None, shape=shape)
    g.index_pool.remove(b)
    f = g.emit("cast", [b], 2.0 ** 32, None, dtype="F32")
    g.pool.remove(f)
    scaled = g.emit("mul", [f, g.literal(f.type, (2.0 ** -32,))], 1.0)
    return _in_dtype(g, scaled, 1.0)


def _bernoulli(g: Gen) -> Value | None:
    """Dropout: where(bernoulli(key, keep), x * (1 / keep), 0)."""
    x = g.float_operand()
    keep = g.ch.pick((0.5, 0.75, 0.875, 0.25))
    mask = g.emit("bernoulli", [_key(g)], 1.0, None, p=keep, shape=x.type.shape)
    g.bool_pool.remove(mask)
    scaled = g.emit("mul", [x, g.literal(x.type, (1 / keep,))], x.mag / keep)
    return g.rescale(g.emit("where", [mask, scaled, g.literal(x.type, (0.0,))], x.mag / keep))


def _categorical(g: Gen) -> Value | None:
    """A draw from softmax(logits) along an axis; it picks logits (take_along_axis)."""
    x = g.float_operand(_ranked(1), lambda: g.shape(min_rank=1))
    axis = g.ch.below(x.type.rank)
    idx = g.emit("categorical", [_key(g), x], 1.0, None, x.type.shape[axis] - 1, axis=axis)
    return g.emit("take_along_axis", [x, idx], x.mag, None, axis=axis)


RANDOM_MAKERS: dict[str, Row] = {
    "random_uniform": Row(_draw("random_uniform")), "random_normal": Row(_draw("random_normal")),
    "random_bits": Row(_bits), "bernoulli": Row(_bernoulli), "categorical": Row(_categorical),
    # keys come from _key in every row above; these rows make theirs by split or fold_in
    "random_split": Row(_draw("random_uniform", 1)), "random_fold_in": Row(_draw("random_normal", 2)),
}
