"""Shared pieces of the generator's op rows (progen_ops, progen_ops_math): the row type and
small operand helpers."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compiler.core.types import TensorType

if TYPE_CHECKING:
    from compiler.oracle.progen.case import Value
    from compiler.oracle.progen.generate import Gen

# Pseudo-ops of a Let (case.Let.op) that are no row of ops.OPS: a call of a case's size-generic
# helper number attrs["fn"] at attrs["sizes"] (written `g[..](..)` when attrs["explicit"]),
# and a size used as a bare number, `x * (1.0 / B)` (attrs["by"]).
CALL, SCALE = "call", "scale"

# A row's maker: adds one op (and the lets its operands need) to the generator and returns
# the new value, or None when the op does not apply to what the generator drew.
Maker = Callable[["Gen"], "Value | None"]


@dataclass(frozen=True)
class Row:
    make: Maker
    ad: bool = True              # may be generated inside a differentiated function
    ad_make: Maker | None = None  # the variant used there (default: make)


def _axis(g: Gen, t: TensorType, want: Callable[[int], bool] = lambda d: True) -> int | None:
    axes = [i for i, d in enumerate(t.shape) if want(d)]
    return g.ch.pick(axes) if axes else None


def _ranked(min_rank: int) -> Callable[[TensorType], bool]:
    return lambda t: t.rank >= min_rank


def _lower_bound(v: Value) -> float:
    """The bound of a value that is positive by construction (Gen.positive, _positive_operand)."""
    assert v.pos_lo is not None, v.name
    return v.pos_lo


def _positive_operand(g: Gen, lo: float) -> Value:
    """log/sqrt/rsqrt's operand: a parameter used directly (drawn in [0.5, 2)) or a
    positive-by-construction value."""
    if g.ch.coin(0.5):
        return g.positive(g.float_operand().type, lo)
    return g.param(TensorType(g.dtype, g.shape()), positive=True)
