"""Directional finite differences for VJP exports (`kinac validate --vjp f`, issue 28).

`f_vjp(x.., g_y) -> (y, g_x..)` (compiler/ad/vjp_export.py) must satisfy, for any direction
d over f's float parameters,

    sum_i <g_i, d_i>  =  d/dt <g_y, f(x + t d)> at t = 0,

the right side by central differences of the interpreter in float64.  The check draws
DIRECTIONS random directions (N(0, 1) per element, so every cotangent element takes part,
unlike the per-coordinate check of reverseMode wrappers that samples large tensors), and
compares the library's left side with the difference quotient, element bound
atol + rtol * sum |g_i * d_i| (the sum's own magnitude, so cancellation does not demand
digits the dtype does not have).  A direction whose step reaches a kink at every step of
validate.FD_STEPS (compiler/oracle/kinks.py) is skipped and counted.
"""
from __future__ import annotations

import numpy as np

from compiler.core.types import TensorType
from compiler.ir import nodes as ir
from compiler.oracle.tolerance import OutputCheck, compare
from compiler.runtime.arrays import Array

DIRECTIONS = 4
VJP_SUFFIX = "_vjp"


def target_of(program: ir.Program, fn: ir.Function, vjp_names: set[str]) -> str | None:
    """The function fn is the VJP export of, when fn is one (its name `f_vjp` for an f given
    to --vjp); None otherwise."""
    target = fn.name[: -len(VJP_SUFFIX)]
    return target if fn.name.endswith(VJP_SUFFIX) and target in vjp_names and target in program.functions else None


def _directional(program: ir.Program, target: str, x64: list[Array], d: list[Array | None], g_y: Array,
                 base: list[Array], margins: list[Array], steps: tuple[float, ...]) -> float | None:
    from compiler.oracle import kinks
    for step in steps:
        totals, sites = [], []
        for sign in (1.0, -1.0):
            xs = [x if dx is None else x + sign * step * dx for x, dx in zip(x64, d)]
            value, seen = kinks.trace(program, target, xs, np.float64)
            totals.append(float(np.sum(np.asarray(value, np.float64) * g_y)))
            sites.append(seen)
        verdict = kinks.classify(base, sites[0], sites[1], margins)
        if verdict == kinks.SMOOTH:
            return (totals[0] - totals[1]) / (2 * step)
        if verdict == kinks.ROUNDING:
            return None
    return None


def check_vjp(program: ir.Program, target: str, args: list[Array], got: list[Array],
              steps: tuple[float, ...], tolerances: dict[str, tuple[float, float]], seed: int = 0) -> OutputCheck:
    """One check: the library's sum_i <g_i, d_i> against the interpreter's directional
    derivative, over DIRECTIONS random directions.  args: f_vjp's inputs (f's, then g_y);
    got: f_vjp's results (y, then the cotangents of f's float parameters)."""
    from compiler.oracle import kinks
    program = ir.reachable(program, [target])
    fn = program.functions[target]
    f_args, g_y = args[:-1], np.asarray(args[-1], np.float64)
    x64 = [a.astype(np.float64) if p.type.is_float else a for a, p in zip(f_args, fn.params)]
    _, base = kinks.trace(program, target, x64, np.float64)
    margins = kinks.rounding_margins(program, target, f_args, base)
    cotangents = iter(np.asarray(g, np.float64) for g in got[1:])
    grads = [next(cotangents) if p.type.is_float else None for p in fn.params]
    rng = np.random.default_rng(seed)
    lhs, rhs, magnitude = [], [], []
    skipped = 0
    for _ in range(DIRECTIONS):
        d = [rng.standard_normal(np.shape(a)) if p.type.is_float else None for a, p in zip(f_args, fn.params)]
        fd = _directional(program, target, x64, d, g_y, base, margins, steps)
        if fd is None:
            skipped += 1
            continue
        terms = [g * dx for g, dx in zip(grads, d) if g is not None and dx is not None]
        lhs.append(sum(float(np.sum(t)) for t in terms))
        rhs.append(fd)
        magnitude.append(sum(float(np.sum(np.abs(t))) for t in terms))
    dtype = fn.ret_type.dtype.value if isinstance(fn.ret_type, TensorType) else "F32"
    check = compare("<g_x, d> (vjp)", np.array(lhs), np.array(rhs), dtype, "directional FD", tolerances,
                    magnitude=np.array(magnitude))
    check.skipped = skipped
    return check
