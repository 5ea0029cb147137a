"""Non-smooth points: the one rule both finite-difference checks use (`kinac validate`,
compiler/oracle/validate.py, and the differential oracle, compiler/oracle/differential.py).

A central difference (f(x + h) - f(x - h)) / 2h is a derivative only where f is smooth
between x - h and x + h.  relu, abs, maximum, clamp, the comparisons feeding `where`,
argmax, ... have kinks or jumps: a difference whose step reaches one measures a mix of both
sides, which no VJP can match.  Low-precision dtypes reach kinks a second way: the library
computes a kink's input in its declared dtype, and where that rounds to the other side of
the kink than the float64 reference, its cotangent is (rightly) the other side's.

`KINKS` has a row per op with a kink or a discontinuity (a jump, a pole, the edge of its
domain): its operands -> signed distances to the non-smooth points, elementwise, whose
signs say which side (branch) each element is on.  `SMOOTH_OPS` names every other op; every op
of ops.OPS is in exactly one of them (tests/test_tables.py).  `trace` runs the interpreter
and records the distances of every such op application, in evaluation order.

The rule (`classify`), for a step from x to x + h and x - h: a kink site *depends* on the
step when its distance differs between the two sides (a site the step does not move cannot
change the derivative along it).  The step is
  ROUNDING when a site that depends on it lies within ROUNDING_SLACK times the declared
           dtype's rounding error of its kink (|d(x)| <= slack * |d_dtype(x) - d(x)|): the
           library may be on either side, whatever the step;
  STEP     when the step reaches a site that depends on it
           (|d(x)| <= max(|d(x + h) - d(x)|, |d(x - h) - d(x)|)), inputs exactly on a kink
           included: a smaller step, or another point, may avoid it;
  SMOOTH   otherwise: the difference is a derivative and must agree.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import DTypeLike

from compiler.core.types import Attrs
from compiler.ir.nodes import OpApp, Program
from compiler.oracle import interp
from compiler.oracle.interp_random import gumbel
from compiler.runtime.arrays import Array

SMOOTH, STEP, ROUNDING = "smooth", "step", "rounding"
# The library's rounding differs from the interpreter's (fusion at -O2, summation order):
# a kink is ambiguous within twice the interpreter's own rounding error of its input.
ROUNDING_SLACK = 2.0

Distances = Callable[[list[Array], Attrs], list[Array]]


def _f64(x: Array) -> Array:
    return np.asarray(x, np.float64)


def _at_zero(i: int) -> Distances:
    """Operand i's kink, jump, pole or domain edge is at 0 (relu, abs, sign, div, log)."""
    return lambda a, at: [_f64(a[i])]


def _tie(i: int, j: int) -> Distances:
    """Operands i and j swap roles where they are equal (maximum, the comparisons)."""
    def row(a: list[Array], at: Attrs) -> list[Array]:
        if a[i].dtype.kind != "f":      # I64 and Bool operands never move under a step
            return []
        return [_f64(a[i]) - _f64(a[j])]
    return row


def _bounds(i: int) -> Distances:
    """clamp's kinks: at min and at max (either may be left out)."""
    return lambda a, at: [_f64(a[i]) - b for b in (at["min"], at["max"]) if b is not None]


def _runner_up(x: Array, axis: int) -> list[Array]:
    """x_i - max over j != i of x_j along axis: >= 0 only at the maximum (0 on a tie), so
    the signs say which element wins and the values how far it is from losing."""
    x = _f64(x)
    if x.shape[axis] < 2:
        return []
    top = -np.sort(-x, axis=axis)
    first, second = np.take(top, [0], axis=axis), np.take(top, [1], axis=axis)
    return [np.where(x == first, first - second, x - first)]


def _pow(a: list[Array], at: Attrs) -> list[Array]:
    p = float(at["p"])
    return [] if p.is_integer() and p >= 0 else [_f64(a[0])]    # x^p: a pole or a domain edge at 0


def _gaps(x: Array, axis: int) -> list[Array]:
    """The gaps between neighbours in sorted order: sort, argsort, topk and argtopk change
    branch (which element goes where) where a gap closes."""
    x = _f64(x)
    return [np.diff(np.sort(x, axis=axis), axis=axis)] if x.shape[axis] >= 2 else []


