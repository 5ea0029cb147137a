"""Shared pieces of the generator's op rows (progen_ops, progen_ops_math): the row type and
small operand helpers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .types import TensorType

Maker = Callable[..., object]


@dataclass(frozen=True)
class Row:
    make: Maker
    ad: bool = True              # may be generated inside a differentiated function
    ad_make: Maker | None = None  # the variant used there (default: make)


def _axis(g, t: TensorType, want=lambda d: True) -> int | None:
    axes = [i for i, d in enumerate(t.shape) if want(d)]
    return g.ch.pick(axes) if axes else None


def _ranked(min_rank: int):
    return lambda t: t.rank >= min_rank


def _positive_operand(g, lo: float):
    """log/sqrt/rsqrt's operand: a parameter used directly (drawn in [0.5, 2)) or a
    positive-by-construction value."""
    if g.ch.coin(0.5):
        return g.positive(g.float_operand().type, lo)
    return g.param(TensorType(g.dtype, g.shape()), positive=True)