def _categorical(a: list[Array], at: Attrs) -> list[Array]:
    """categorical jumps where the winner of logits + gumbel changes."""
    return _runner_up(_f64(a[1]) + gumbel(a[0], a[1].shape), at["axis"])


KINKS: dict[str, Distances] = {
    "relu": _at_zero(0),
    "relu_grad": _at_zero(1),
    "abs": _at_zero(0),
    "sign": _at_zero(0),
    "div": _at_zero(1),       # a pole where the denominator crosses 0
    "log": _at_zero(0),
    "sqrt": _at_zero(0),
    "rsqrt": _at_zero(0),
    "pow": _pow,
    "maximum": _tie(0, 1),
    "minimum": _tie(0, 1),
    "maximum_grad": _tie(1, 2),
    "clamp": _bounds(0),
    "clamp_grad": _bounds(1),
    "reduce_keep": lambda a, at: (_runner_up(a[0], at["axis"]) if at["op"] == "max" else
                                  _runner_up(-_f64(a[0]), at["axis"]) if at["op"] == "min" else []),
    "pow_tensor": _at_zero(0),    # x^e: a pole or a domain edge at x = 0
    "cumprod": _at_zero(0),       # its VJP divides by x
    **{op: (lambda a, at: _gaps(a[0], at["axis"])) for op in ("sort", "argsort", "topk", "argtopk")},
    "categorical": _categorical,
    "argmax": lambda a, at: _runner_up(a[0], at["axis"]),
    **{cmp: _tie(0, 1) for cmp in ("lt", "le", "gt", "ge", "eq", "ne")},
}

# Smooth in every float operand (`where` and `gather` are smooth given their Bool / I64
# operands, which a step never moves: what computes a condition is recorded there; a
# `cast` is the identity in float64, and its rounding is the ROUNDING rule's business).
SMOOTH_OPS = frozenset({
    "add", "sub", "mul", "neg", "exp", "tanh", "sigmoid", "matmul", "transpose", "reshape",
    "broadcast", "slice", "concat", "gather", "softmax", "log_softmax", "take_along_axis",
    "scatter_add", "scatter_along_axis", "square", "erf", "gelu", "gelu_grad", "cast", "iota",
    "tril", "where", "cumsum", "logsumexp",
    # the random ops draw from their key alone (no float operand a step could move)
    "random_split", "random_fold_in", "random_bits", "random_uniform", "random_normal", "bernoulli",
})


def trace(program: Program, name: str, args: Sequence[object],
          dtype: DTypeLike | None = None) -> tuple[interp.Value, list[Array]]:
    """Run `name` in the interpreter; its value and the signed kink distances of every
    non-smooth op application, in evaluation order."""
    sites: list[Array] = []

    def observe(node: OpApp, operands: list[Array]) -> None:
        row = KINKS.get(node.op)
        if row is not None:
            sites.extend(row(operands, node.attrs))
    value = interp.run_function(program, name, args, dtype=dtype, observe=observe)
    return value, sites


def rounding_margins(program: Program, name: str, args: Sequence[object], base: list[Array]) -> list[Array]:
    """Per kink site, how far the declared dtypes' rounding may move it: ROUNDING_SLACK
    times |distance in the declared dtypes - distance in float64 (`base`)|."""
    _, declared = trace(program, name, args)
    if len(declared) != len(base):     # the dtype changed the branch structure: all ambiguous
        return [np.full(np.shape(d), np.inf) for d in base]
    with np.errstate(invalid="ignore"):
        return [ROUNDING_SLACK * np.abs(d - b) for d, b in zip(declared, base)]


def classify(base: list[Array], plus: list[Array], minus: list[Array],
             margins: list[Array] | None = None) -> str:
    """SMOOTH, STEP or ROUNDING for a step from the point whose kink distances are `base`
    to `plus` and `minus` (the rule in the module docstring)."""
    if not len(base) == len(plus) == len(minus):
        return STEP        # the step changed which non-smooth ops run
    verdict = SMOOTH
    with np.errstate(invalid="ignore"):
        for i, (d0, dp, dm) in enumerate(zip(base, plus, minus)):
            depends = dp != dm
            if not depends.any():
                continue
            dist = np.abs(d0)
            if margins is not None and np.any(depends & (dist <= margins[i])):
                return ROUNDING
            reach = np.maximum(np.abs(dp - d0), np.abs(dm - d0))
            if np.any(depends & (dist <= reach)):
                verdict = STEP
    return verdict
